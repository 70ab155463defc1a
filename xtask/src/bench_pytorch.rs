//! `cargo xtask bench pytorch`: this project's training step against PyTorch eager on the same
//! shapes, batch, optimizer, clipping and thread count, alternating round by round in one sitting.
//!
//! PyTorch runs `bench_pytorch.py` (written next to the build) in a child process per
//! measurement, with `torch.set_num_threads` at this machine's thread count; nervus runs in this
//! process on the chosen backend. Medians are reported, with the lowest and highest round-by-round
//! ratio.

use crate::measure::{spread, threads};
use anyhow::{Context, Result, bail};
use nervus_training::bench::{dit_images_per_sec, gpt_chars_per_sec, median};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = include_str!("bench_pytorch.py");

/// A workload both sides run.
struct Workload {
    /// The script's name for it.
    name: &'static str,
    label: &'static str,
    unit: &'static str,
    steps: usize,
}

const WORKLOADS: [Workload; 3] = [
    Workload {
        name: "gpt-small",
        label: "GPT small: 2 layers, d 64, 4 heads, context 64 (batch 16)",
        unit: "characters/s",
        steps: 100,
    },
    Workload {
        name: "gpt-large",
        label: "GPT large: 6 layers, d 256, 8 heads, context 256 (batch 16)",
        unit: "characters/s",
        steps: 6,
    },
    Workload {
        name: "dit",
        label: "DiT digits: 4 layers, d 128, 49 tokens (batch 64)",
        unit: "images/s",
        steps: 30,
    },
];

/// Checks that `python` imports `modules` (torch and diffusers here, for the DiT row; torch and
/// transformers for `bench generate`); one line on what to install when not.
pub(crate) fn check_python(python: &str, modules: &[&str]) -> Result<()> {
    let ok = Command::new(python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        bail!(
            "`{python}` cannot import {}: install them with `{python} -m pip install {}`, or name another interpreter with --python PATH (or --python none)",
            modules.join(" and "),
            modules.join(" ")
        );
    }
    Ok(())
}

fn script_path() -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-pytorch");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("bench_pytorch.py");
    std::fs::write(&path, SCRIPT).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// One PyTorch measurement in a child process.
fn torch_rate(python: &str, script: &Path, w: &Workload, steps: usize) -> Result<f64> {
    let out = Command::new(python)
        .arg(script)
        .args(["--workload", w.name, "--steps", &steps.to_string()])
        .args(["--threads", &threads().to_string()])
        .output()
        .with_context(|| format!("running {python} {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "PyTorch's {} run failed: {}",
            w.name,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim())
        .with_context(|| format!("reading PyTorch's output `{}`", line.trim()))?;
    v["rate"]
        .as_f64()
        .filter(|r| r.is_finite())
        .context("PyTorch's output has no finite rate")
}

/// One nervus measurement on the chosen backend.
fn nervus_rate(w: &Workload, steps: usize, parts: usize) -> f64 {
    use nervus_models::gpt::GptSize;
    use nervus_training::backend::{Train, device};
    match w.name {
        "gpt-small" | "gpt-large" => {
            let size = if w.name == "gpt-small" {
                GptSize::Small
            } else {
                GptSize::Large
            };
            gpt_chars_per_sec::<Train>(&size.config(65), 16, parts, steps, Some(1.0), &device())
        }
        _ => dit_images_per_sec::<Train>(
            &nervus_models::dit::DitConfig::digits(),
            64,
            parts,
            steps,
            &device(),
        ),
    }
}

/// The table, printed; `only` picks workloads by name (all when empty).
pub fn run(
    rounds: usize,
    steps: Option<usize>,
    python: &str,
    only: &[String],
    parts: usize,
) -> Result<()> {
    // `--python none`: nervus alone (for a profiler), no PyTorch runs and no ratios.
    if python == "none" {
        return nervus_alone(rounds, steps, only, parts);
    }
    check_python(python, &["torch", "diffusers"])?;
    let script = script_path()?;
    let chosen = choose(only)?;
    println!(
        "nervus ({}, {parts} part(s) a batch, fused ops {}) against PyTorch eager, {} threads, {rounds} alternating rounds, medians",
        nervus_training::backend::NAME,
        if nervus_models::fused::enabled() {
            "on"
        } else {
            "off"
        },
        threads()
    );
    let mut t = String::new();
    writeln!(
        t,
        "| workload | unit | nervus | PyTorch eager | nervus / PyTorch | within rounds |"
    )?;
    writeln!(t, "|---|---|---|---|---|---|")?;
    for w in chosen {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let n = steps.unwrap_or(w.steps);
        for r in 0..rounds {
            ours.push(nervus_rate(w, n, parts));
            theirs.push(torch_rate(python, &script, w, n)?);
            eprintln!(
                "  {} round {}/{rounds}: nervus {:.0}, PyTorch {:.0}",
                w.name,
                r + 1,
                ours[r],
                theirs[r]
            );
        }
        let (lo, hi) = spread(&ours, &theirs);
        writeln!(
            t,
            "| {} | {} | {:.0} | {:.0} | {:.2}× | {lo:.2}× – {hi:.2}× |",
            w.label,
            w.unit,
            median(&ours),
            median(&theirs),
            median(&ours) / median(&theirs)
        )?;
    }
    print!("{t}");
    Ok(())
}

fn choose(only: &[String]) -> Result<Vec<&'static Workload>> {
    let chosen: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| only.is_empty() || only.iter().any(|o| o == w.name))
        .collect();
    if chosen.is_empty() {
        bail!("no workload matches {only:?}: try gpt-small, gpt-large, dit");
    }
    Ok(chosen)
}

/// `--python none`: this project's rates alone, one line per round (to run under a profiler).
fn nervus_alone(rounds: usize, steps: Option<usize>, only: &[String], parts: usize) -> Result<()> {
    for w in choose(only)? {
        let n = steps.unwrap_or(w.steps);
        let rates: Vec<f64> = (0..rounds).map(|_| nervus_rate(w, n, parts)).collect();
        println!(
            "{} ({parts} part(s)): {:.0} {} (median of {rounds})",
            w.name,
            median(&rates),
            w.unit
        );
    }
    Ok(())
}
