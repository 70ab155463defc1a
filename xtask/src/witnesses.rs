//! `cargo xtask witnesses`: the per-layer table of how closely the gradient witnesses agree.
//!
//! Runs the model crate's tests and the optimizer parity tests with `NERVUS_WITNESS_LOG` set, so
//! that every `worst_rel` comparison a test makes is appended to a log under the test's name
//! (see `nervus_models::compare`). A test whose name says `numerical` compares a hand-derived
//! backward with a centred difference; one whose name says `autodiff`, `burn` or `modules`
//! compares the hand-derived pass (or the reference optimizer) with the Burn module's autodiff (or
//! Burn's optimizer) on the same weights. The worst figure of every such test goes into a table
//! per layer: `docs/witnesses.md` and the README between `<!-- witnesses:table -->` markers.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const DOC: &str = "docs/witnesses.md";

#[derive(clap::Args)]
pub struct WitnessArgs {
    /// Only print the table; leave the README and `docs/` alone.
    #[arg(long)]
    print: bool,
}

/// What a test compares, read from its name.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Kind {
    /// Hand-derived backward against a centred numerical difference.
    Numerical,
    /// Hand-derived pass against Burn's autodiff (or a Burn optimizer against the reference one).
    Autodiff,
}

/// One test's worst comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Witness {
    pub layer: String,
    pub kind: Kind,
    pub test: String,
    pub worst: f64,
}

/// Classifies one test by its path (`reference::gelu::tests::gelu_backward_matches_numerical`, or
/// a bare function name in an integration test, which then needs `binary` to name its layer).
/// `None` for tests that are neither kind of witness (exactness checks, behaviour, the planted
/// mistakes, whose large differences are the point).
pub fn classify(path: &str, binary: Option<&str>) -> Option<(String, Kind)> {
    let parts: Vec<&str> = path.split("::").collect();
    let name = *parts.last()?;
    if parts.contains(&"mistakes") {
        return None;
    }
    let kind = if name.contains("numerical") {
        Kind::Numerical
    } else if name.contains("autodiff")
        || name.contains("burn")
        || name.contains("modules")
        || binary.is_some()
    {
        Kind::Autodiff
    } else {
        return None;
    };
    let layer = match binary {
        // `adamw_steps_with_clipping_match_the_reference` → `adamw` (optimizer parity).
        Some(b) => format!("{b}: {}", name.split('_').next().unwrap_or(name)),
        None => {
            let at = parts
                .iter()
                .position(|p| *p == "reference")
                .map_or(0, |i| i + 1);
            parts.get(at).filter(|p| **p != "tests")?.to_string()
        }
    };
    Some((layer, kind))
}

/// Reads a witness log: one `test<TAB>value` line per comparison; keeps each test's worst.
pub fn parse(log: &str, binary: Option<&str>) -> Result<Vec<Witness>> {
    let mut worst: BTreeMap<String, f64> = BTreeMap::new();
    for (i, line) in log.lines().enumerate() {
        let (test, value) = line
            .split_once('\t')
            .with_context(|| format!("witness log line {}: no tab in `{line}`", i + 1))?;
        let v: f64 = value
            .trim()
            .parse()
            .with_context(|| format!("witness log line {}: `{value}` is not a number", i + 1))?;
        let w = worst.entry(test.to_string()).or_insert(0.0);
        // A NaN or infinity must show, not vanish under max.
        *w = if v.is_finite() && w.is_finite() {
            w.max(v)
        } else {
            f64::INFINITY
        };
    }
    Ok(worst
        .into_iter()
        .filter_map(|(test, worst)| {
            let (layer, kind) = classify(&test, binary)?;
            Some(Witness {
                layer,
                kind,
                test,
                worst,
            })
        })
        .collect())
}

/// The markdown table: one row per layer, the worst figure of each kind and how many tests gave it.
pub fn table(witnesses: &[Witness]) -> String {
    let mut rows: BTreeMap<&str, [(f64, usize); 2]> = BTreeMap::new();
    for w in witnesses {
        let cell = &mut rows.entry(&w.layer).or_insert([(0.0, 0); 2])[w.kind as usize];
        cell.0 = if w.worst.is_finite() {
            cell.0.max(w.worst)
        } else {
            f64::INFINITY
        };
        cell.1 += 1;
    }
    let show = |(worst, n): (f64, usize)| match n {
        0 => "–".to_string(),
        1 => format!("{worst:.1e}"),
        n => format!("{worst:.1e} ({n} tests)"),
    };
    let mut out = String::from(
        "| layer | hand-derived vs numerical | hand-derived vs Burn autodiff |\n|---|---|---|\n",
    );
    for (layer, cells) in rows {
        out.push_str(&format!(
            "| {layer} | {} | {} |\n",
            show(cells[0]),
            show(cells[1])
        ));
    }
    out
}

