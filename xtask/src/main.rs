//! `cargo xtask <command>`: orchestration for the workspace. Model code lives in the library
//! crates; this binary only runs it and writes down what it measured.
//!
//! A GPU backend is a cargo feature of this binary, so `cargo xtask bench gpt --features cuda`
//! re-runs this binary through cargo with that feature turned on.

mod bench;
mod bench_generate;
mod bench_pytorch;
mod cargo;
mod kill_test;
mod measure;
mod mutants;
mod retrieval;
mod rust_book;
mod tables;
mod witnesses;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    about = "Workspace tasks: benchmarks, tables, pre-registration, mutation testing, gradient witnesses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Cargo features to build this tool with (e.g. `cuda`, `wgpu`); it re-runs itself with them.
    #[arg(long, global = true)]
    features: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Throughput benchmarks, interleaved rounds, medians and ratios against a baseline measured
    /// in the same run.
    Bench(bench::BenchArgs),
    /// Run every experiment in docs/experiments (resumably, in parallel) and rewrite the tables
    /// in docs/experiments.md and docs/tables/.
    ReproduceTables(tables::TablesArgs),
    /// Write an experiment spec's sha256 and the time into docs/experiments/registry.json.
    Preregister(tables::RegisterArgs),
    /// Mutation testing of the gradient witnesses (cargo-mutants, installed on first use), in
    /// slices if need be; rewrites docs/mutants/ and the README's score.
    Mutants(mutants::MutantsArgs),
    /// Run the gradient tests and write the table of worst differences per layer (hand-derived
    /// against numerical, and against Burn's autodiff) into docs/witnesses.md and docs/witness-system.md.
    Witnesses(witnesses::WitnessArgs),
    /// Train a short real run, SIGKILL it at random moments, resume it after each kill, and
    /// compare its end with the same run never interrupted, byte for byte.
    KillTest(kill_test::KillArgs),
    /// Build the Rust book from a checkout with mdbook, crawl it on loopback, and write the
    /// retrieval corpus into datasets/data/rust-book/.
    RustBook(rust_book::RustBookArgs),
    /// Score retrieval on the labelled questions (recall@1, recall@5, MRR; with and without
    /// stemming and the specific-term rule; a BM25 grid; index and query times) and rewrite the
    /// tables in README.md and docs/retrieval.md.
    Retrieval(retrieval::RetrievalArgs),
    /// (internal) One run of one experiment, in a process of its own.
    #[command(hide = true)]
    RunOne(tables::RunOneArgs),
}

const REEXEC: &str = "NERVUS_XTASK_FEATURES";

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(features) = &cli.features
        && std::env::var(REEXEC).ok().as_deref() != Some(features.as_str())
    {
        // Drop `--features X` and hand the rest to a build of this tool with those features.
        let mut args: Vec<String> = Vec::new();
        let mut skip = false;
        for a in std::env::args().skip(1) {
            if skip {
                skip = false;
                continue;
            }
            if a == "--features" {
                skip = true;
                continue;
            }
            if a.starts_with("--features=") {
                continue;
            }
            args.push(a);
        }
        let status = cargo::cargo()
            .args([
                "run",
                "--quiet",
                "--release",
                "--package",
                "xtask",
                "--features",
                features,
                "--",
            ])
            .args(&args)
            .env(REEXEC, features)
            .status()?;
        if !status.success() {
            bail!("xtask with features `{features}` failed ({status})");
        }
        return Ok(());
    }
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::ReproduceTables(args) => tables::reproduce(args),
        Command::Preregister(args) => tables::preregister(args),
        Command::RunOne(args) => tables::run_one(args),
        Command::Mutants(args) => mutants::run(args),
        Command::Witnesses(args) => witnesses::run(args),
        Command::KillTest(args) => kill_test::run(args),
        Command::RustBook(args) => rust_book::run(args),
        Command::Retrieval(args) => retrieval::run(args),
    }
}
