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
#[should_panic(expected = "w: worst relative difference 2.500e-1 exceeds 1e-1")]
fn assert_close_fails_outside_its_tolerance() {
    assert_close("w", &[1.0, 2.5], &[1.0, 2.0], 0.1);
}

#[cfg(test)]
#[test]
fn assert_close_passes_at_its_tolerance() {
    assert_close("w", &[1.0, 2.5], &[1.0, 2.0], 0.25);
}

/// The draws are normal with the asked-for spread: mean, standard deviation and the share within
/// one σ and beyond two (20,000 draws: these bounds are 5 standard errors or more wide).
#[cfg(test)]
#[test]
fn randn_draws_are_normal_with_the_asked_for_spread() {
    let n = 20_000;
    let v = randn(7, n, 3.0);
    assert_eq!(v.len(), n);
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
    let within = |k: f64| v.iter().filter(|x| x.abs() < k * 3.0).count() as f64 / n as f64;
    assert!(mean.abs() < 0.11, "mean {mean}");
    assert!((sd - 3.0).abs() < 0.08, "sd {sd}");
    assert!(
        (within(1.0) - 0.6827).abs() < 0.017,
        "within 1σ {}",
        within(1.0)
    );
    assert!(
        (within(2.0) - 0.9545).abs() < 0.008,
        "within 2σ {}",
        within(2.0)
    );
    assert!(v.iter().all(|x| x.is_finite()));
}

/// Every test's point is drawn from these sequences and every tolerance was set at those points:
/// the draws must be the same on every machine and build, and differ between seeds.
#[cfg(test)]
#[test]
fn randn_is_the_same_sequence_everywhere_and_seeds_differ() {
    assert_eq!(randn(11, 64, 1.0), randn(11, 64, 1.0));
    let firsts: Vec<u64> = (0..256).map(|s| randn(s, 1, 1.0)[0].to_bits()).collect();
    let mut distinct = firsts.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), firsts.len(), "two seeds gave the same draw");
    let pinned: Vec<String> = randn(1, 3, 1.0)
        .iter()
        .map(|v| format!("{v:.12}"))
        .collect();
    assert_eq!(pinned, PINNED_RANDN_SEED_1);
}

#[cfg(test)]
const PINNED_RANDN_SEED_1: [&str; 3] = ["-0.506164240660", "0.022458179848", "1.262743997998"];

/// The centred difference of a cubic is exact up to its known error: for `c·x³` it is
/// `3c·x² + c·h²`.
#[cfg(test)]
#[test]
fn numerical_grad_of_a_cubic_is_its_derivative_plus_c_h_squared() {
    let c = [0.5, -2.0, 3.0];
    let x = [1.5, -0.7, 2.2];
    let h = 1e-2;
    let f = |x: &[f64]| x.iter().zip(&c).map(|(x, c)| c * x.powi(3)).sum::<f64>();
    let g = numerical_grad(&x, h, f);
    assert_eq!(g.len(), 3);
    for i in 0..3 {
        let want = 3.0 * c[i] * x[i] * x[i] + c[i] * h * h;
        assert!(
            (g[i] - want).abs() < 1e-9,
            "coordinate {i}: {} against {want}",
            g[i]
        );
    }
}

#[cfg(test)]
#[test]
fn worst_rel_fails_on_nan_and_length() {
    assert!(worst_rel(&[f64::NAN], &[1.0]).is_infinite());
    assert!(worst_rel(&[1.0], &[f64::NAN]).is_infinite());
    assert!(worst_rel(&[1.0], &[1.0, 2.0]).is_infinite());
    assert_eq!(worst_rel(&[1.0, 2.5], &[1.0, 2.0]), 0.25);
}
