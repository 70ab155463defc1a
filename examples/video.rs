//! Train a video DiT that draws 8-frame clips of two digits moving apart, with factorised
//! space/time attention, judged frame by frame. `video_draw` draws with a saved model.
//!
//! ```text
//! cargo run --release --example video                          # the default run
//! cargo run --release --example video -- --stop-after 500      # a run in pieces: stop cleanly…
//! cargo run --release --example video -- --resume              # …and carry on where it stopped
//! cargo run --release --example video -- --load out/video/model --steps 1000 --save out/video/more
//! ```

use anyhow::Result;
use clap::Parser;
use nervus_models::video_dit::Attention;
use nervus_training::chosen;
use nervus_training::dit::TimeSampling;
use nervus_training::options::{DrawArgs, RunArgs, parse_with_defaults};
use nervus_training::report::{Reporter, Ui};
use nervus_training::video::judge::JudgeArgs;
use nervus_training::video::{VideoOptions, VideoRun, model_config};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Train a video DiT to draw clips of two digits moving apart")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Transformer blocks (factorised: even ones spatial, odd ones temporal).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Width (heads × head size).
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Attention: factorised (space, then time) or full (all 512 tokens).
    #[arg(long, default_value = "factorised")]
    attention: Attention,
    #[command(flatten)]
    draw: DrawArgs,
    /// Share of training clips whose labels are replaced by "no label".
    #[arg(long, default_value_t = 0.1)]
    label_dropout: f64,
    /// How noise levels are drawn in training: uniform, logit-normal or high-noise (three
    /// quarters of them above 0.5).
    #[arg(long, default_value = "uniform", value_parser = TimeSampling::NAMES)]
    time_sampling: String,
    /// Weight λ of the double contrast: each labelled clip of two different digits at noise
    /// ≥ 0.5 is also scored with one of its doubles' labels, and a double that explains it nearly
    /// as well as its own pair costs up to λ times its flow loss (0: flow matching alone).
    #[arg(long, default_value_t = 0.0)]
    double_contrast: f64,
    /// Fixed validation clips (each at 8 noise levels).
    #[arg(long, default_value_t = 32)]
    eval_clips: usize,
    /// Judge all 55 pairs at every checkpoint, not only at the end.
    #[arg(long)]
    judge_every: bool,
    /// Where clips, sheets and logs go (the run's checkpoints in <out>/train).
    #[arg(long, default_value = "out/video")]
    out: PathBuf,
    #[command(flatten)]
    judges: JudgeArgs,
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
        ("steps", "3000"),
        ("lr", "0.001"),
        ("warmup", "0.05"),
        ("weight_decay", "0"),
        ("save", "out/video/model"),
    ]);
    let spec = VideoRun {
        options: VideoOptions {
            run: args.run.options(args.out.join("train"))?,
            eval_clips: args.eval_clips,
            label_dropout: args.label_dropout,
            time: TimeSampling::parse(&args.time_sampling).map_err(anyhow::Error::msg)?,
            double_contrast: args.double_contrast,
            draw: args.draw.settings(),
            judge_every: args.judge_every,
            out: args.out.clone(),
            data_name: String::new(),
        },
        model: model_config(args.layers, args.d_model, args.heads, args.attention)?,
        judges: args.judges.choice(),
        download: args.download,
    };
    let ui = Ui::plain_or_auto(args.run.plain);
    let report = Reporter::new(ui, Some(args.out.join("log.txt")));
    chosen::video(&spec, report)?;
    Ok(())
}
