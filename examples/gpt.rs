//! Train a character-level GPT on a text file, sample from it, save it as a GPT-2 checkpoint.
//!
//! ```text
//! cargo run --release --example gpt                                  # Shakespeare, small preset
//! cargo run --release --example gpt -- --data notes.txt --size medium
//! cargo run --release --example gpt -- --load out/gpt/model --steps 0 --prompt "ROMEO:"
//! cargo run --release --example gpt -- --load out/gpt/model --data more.txt --steps 500 --save out/gpt2
//! ```

use anyhow::Result;
use clap::Parser;
use nervus_inference::generate::SampleOptions;
use nervus_training::chosen;
use nervus_training::gpt::GptRun;
use nervus_training::options::{RunArgs, parse_with_defaults};
use nervus_training::report::{Reporter, Ui};

#[derive(Parser, Debug)]
#[command(
    about = "Train a character-level GPT and write with it",
    after_help = "--save defaults to out/gpt/model, or to the --load directory; --steps 0 with --load just writes."
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Size preset: small (2 layers, d 64, context 64), medium (4, 128, 128), large (6, 256, 256).
    #[arg(long, default_value = "small")]
    size: String,
    /// Override the preset's number of blocks.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the preset's attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    d_model: Option<usize>,
    /// Override the preset's context (characters the model reads).
    #[arg(long)]
    context: Option<usize>,
    /// Validation windows (default: about 16K characters' worth).
    #[arg(long)]
    eval_windows: Option<usize>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample only from the k most likely characters.
    #[arg(long)]
    top_k: Option<usize>,
    /// Text the samples continue.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Characters to write after the prompt (at the end of training, or with --steps 0).
    #[arg(long, default_value_t = 200)]
    length: usize,
    /// Train on this UTF-8 text file instead of the Shakespeare that ships with the repo.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Fetch a corpus (tiny-shakespeare) into the cache directory and train on it.
    #[arg(long)]
    download: Option<String>,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(train())
}

fn train() -> Result<()> {
    let args: Args = parse_with_defaults(&[]);
    let run_options = args.run.options_beside("out/gpt/model")?;
    let ui = Ui::plain_or_auto(args.run.plain);
    let report = Reporter::new(ui, Some(run_options.run_dir.join("log.txt")));
    let spec = GptRun {
        run: run_options,
        size: args.size,
        layers: args.layers,
        heads: args.heads,
        d_model: args.d_model,
        context: args.context,
        eval_windows: args.eval_windows,
        sample: SampleOptions {
            length: args.length,
            temperature: args.temperature,
            top_k: args.top_k,
        },
        prompt: args.prompt.clone(),
        download: args.download,
        data: args.data,
    };
    let out = chosen::gpt(&spec, &report)?;
    out.print_writes(&args.prompt);
    Ok(())
}
