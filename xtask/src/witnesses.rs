//! `cargo xtask witnesses`: the per-layer table of how closely the gradient witnesses agree.
//!
//! Runs the model crate's tests and the optimizer parity tests with `NERVUS_WITNESS_LOG` set, so
//! that every `worst_rel` comparison a test makes is appended to a log under the test's name
//! (see `nervus_models::compare`). A test whose name says `numerical` compares a hand-derived
//! backward with a centred difference; one whose name says `autodiff`, `burn` or `modules`
//! compares the hand-derived pass (or the reference optimizer) with the Burn module's autodiff (or
//! Burn's optimizer) on the same weights. The worst figure of every such test goes into a table
//! per layer: `docs/witnesses.md` and `docs/witness-system.md` between `<!-- witnesses:table -->` markers.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

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
        let (test, v) = split_line(i, line)?;
        // `test#name#tol`: a named figure (a fixture's tensor), read by `parse_fixtures`.
        if test.contains('#') {
            continue;
        }
        let w = worst.entry(test.to_string()).or_insert(0.0);
        *w = worse(*w, v);
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

/// The worse of two differences; a NaN or an infinity on either side is infinite, so that it
/// shows rather than vanishing under `max`.
fn worse(a: f64, b: f64) -> f64 {
    if a.is_finite() && b.is_finite() {
        a.max(b)
    } else {
        f64::INFINITY
    }
}

/// One line of a witness log: the key before the tab and the number after it.
fn split_line(i: usize, line: &str) -> Result<(&str, f64)> {
    let (key, value) = line
        .split_once('\t')
        .with_context(|| format!("witness log line {}: no tab in `{line}`", i + 1))?;
    let v: f64 = value
        .trim()
        .parse()
        .with_context(|| format!("witness log line {}: `{value}` is not a number", i + 1))?;
    Ok((key, v))
}

/// One tensor of a fixture test: how far ours is from the fixture and the bound the test holds it to.
#[derive(Clone, Debug, PartialEq)]
pub struct FixtureRow {
    pub test: String,
    pub name: String,
    pub worst: f64,
    pub tol: f64,
}

