//! Does the backend this binary was built for train like the CPU? Runs the same video DiT, the
//! same batches and the same optimizer for a few steps on the built backend and on flex (the CPU
//! backend every figure in the README comes from), and compares them step by step.
//!
//! `cargo run --release --features cuda --example backend_check` (or `wgpu`, with or without
//! `fusion`); exits non-zero, naming what differs, when they do not agree.

use anyhow::{Result, bail};
use clap::Parser;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving::Clips;
use nervus_training::backend;
use nervus_training::backend_check::{CheckOptions, Tolerances, compare};
use nervus_training::chosen;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Check that the built backend trains the video DiT like the CPU backend")]
struct Args {
    /// Transformer blocks.
    #[arg(long, default_value_t = CheckOptions::default().layers)]
    layers: usize,
    #[arg(long, default_value_t = CheckOptions::default().d_model)]
    d_model: usize,
    #[arg(long, default_value_t = CheckOptions::default().heads)]
    heads: usize,
    /// Clips a step.
    #[arg(long, default_value_t = CheckOptions::default().batch)]
    batch: usize,
    /// Optimizer steps compared.
    #[arg(long, default_value_t = CheckOptions::default().steps)]
    steps: usize,
    #[arg(long, default_value_t = CheckOptions::default().lr)]
    lr: f64,
    #[arg(long, default_value_t = CheckOptions::default().seed)]
    seed: u64,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let a = Args::parse();
    if a.heads == 0 || !a.d_model.is_multiple_of(a.heads) {
        bail!("--heads must divide --d-model");
    }
    if a.steps == 0 || a.batch == 0 {
        bail!("--steps and --batch must be at least 1");
    }
    let opts = CheckOptions {
        layers: a.layers,
        d_model: a.d_model,
        heads: a.heads,
        batch: a.batch,
        steps: a.steps,
        lr: a.lr,
        seed: a.seed,
        ..CheckOptions::default()
    };
    let clips = Arc::new(Clips::new(&Mnist::vendored().train));
    println!(
        "{opts:?}: a reference run on flex, then the tested run on {}",
        backend::NAME
    );
    let (reference, tested) = chosen::backend_check(&opts, clips).map_err(anyhow::Error::msg)?;
    let report = compare(&reference, &tested, Tolerances::default());
    print!("{}", report.summary(&reference, &tested));
    if !report.failures.is_empty() {
        bail!("{} does not train like flex", backend::NAME);
    }
    Ok(())
}
