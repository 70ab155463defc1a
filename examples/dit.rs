//! Train a class-conditional DiT that draws MNIST digits from noise by flow matching, judged by a
//! classifier, saved as a diffusers pipeline.
//!
//! ```text
//! cargo run --release --example dit                                   # the digits that ship here
//! cargo run --release --example dit -- --load out/dit/model --steps 0 --guidance 4 --sample-steps 50
//! ```

use anyhow::Result;
use clap::Parser;
use nervus_training::chosen;
use nervus_training::dit::{DitOptions, DitRun, TimeSampling};
use nervus_training::options::{DrawArgs, RunArgs, parse_with_defaults};
use nervus_training::report::{Reporter, Ui};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    about = "Train a DiT to draw MNIST digits by flow matching",
    after_help = "--steps 0 with --load just draws a grid with the saved pipeline."
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Width (heads × head size).
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Patch side in pixels (must divide 28).
    #[arg(long, default_value_t = 4)]
    patch: usize,
    #[command(flatten)]
    draw: DrawArgs,
    /// Share of training examples whose label is replaced by "no label".
    #[arg(long, default_value_t = 0.1)]
    label_dropout: f64,
    /// How noise levels are drawn in training: uniform, logit-normal or high-noise (three
    /// quarters of them above 0.5).
    #[arg(long, default_value = "uniform", value_parser = TimeSampling::NAMES)]
    time_sampling: String,
    /// Where grids and the strip go (the run's checkpoints in <out>/train).
    #[arg(long, default_value = "out/dit")]
    out: PathBuf,
    /// A saved MNIST classifier to judge with (default: train one first, a few seconds).
    #[arg(long)]
    judge: Option<PathBuf>,
    /// Train on the full MNIST (fetched and verified; see the mnist example).
    #[arg(long)]
    download: bool,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(train())
}

fn train() -> Result<()> {
    let args: Args = parse_with_defaults(&[
        ("steps", "4000"),
        ("batch", "64"),
        ("lr", "0.001"),
        ("warmup", "0.05"),
        ("weight_decay", "0"),
        ("eval_every", "500"),
        ("save", "out/dit/model"),
    ]);
    let spec = DitRun {
        options: DitOptions {
            run: args.run.options(args.out.join("train"))?,
            label_dropout: args.label_dropout,
            time: TimeSampling::parse(&args.time_sampling).map_err(anyhow::Error::msg)?,
            draw: args.draw.settings(),
            out: args.out.clone(),
            data_name: String::new(),
        },
        layers: args.layers,
        d_model: args.d_model,
        heads: args.heads,
        patch: args.patch,
        judge: args.judge,
        download: args.download,
    };
    let ui = Ui::plain_or_auto(args.run.plain);
    let report = Reporter::new(ui, Some(args.out.join("log.txt")));
    chosen::dit(&spec, &report)?;
    Ok(())
}
