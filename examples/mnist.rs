//! Train the 784 → hidden → 10 MLP on MNIST.
//!
//! ```text
//! cargo run --release --example mnist                      # the 10k digits that ship with the repo
//! cargo run --release --example mnist -- --download        # the full 60k/10k set, verified
//! cargo run --release --example mnist --features wgpu      # same code on the GPU
//! ```

use anyhow::{Context, Result, bail};
use clap::Parser;
use nervus_datasets::{cache, mnist};
use nervus_training::backend;
use nervus_training::chosen;
use nervus_training::mnist::MnistOptions;
use nervus_training::optim::OptimizerSpec;
use nervus_training::report::{Reporter, Ui};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Train a two-layer perceptron on MNIST digits")]
struct Args {
    /// Hidden units.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Learning rate (the reference crate's measured best for SGD with momentum 0.9).
    #[arg(long, default_value_t = 0.02)]
    lr: f64,
    /// SGD momentum (0 for plain SGD). Momentum multiplies the effective step by 1/(1 - momentum).
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    /// Optimizer: sgd (with --momentum) or adamw.
    #[arg(long, default_value = "sgd", value_parser = ["sgd", "adamw"])]
    optimizer: String,
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Read the four MNIST files from this directory instead of the vendored 10k subset.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Fetch the full MNIST (60k/10k) into the cache directory ($NERVUS_DATA or ~/.cache/nervus),
    /// or into --data-dir if given, verifying each file's checksum.
    #[arg(long)]
    download: bool,
    /// Where to save the best model (config.json + model.safetensors).
    #[arg(long, default_value = "out/mnist/model")]
    save: PathBuf,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    overwrite: bool,
    /// Plain line output even in a terminal (no TUI).
    #[arg(long)]
    plain: bool,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    if !(0.0..1.0).contains(&args.momentum) {
        bail!(
            "--momentum {}: must be at least 0 and below 1",
            args.momentum
        );
    }
    let data = if args.download {
        let dir = args
            .data_dir
            .clone()
            .unwrap_or_else(|| mnist::full_dir(&cache::data_dir()));
        println!("fetching the full MNIST into {}", dir.display());
        let client = nervus_datasets::download::client()?;
        mnist::download(&client, &dir, &mnist::MIRRORS, &mut |_, _, _| {})?;
        mnist::Mnist::from_dir(&dir)?
    } else if let Some(dir) = &args.data_dir {
        mnist::Mnist::from_dir(dir)?
    } else {
        mnist::Mnist::vendored()
    };
    let ui = Ui::plain_or_auto(args.plain);
    let run_dir = args
        .save
        .parent()
        .map(|p| p.join("train"))
        .unwrap_or_else(|| PathBuf::from("train"));
    let report = Reporter::new(ui, Some(run_dir.join("log.txt")));
    let optimizer = match args.optimizer.as_str() {
        "adamw" => OptimizerSpec::adamw(0.0),
        _ => OptimizerSpec::Sgd {
            momentum: args.momentum,
        },
    };
    report.line(format!(
        "MNIST ({}): {} train, {} test | MLP 784-{}-10 | {} lr {} | batch {} | {} epochs | backend {}",
        data.source,
        data.train.len(),
        data.test.len(),
        args.hidden,
        args.optimizer,
        args.lr,
        args.batch,
        args.epochs,
        backend::NAME
    ));
    let opts = MnistOptions {
        hidden: args.hidden,
        optimizer,
        lr: args.lr,
        epochs: args.epochs,
        batch: args.batch,
        seed: args.seed,
        save: Some(args.save.clone()),
        run_dir,
        overwrite: args.overwrite,
    };
    let (_, result) = chosen::mnist(
        &opts,
        Arc::new(data.train),
        Arc::new(data.test),
        report.clone(),
    )
    .context("training failed")?;
    // The test loss never fell (NaN from the first epoch): nothing was saved.
    if !args.save.join("model.safetensors").is_file() {
        bail!(
            "no epoch's test loss was a number, so no model was saved in {}",
            args.save.display()
        );
    }
    report.line(format!(
        "final test accuracy {:.2}% after {} epochs in {}; best model (lowest test loss) in {}",
        result.final_accuracy() * 100.0,
        args.epochs,
        nervus_training::report::duration(result.seconds),
        args.save.display()
    ));
    Ok(())
}