/// Runs `cargo test --release` with the witness log set and returns the log's text.
fn run_tests(args: &[&str], log: &Path) -> Result<String> {
    let _ = std::fs::remove_file(log);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["test", "--release"]).args(args);
    cmd.env(nervus_models::compare::WITNESS_LOG, log);
    eprintln!("running {cmd:?}");
    let status = cmd.status()?;
    if !status.success() {
        bail!("the tests failed ({status}): no table from a failing suite");
    }
    std::fs::read_to_string(log).with_context(|| {
        format!(
            "{}: no comparisons were logged (is {} read by this build?)",
            log.display(),
            nervus_models::compare::WITNESS_LOG
        )
    })
}

pub fn run(args: WitnessArgs) -> Result<()> {
    let dir = std::env::current_dir()?.join("target").join("witnesses");
    std::fs::create_dir_all(&dir)?;
    let models = run_tests(&["-p", "nervus-models", "--lib"], &dir.join("models.log"))?;
    let optim = run_tests(
        &["-p", "nervus-training", "--test", "optim_parity"],
        &dir.join("optim.log"),
    )?;
    let mut all = parse(&models, None)?;
    all.extend(parse(&optim, Some("optimizer"))?);
    let body = table(&all);
    println!("{body}");
    if args.print {
        return Ok(());
    }
    let doc = format!(
        "# Gradient witnesses, worst relative difference per layer\n\n\
         Written by `cargo xtask witnesses` from the comparisons the tests make \
         (`max|a − b| / max|b|` per tensor, the worst over every tensor a test compares, then the \
         worst over the tests of a layer). Numerical: the hand-derived backward against a centred \
         difference in f64. Burn autodiff: the hand-derived pass against the Burn module's autodiff \
         gradients on `NdArray<f64>` with the same weights (for the optimizer rows, Burn's optimizer \
         steps against the reference's).\n\n{body}\n\n## Per test\n\n| test | kind | worst |\n|---|---|---|\n{}",
        all.iter()
            .map(|w| format!("| `{}` | {:?} | {:.2e} |\n", w.test, w.kind, w.worst))
            .collect::<String>()
    );
    std::fs::write(DOC, doc)?;
    let readme = std::fs::read_to_string("README.md").context("README.md")?;
    match crate::tables::replace_between(&readme, "witnesses", "table", &body) {
        Some(new) => std::fs::write("README.md", new)?,
        None => {
            eprintln!("README has no <!-- witnesses:table --> markers: the table is only in {DOC}")
        }
    }
    eprintln!("wrote {DOC}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_are_read_by_their_names() {
        let c = |p| classify(p, None);
        assert_eq!(
            c("reference::gelu::tests::gelu_backward_matches_numerical"),
            Some(("gelu".into(), Kind::Numerical))
        );
        assert_eq!(
            c("reference::gelu::tests::gelu_backward_matches_burn_autodiff"),
            Some(("gelu".into(), Kind::Autodiff))
        );
        assert_eq!(c("reference::gelu::tests::gelu_is_the_tanh_form"), None);
        assert_eq!(
            c("reference::mistakes::tests::gelu_missing_its_three_is_caught"),
            None
        );
        assert_eq!(
            classify("muon_steps_match_the_reference", Some("optimizer")),
            Some(("optimizer: muon".into(), Kind::Autodiff))
        );
    }

    #[test]
    fn a_test_keeps_its_worst_and_a_nan_is_not_lost() {
        let log = "reference::relu::tests::relu_backward_matches_numerical\t1e-9\n\
                   reference::relu::tests::relu_backward_matches_numerical\t3e-8\n\
                   reference::relu::tests::relu_backward_matches_burn_autodiff\tinf\n\
                   reference::relu::tests::relu_backward_matches_burn_autodiff\t1e-12\n";
        let w = parse(log, None).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].kind, Kind::Autodiff);
        assert!(w[0].worst.is_infinite());
        assert_eq!(w[1].worst, 3e-8);
        let t = table(&w);
        assert!(t.contains("| relu | 3.0e-8 | inf |"), "{t}");
        assert!(parse("no tab here", None).is_err());
    }
}