/// Reads the named figures (`test#name#tol<TAB>value`, written by `compare::record`) of a log.
pub fn parse_fixtures(log: &str) -> Result<Vec<FixtureRow>> {
    let mut rows: BTreeMap<(String, String), FixtureRow> = BTreeMap::new();
    for (i, line) in log.lines().enumerate() {
        let (key, v) = split_line(i, line)?;
        let mut parts = key.splitn(3, '#');
        let (Some(test), Some(name), Some(tol)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        // The test's own name, without its file's module in the test binary.
        let test = test.rsplit("::").next().unwrap_or(test);
        let tol: f64 = tol.parse().with_context(|| {
            format!("witness log line {}: bound `{tol}` is not a number", i + 1)
        })?;
        let row = rows
            .entry((test.to_string(), name.to_string()))
            .or_insert(FixtureRow {
                test: test.to_string(),
                name: name.to_string(),
                worst: 0.0,
                tol,
            });
        row.worst = worse(row.worst, v);
    }
    Ok(rows.into_values().collect())
}

/// The fixture table: per fixture test, the output's and the loss's difference, and the worst
/// gradient of each group held to one bound (the largest group first), with the bounds in the
/// same order.
pub fn fixture_table(rows: &[FixtureRow]) -> String {
    let mut by_test: BTreeMap<&str, Vec<&FixtureRow>> = BTreeMap::new();
    for r in rows {
        by_test.entry(&r.test).or_default().push(r);
    }
    let mut out = String::from(
        "| fixture | output | loss | worst gradient | bound |\n|---|---|---|---|---|\n",
    );
    for (test, rows) in by_test {
        let label = if test.contains("gpt2") {
            "GPT-2 (transformers)"
        } else if test.contains("dit") {
            "DiT (diffusers)"
        } else {
            test
        };
        let show = |r: &FixtureRow| format!("{:.1e}", r.worst);
        let output = rows
            .iter()
            .filter(|r| !r.name.starts_with("grad.") && r.name != "loss")
            .map(|r| format!("{} {}", r.name, show(r)))
            .collect::<Vec<_>>()
            .join("; ");
        let loss = rows
            .iter()
            .find(|r| r.name == "loss")
            .map_or("–".to_string(), |r| show(r));
        // Gradients grouped by their bound; the bound most of them share comes first.
        let mut groups: Vec<(f64, Vec<&FixtureRow>)> = Vec::new();
        for r in rows.iter().filter(|r| r.name.starts_with("grad.")) {
            match groups.iter_mut().find(|(t, _)| *t == r.tol) {
                Some((_, g)) => g.push(r),
                None => groups.push((r.tol, vec![r])),
            }
        }
        groups.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
        let mut grads = Vec::new();
        let mut bounds = Vec::new();
        for (tol, g) in &groups {
            let worst = g
                .iter()
                .max_by(|a, b| a.worst.total_cmp(&b.worst))
                .expect("a group is never empty");
            let name = worst.name.trim_start_matches("grad.");
            grads.push(format!("{} (`{name}`) of {}", show(worst), g.len()));
            bounds.push(format!("{tol:.0e}"));
        }
        out.push_str(&format!(
            "| {label} | {output} | {loss} | {} | {} |\n",
            grads.join("; "),
            bounds.join("; ")
        ));
    }
    out
}

/// The markdown table: one row per layer, the worst figure of each kind and how many tests gave it.
pub fn table(witnesses: &[Witness]) -> String {
    let mut rows: BTreeMap<&str, [(f64, usize); 2]> = BTreeMap::new();
    for w in witnesses {
        let cell = &mut rows.entry(&w.layer).or_insert([(0.0, 0); 2])[w.kind as usize];
        cell.0 = worse(cell.0, w.worst);
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
    let mut cmd = crate::cargo::cargo();
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
        &[
            "-p",
            "nervus-training",
            "--test",
            "suite",
            "--",
            "optim_parity::",
        ],
        &dir.join("optim.log"),
    )?;
    let fixtures = run_tests(
        &[
            "-p",
            "nervus-models",
            "--test",
            "suite",
            "--",
            "gpt2_fixture::",
            "dit_fixture::",
        ],
        &dir.join("fixtures.log"),
    )?;
    let mut all = parse(&models, None)?;
    all.extend(parse(&optim, Some("optimizer"))?);
    let body = table(&all);
    println!("{body}");
    let fixture_rows = parse_fixtures(&fixtures)?;
    if fixture_rows.is_empty() {
        bail!("the fixture tests logged no figures (do they call compare::record?)");
    }
    let fixture_body = fixture_table(&fixture_rows);
    println!("{fixture_body}");
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
         steps against the reference's).\n\n{body}\n\n## Per test\n\n| test | kind | worst |\n|---|---|---|\n{}\n\n\
         ## The Hugging Face fixtures\n\n\
         Our models (f64) against the outputs, losses and gradients transformers and diffusers \
         computed (f32) for the scrambled checkpoints in `models/tests/fixtures/`; worst relative \
         difference per tensor, and the bound the test holds it to.\n\n{fixture_body}\n\n\
         | test | tensor | worst | bound |\n|---|---|---|---|\n{}",
        all.iter()
            .map(|w| format!("| `{}` | {:?} | {:.2e} |\n", w.test, w.kind, w.worst))
            .collect::<String>(),
        fixture_rows
            .iter()
            .map(|r| format!(
                "| `{}` | `{}` | {:.2e} | {:.0e} |\n",
                r.test, r.name, r.worst, r.tol
            ))
            .collect::<String>()
    );
    std::fs::write(DOC, doc)?;
    for (name, text) in [("table", &body), ("fixtures", &fixture_body)] {
        if !crate::tables::write_marked("witnesses", name, text)? {
            eprintln!("no page has <!-- witnesses:{name} --> markers: that table is only in {DOC}");
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

    #[test]
    fn the_fixture_table_names_the_worst_gradient_and_every_other_bound() {
        let log = "gpt_fix\t1e-9\n\
                   gpt_fix#logits#2e-5\t3e-7\n\
                   gpt_fix#loss#2e-5\t7e-8\n\
                   gpt_fix#grad.a#2e-5\t1e-7\n\
                   gpt_fix#grad.b#2e-5\t6e-7\n\
                   gpt_fix#grad.b#2e-5\t2e-7\n\
                   gpt_fix#grad.c#2e-4\t5e-5\n";
        let rows = parse_fixtures(log).unwrap();
        assert_eq!(rows.len(), 5, "{rows:?}");
        let t = fixture_table(&rows);
        assert!(
            t.contains(
                "| gpt_fix | logits 3.0e-7 | 7.0e-8 | 6.0e-7 (`b`) of 2; 5.0e-5 (`c`) of 1 | 2e-5; 2e-4 |"
            ),
            "{t}"
        );
        // The named lines stay out of the per-layer table, and the bare line is no witness kind.
        assert!(parse(log, None).unwrap().is_empty());
        let nan = parse_fixtures("f#grad.a#1e-5\tNaN\nf#grad.a#1e-5\t1e-9\n").unwrap();
        assert!(nan[0].worst.is_infinite(), "a NaN is not lost under max");
    }
}
