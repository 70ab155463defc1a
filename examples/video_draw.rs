//! Draw clips with a saved video DiT and have a panel of MNIST judges read them: plainly, pushed
//! away from each pair's doubles, or the best of several by the model's own check.
//!
//! ```text
//! cargo run --release --example video_draw -- --load out/video/model --guidance 4 --pairs 3-7,0-1
//! cargo run --release --example video_draw -- --load docs/video/long-run/model --guidance 5
//! cargo run --release --example video_draw -- --load out/video/model \
//!     --average out/video/train/checkpoint/model-12.mpk        # the run's last weights, not its best
//! cargo run --release --example video_draw -- --load MODEL --guidance 5 --doubles 3 --best-of 8 \
//!     --noise-set 1 --judge out/video/judge                    # the recipe that reached the bar
//! ```

use anyhow::Result;
use clap::Parser;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving;
use nervus_training::chosen;
use nervus_training::options::DrawArgs;
use nervus_training::report::{Reporter, Ui};
use nervus_training::video::draw::DrawOptions;
use nervus_training::video::judge::JudgeArgs;
use nervus_training::video::verdict::parse_pairs;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Draw clips with a saved video DiT and judge them")]
struct Args {
    /// The saved pipeline (a run's --save; `docs/video/long-run/model` ships with the repo).
    #[arg(long)]
    load: PathBuf,
    #[command(flatten)]
    draw: DrawArgs,
    /// The pairs to draw, e.g. 3-7,0-1 (default: all 55).
    #[arg(long)]
    pairs: Option<String>,
    /// Draw from noise set N instead of the fixed set 0 every run judges with (sets are
    /// independent: several of them say how much a count owes to one draw).
    #[arg(long, default_value_t = 0)]
    noise_set: u64,
    /// Push the drawing of a pair a, b away from what the model draws for a, a and for b, b,
    /// with this weight (1 = not at all).
    #[arg(long, default_value_t = 1.0)]
    doubles: f64,
    /// Draw this many clips of each pair (the first is the plain draw of the noise set) and keep
    /// the one the model itself finds fits the pair asked for best against the pair's doubles;
    /// about this many times the time of one draw. Each candidate's count is printed too.
    #[arg(long, default_value_t = 1)]
    best_of: usize,
    /// Draw with the mean of these checkpoint files' weights (the learner's `model-N.mpk`, of the
    /// --load pipeline's architecture) instead; the averaged pipeline is saved in
    /// <out>/model-averaged. A run keeps only its latest checkpoints: copy earlier ones aside
    /// while it runs to average several.
    #[arg(long, num_args = 1..)]
    average: Vec<PathBuf>,
    #[command(flatten)]
    judges: JudgeArgs,
    /// Where the sheets and GIFs go.
    #[arg(long, default_value = "out/video")]
    out: PathBuf,
    /// Train the judges on the full MNIST (fetched and verified).
    #[arg(long)]
    download: bool,
    /// Plain progress lines.
    #[arg(long)]
    plain: bool,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(draw())
}

fn draw() -> Result<()> {
    let args = Args::parse();
    let opts = DrawOptions {
        load: args.load,
        average: args.average,
        draw: args.draw.settings(),
        pairs: match &args.pairs {
            Some(p) => parse_pairs(p)?,
            None => moving::pairs(),
        },
        noise_set: args.noise_set,
        doubles: args.doubles,
        best_of: args.best_of,
        judges: args.judges.choice(),
        out: args.out,
    };
    opts.check()?;
    let data = Mnist::load(args.download, None)?;
    let ui = Ui::plain_or_auto(args.plain);
    let report = Reporter::new(ui, Some(opts.out.join("log.txt")));
    chosen::video_draw(&opts, &data, &report)?;
    Ok(())
}
