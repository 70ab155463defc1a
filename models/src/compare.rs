//! Comparisons that cannot pass on broken numbers, and the numerical tools the gradient checks
//! use. Public so the integration tests (fixtures, parity suites) share them.

/// Worst difference relative to the size of the expected tensor: `max|got − want| / max|want|`
/// (llm.c's per-tensor measure). Infinite when either side holds a NaN or an infinity, or when the
/// lengths differ, so that a comparison can never pass on broken numbers.
pub fn worst_rel(got: &[f64], want: &[f64]) -> f64 {
    let r = if got.len() != want.len() || got.iter().chain(want).any(|v| !v.is_finite()) {
        f64::INFINITY
    } else {
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
        if scale == 0.0 { worst } else { worst / scale }
    };
    witness(r);
    r
}

/// The environment variable naming the file [`worst_rel`] appends its results to.
pub const WITNESS_LOG: &str = "NERVUS_WITNESS_LOG";

/// Logs one named figure of a test, with the bound the test holds it to: a fixture's difference
/// for one tensor (`grad.h.0.attn.c_attn.bias`, `loss`). The line's key is
/// `<thread name>#<name>#<tol>`, which `cargo xtask witnesses` reads into the fixture table. Does
/// nothing unless [`WITNESS_LOG`] is set.
pub fn record(name: &str, r: f64, tol: f64) {
    log_line(&format!("#{name}#{tol:e}"), r);
}

/// When [`WITNESS_LOG`] names a file, appends `<thread name>\t<r>` to it. Under the test harness a
/// test runs on a thread named after its path (`reference::gelu::tests::gelu_backward_...`), so
/// the file ends up holding every comparison each test made; `cargo xtask witnesses` turns it into
/// the per-layer table of worst differences. Without the variable this does nothing.
fn witness(r: f64) {
    log_line("", r);
}

/// Appends `<thread name><suffix>\t<r>` to the witness log, if there is one.
fn log_line(suffix: &str, r: f64) {
    use std::io::Write;
    static LOG: std::sync::OnceLock<Option<std::sync::Mutex<std::fs::File>>> =
        std::sync::OnceLock::new();
    let log = LOG.get_or_init(|| {
        let path = std::env::var_os(WITNESS_LOG)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(std::sync::Mutex::new(file))
    });
    if let Some(Ok(mut file)) = log.as_ref().map(|m| m.lock()) {
        let thread = std::thread::current();
        // One write per line, so lines from parallel tests do not interleave.
        let line = format!("{}{suffix}\t{r:e}\n", thread.name().unwrap_or("?"));
        let _ = file.write_all(line.as_bytes());
    }
}

/// Fails unless `worst_rel(got, want) <= tol`, naming the tensor and the figure.
#[track_caller]
pub fn assert_close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    let r = worst_rel(got, want);
    assert!(
        r <= tol,
        "{name}: worst relative difference {r:.3e} exceeds {tol:.0e}"
    );
}

/// Deterministic normal draws (SplitMix64 + Box–Muller) for test inputs: `n` values of mean 0 and
/// standard deviation `std`.
pub fn randn(seed: u64, n: usize, std: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (1.0 - next(), next());
            std * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect()
}

/// Centred difference of `f` at `x` along every coordinate, with step `h`.
pub fn numerical_grad(x: &[f64], h: f64, mut f: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let keep = x[i];
            x[i] = keep + h;
            let up = f(&x);
            x[i] = keep - h;
            let down = f(&x);
            x[i] = keep;
            (up - down) / (2.0 * h)
        })
        .collect()
}

#[cfg(test)]
#[test]
fn worst_rel_fails_on_nan_and_length() {
    assert!(worst_rel(&[f64::NAN], &[1.0]).is_infinite());
    assert!(worst_rel(&[1.0], &[f64::NAN]).is_infinite());
    assert!(worst_rel(&[1.0], &[1.0, 2.0]).is_infinite());
    assert_eq!(worst_rel(&[1.0, 2.5], &[1.0, 2.0]), 0.25);
}
