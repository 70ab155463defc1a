//! Train a video DiT that draws 8-frame clips of two digits moving apart, with factorised
//! space/time attention, judged frame by frame.
//!
//! ```text
//! cargo run --release --example video                                   # the default run
//! cargo run --release --example video -- --resume                       # continue a stopped run
//! cargo run --release --example video -- --load out/video/model --steps 0 --guidance 4 --pairs 3-7,0-1
//! cargo run --release --example video -- --load out/video/model --steps 0 \
//!     --average out/video/train/checkpoint/model-12.mpk   # the run's last weights, not its best
//! ```

use anyhow::{Context, Result, bail};
use burn::module::{AutodiffModule, Module};
use burn::tensor::backend::Backend;
use clap::Parser;
use nervus_datasets::moving::{self, Clips};
use nervus_datasets::{cache, mnist};
use nervus_inference::video::{
    ClipGuidance, SHOWCASE, draw, draw_best_of, real_clips, redraw, write_clips,
};
use nervus_models::mlp::Mlp;
use nervus_models::video_dit::{Attention, VideoDitConfig};
use nervus_models::video_pipeline;
use nervus_training::backend;
use nervus_training::checkpoint::{average_checkpoints, replace_dir};
use nervus_training::dit::{DrawSettings, TimeSampling};
use nervus_training::report::{Reporter, Ui, duration};
use nervus_training::video::judge::{JudgeOptions, judge_frames, load_judges, train_judges};
use nervus_training::video::verdict::PanelVerdict;
use nervus_training::video::{VideoOptions, train};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Train a video DiT to draw clips of two digits moving apart")]
struct Args {
    /// Optimizer steps (0 with --load: just draw).
    #[arg(long, default_value_t = 3000)]
    steps: usize,
    /// Clips per step.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Threads each batch is cut across, run side by side (the result is the whole batch's
    /// gradient; the CPU backends default to 2, a GPU to 1).
    #[arg(long, default_value_t = backend::PARTS)]
    parts: usize,
    /// Peak learning rate (AdamW).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Warm-up: a share of the run if below 1, else steps.
    #[arg(long, default_value_t = 0.05)]
    warmup: f64,
    #[arg(long, default_value_t = 0.1)]
    decay_to: f64,
    /// Global gradient-norm clipping (0 = off).
    #[arg(long, default_value_t = 1.0)]
    clip: f64,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
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
    /// Classifier-free guidance scale (1 = plain conditional).
    #[arg(long, default_value_t = 2.0)]
    guidance: f64,
    /// Euler steps when drawing.
    #[arg(long, default_value_t = 20)]
    sample_steps: usize,
    /// Time shift of those steps (1: evenly spaced; above 1: more of them at high noise).
    #[arg(long, default_value_t = 1.0)]
    shift: f64,
    /// Guide only the steps at noise levels up to this (1: every step; lower leaves the noisiest
    /// steps, where the layout is decided, to the conditional model alone).
    #[arg(long, default_value_t = 1.0)]
    guidance_below: f64,
    /// Guidance at those noisiest steps, above --guidance-below (1: the conditional model alone).
    #[arg(long, default_value_t = 1.0)]
    guidance_above: f64,
    /// Share of training clips whose labels are replaced by "no label".
    #[arg(long, default_value_t = 0.1)]
    label_dropout: f64,
    /// How noise levels are drawn in training: uniform, logit-normal or high-noise (three
    /// quarters of them above 0.5).
    #[arg(long, default_value = "uniform", value_parser = TimeSampling::NAMES)]
    time_sampling: String,
    /// Weight λ of the double contrast in training: each labelled clip of two different digits
    /// at noise ≥ 0.5 is also scored with one of its doubles' labels, and a double that explains
    /// it nearly as well as its own pair costs up to λ times its flow loss (0: flow matching alone).
    #[arg(long, default_value_t = 0.0)]
    double_contrast: f64,
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Fixed validation clips (each at 8 noise levels).
    #[arg(long, default_value_t = 32)]
    eval_clips: usize,
    /// Judge all 55 pairs at every checkpoint, not only at the end.
    #[arg(long)]
    judge_every: bool,
    /// Where the best model's pipeline goes.
    #[arg(long, default_value = "out/video/model")]
    save: PathBuf,
    /// Start from (or, with --steps 0, draw with) a saved pipeline.
    #[arg(long)]
    load: Option<PathBuf>,
    /// With --steps 0: draw with the mean of these checkpoint files' weights (the learner's
    /// `model-N.mpk`, of the --load pipeline's architecture) instead; the averaged pipeline is
    /// saved in <out>/model-averaged. A run keeps only its latest checkpoint: copy earlier ones
    /// aside while it runs to average several.
    #[arg(long, num_args = 1..)]
    average: Vec<PathBuf>,
    /// Continue the run stopped in --out (weights, optimizer, schedule and data position).
    #[arg(long)]
    resume: bool,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    overwrite: bool,
    /// Stop cleanly at the first checkpoint at or after this step (continue with --resume).
    #[arg(long)]
    stop_after: Option<usize>,
    /// Where clips, sheets and logs go.
    #[arg(long, default_value = "out/video")]
    out: PathBuf,
    /// A saved judge or panel of judges (a run saves its panel in <out>/judge; default: train
    /// the panel first, about 15 s a judge).
    #[arg(long)]
    judge: Option<PathBuf>,
    /// Judges in the panel, alike but for their seeds (1, 2, …): every count is given for each.
    #[arg(long, default_value_t = 3)]
    judges: usize,
    /// Real training clips each trained judge's windows are cut from (16 windows a clip; the
    /// three --judge-* flags shape judges trained here, not those --judge loads).
    #[arg(long, default_value_t = JudgeOptions::default().clips)]
    judge_clips: usize,
    /// Epochs each judge trains for (the best by test loss is kept).
    #[arg(long, default_value_t = JudgeOptions::default().epochs)]
    judge_epochs: usize,
    /// Hidden units of each judge's MLP.
    #[arg(long, default_value_t = JudgeOptions::default().hidden)]
    judge_hidden: usize,
    /// With --steps 0: draw from noise set N instead of the fixed set 0 every run judges with
    /// (sets are independent: several of them say how much a count owes to one draw).
    #[arg(long)]
    noise_set: Option<u64>,
    /// With --steps 0: autoguide by this weaker saved pipeline (an earlier model of the same
    /// run, say), pushing the drawing away from its answer with --autoguidance.
    #[arg(long)]
    autoguide: Option<PathBuf>,
    /// Autoguidance weight (1 = none): `v_c + (g − 1)(v_c − v_u) + (a − 1)(v_c − v_weak)`.
    #[arg(long, default_value_t = 2.0)]
    autoguidance: f64,
    /// With --steps 0: push the drawing of a pair a, b away from what the model draws for a, a
    /// and for b, b, with this weight (1 = not at all).
    #[arg(long, default_value_t = 1.0)]
    doubles: f64,
    /// With --steps 0: classifier-free guidance in frames 0 and 1 (where the two digits are
    /// still one shape and the judge reads nothing) instead of --guidance there.
    #[arg(long)]
    overlap_guidance: Option<f64>,
    /// With --steps 0: a stochastic walk that re-draws this share of the noise at every step
    /// but the last (η, in 0..=1; 0 = the plain deterministic walk). The fresh noise depends on
    /// --noise-set too.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// With --steps 0: instead of drawing from noise, noise the real test clips of the pairs (the
    /// judge's ceiling) to this level in (0, 1] with the noise set's noise and draw them back
    /// from there: how much of a real clip's layout, which digit went where, the drawing keeps.
    #[arg(long)]
    from_real: Option<f64>,
    /// With --steps 0: draw this many clips of each pair (the first is the plain draw of the
    /// noise set) and keep the one the model itself finds fits the pair asked for best against
    /// the pair's doubles (a, a and b, b); about this many times the time of one draw. Each
    /// candidate's count is printed too.
    #[arg(long, default_value_t = 1)]
    best_of: usize,
    /// With --steps 0: the pairs to draw, e.g. 3-7,0-1 (default: all 55).
    #[arg(long)]
    pairs: Option<String>,
    /// Train on the full MNIST (fetched and verified; see the mnist example).
    #[arg(long)]
    download: bool,
    #[arg(long)]
    plain: bool,
}

fn parse_pairs(s: &str) -> Result<Vec<(u8, u8)>> {
    s.split(',')
        .map(|p| {
            let (a, b) = p
                .split_once('-')
                .with_context(|| format!("--pairs: `{p}` is not two digits like 3-7"))?;
            let digit = |d: &str| -> Result<u8> {
                match d.trim().parse::<u8>() {
                    Ok(v) if v < 10 => Ok(v),
                    _ => bail!("--pairs: `{d}` in `{p}` is not a digit 0–9"),
                }
            };
            Ok((digit(a)?, digit(b)?))
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    // Options that only shape a drawing of a saved model (--steps 0), each with its refusal.
    for (given, refusal) in [
        (
            args.noise_set.is_some(),
            "--noise-set chooses the drawing noise of --steps 0: runs judge with set 0",
        ),
        (
            args.autoguide.is_some(),
            "--autoguide draws with a weaker model's help: use it with --steps 0 and --load DIR",
        ),
        (
            args.doubles != 1.0,
            "--doubles guides a drawing: use it with --steps 0 and --load DIR",
        ),
        (
            args.overlap_guidance.is_some(),
            "--overlap-guidance guides a drawing: use it with --steps 0 and --load DIR",
        ),
        (
            args.churn != 0.0,
            "--churn shapes a drawing: use it with --steps 0 and --load DIR",
        ),
        (
            args.from_real.is_some(),
            "--from-real redraws real clips: use it with --steps 0 and --load DIR",
        ),
        (
            args.best_of != 1,
            "--best-of draws several clips a pair: use it with --steps 0 and --load DIR",
        ),
        (
            !args.average.is_empty(),
            "--average draws with averaged weights: use it with --steps 0 and --load DIR",
        ),
    ] {
        if given && args.steps != 0 {
            bail!(refusal);
        }
    }
    for (flag, value) in [
        ("--autoguidance", args.autoguidance),
        ("--doubles", args.doubles),
    ] {
        if !(value.is_finite() && value >= 1.0) {
            bail!("{flag} must be a number of at least 1, not {value}");
        }
    }
    if let Some(g0) = args.overlap_guidance
        && !g0.is_finite()
    {
        bail!("--overlap-guidance must be a number, not {g0}");
    }
    if !(args.double_contrast >= 0.0 && args.double_contrast.is_finite()) {
        bail!(
            "--double-contrast is a weight, 0 or more, not {}",
            args.double_contrast
        );
    }
    if !(0.0..=1.0).contains(&args.churn) {
        bail!(
            "--churn is the share of the noise re-drawn a step, in 0..=1, not {}",
            args.churn
        );
    }
    if let Some(level) = args.from_real
        && !(level > 0.0 && level <= 1.0)
    {
        bail!("--from-real is a noise level in (0, 1], not {level}");
    }
    if args.best_of == 0 {
        bail!("--best-of is how many clips to draw of each pair: at least 1");
    }
    if args.best_of != 1 && args.from_real.is_some() {
        bail!("--best-of draws from noise: it does not go with --from-real");
    }
    // What the model's shape and the save allow, before the judges are trained.
    if args.steps == 0 && args.load.is_none() {
        bail!("--steps 0 means \"just draw\": give a pipeline with --load DIR");
    }
    if args.load.is_none() {
        for (flag, v) in [("--layers", args.layers), ("--heads", args.heads)] {
            nervus_training::checks::at_least_one(flag, v)?;
        }
        if !args.d_model.is_multiple_of(args.heads) {
            bail!("--heads must divide --d-model");
        }
    }
    if args.steps > 0 {
        nervus_training::checks::diffusion(
            args.steps,
            args.batch,
            args.parts,
            args.lr,
            args.decay_to,
            (args.clip > 0.0).then_some(args.clip),
            args.weight_decay,
            args.eval_every,
            args.label_dropout,
            args.sample_steps,
            args.guidance,
        )?;
        nervus_training::checkpoint::check_fresh_save(
            &args.save,
            args.load.as_deref(),
            args.resume,
            args.overwrite,
        )?;
    }
    let device = backend::device();
    let data = if args.download {
        let dir = mnist::full_dir(&cache::data_dir());
        mnist::download(
            &nervus_datasets::download::client()?,
            &dir,
            &mnist::MIRRORS,
            &mut |_, _, _| {},
        )?;
        mnist::Mnist::from_dir(&dir)?
    } else {
        mnist::Mnist::vendored()
    };
    let train_clips = Arc::new(Clips::new(&data.train));
    let test_clips = Clips::new(&data.test);
    let ui = if args.plain { Ui::Plain } else { Ui::auto() };
    let report = Reporter::new(ui, Some(args.out.join("log.txt")));
    let settings = DrawSettings {
        steps: args.sample_steps,
        guidance: args.guidance,
        shift: args.shift,
        guidance_below: args.guidance_below,
        guidance_above: args.guidance_above,
    };
    settings.check()?;

    for (flag, value) in [
        ("--judges", args.judges),
        ("--judge-clips", args.judge_clips),
        ("--judge-epochs", args.judge_epochs),
        ("--judge-hidden", args.judge_hidden),
    ] {
        if value == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    // Each judge with its share of real test windows read right, frame by frame.
    let (judges, per_frame): (Vec<Mlp<backend::Infer>>, Vec<Vec<f64>>) = match &args.judge {
        Some(dir) => load_judges(dir, &device)
            .with_context(|| format!("loading the judge from {}", dir.display()))?
            .into_iter()
            .map(|j| {
                let per_frame = judge_frames(&j, &test_clips);
                (j, per_frame)
            })
            .unzip(),
        None => {
            let options = JudgeOptions {
                clips: args.judge_clips,
                epochs: args.judge_epochs,
                hidden: args.judge_hidden,
                ..JudgeOptions::default()
            };
            let panel = train_judges::<backend::Train>(
                &train_clips,
                &test_clips,
                options,
                args.judges,
                &args.out.join("judge"),
                &args.out.join("judge-train"),
                &device,
            )?;
            println!(
                "judges: {} MNIST MLPs (seeds {}–{}) trained on 14×14 windows of {} real clips in {} (each its best epoch, saved in {})",
                panel.len(),
                options.seed,
                options.seed + panel.len() as u64 - 1,
                options.clips,
                duration(panel.iter().map(|j| j.seconds).sum()),
                args.out.join("judge").display()
            );
            panel.into_iter().map(|j| (j.model, j.per_frame)).unzip()
        }
    };
    println!(
        "judges on real test windows, frames 0–7 (lowest–highest judge): {}",
        (0..per_frame[0].len())
            .map(|f| {
                let (lo, hi) = per_frame.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
                    (lo.min(p[f]), hi.max(p[f]))
                });
                let (lo, hi) = (format!("{:.0}", lo * 100.0), format!("{:.0}", hi * 100.0));
                if lo == hi {
                    format!("{lo}%")
                } else {
                    format!("{lo}–{hi}%")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let pairs = match &args.pairs {
        Some(p) => parse_pairs(p)?,
        None => moving::pairs(),
    };
    let real: Vec<Vec<f32>> = real_clips(&test_clips, &pairs)
        .into_iter()
        .map(|c| c.pixels)
        .collect();
    let real_verdict = PanelVerdict::of(&judges, &real, &pairs);
    println!(
        "real clips of the {} pairs: {}, flicker {:.3}",
        pairs.len(),
        real_verdict.summary(),
        moving::flicker(&real.concat())
    );
    if let Some(median) = real_verdict.median_judge() {
        println!(
            "real clips not mostly right, by the median judge: {}",
            median.failures()
        );
    }

    let showcase: Vec<Vec<f32>> = real_clips(&test_clips, &SHOWCASE)
        .into_iter()
        .map(|c| c.pixels)
        .collect();
    write_clips(
        &showcase,
        &args.out.join("real-clips.png"),
        &args.out.join("real-clips.gif"),
    )
    .map_err(anyhow::Error::msg)?;

    if args.steps == 0 {
        let Some(dir) = &args.load else {
            bail!("--steps 0 means \"just draw\": give a pipeline with --load DIR");
        };
        let mut model = video_pipeline::load_pipeline::<backend::Infer>(dir, &device)
            .with_context(|| format!("loading {}", dir.display()))?;
        if !args.average.is_empty() {
            model = average_checkpoints(model, &args.average, &device)
                .context("averaging the checkpoints")?;
            let saved = args.out.join("model-averaged");
            replace_dir(&saved, |d| video_pipeline::save_pipeline(&model, d))
                .with_context(|| format!("saving {}", saved.display()))?;
            println!(
                "drawing with the mean of {} checkpoints ({} … {}), saved in {}",
                args.average.len(),
                args.average[0].display(),
                args.average[args.average.len() - 1].display(),
                saved.display()
            );
        }
        let weak = match &args.autoguide {
            Some(dir) => Some(
                video_pipeline::load_pipeline::<backend::Infer>(dir, &device)
                    .with_context(|| format!("loading the autoguide {}", dir.display()))?,
            ),
            None => None,
        };
        let more = ClipGuidance {
            doubles: args.doubles,
            weaker: weak.as_ref().map(|m| (m, args.autoguidance)),
            overlap: args.overlap_guidance,
            churn: args.churn,
        };
        let set = args.noise_set.unwrap_or(0);
        let drawn = match args.from_real {
            None if args.best_of > 1 => {
                let best = draw_best_of(&model, &pairs, settings, &more, set, 16, args.best_of);
                for (j, candidate) in best.candidates.iter().enumerate() {
                    let v = PanelVerdict::of(&judges, candidate, &pairs);
                    let failures = v.median_judge().map(|m| m.failures()).unwrap_or_default();
                    println!(
                        "candidate {j}{}: {}; {failures}; chosen for {} pairs",
                        if j == 0 { " (the plain draw)" } else { "" },
                        v.summary(),
                        best.chosen.iter().filter(|&&c| c == j).count()
                    );
                }
                best.clips
            }
            None => draw(&model, &pairs, settings, &more, set, 16),
            Some(level) => {
                let real = real_clips(&test_clips, &pairs);
                redraw(&model, &real, level, settings, &more, set, 16)
            }
        };
        let v = PanelVerdict::of(&judges, &drawn, &pairs);
        let mut name = format!("g{}-s{}", args.guidance, args.sample_steps);
        if weak.is_some() {
            name += &format!("-ag{}", args.autoguidance);
        }
        if args.doubles != 1.0 {
            name += &format!("-doubles{}", args.doubles);
        }
        if args.guidance_below < 1.0 {
            name += &format!("-below{}", args.guidance_below);
            if args.guidance_above != 1.0 {
                name += &format!("-above{}", args.guidance_above);
            }
        }
        if let Some(g0) = args.overlap_guidance {
            name += &format!("-overlap{g0}");
        }
        if args.churn != 0.0 {
            name += &format!("-churn{}", args.churn);
        }
        if args.best_of > 1 {
            name += &format!("-best{}", args.best_of);
        }
        if let Some(level) = args.from_real {
            name += &format!("-from-real{level}");
        }
        if args.shift != 1.0 {
            name += &format!("-shift{}", args.shift);
        }
        if set != 0 {
            name += &format!("-noise{set}");
        }
        let (sheet, gif) = (
            args.out.join(format!("clips-{name}.png")),
            args.out.join(format!("clips-{name}.gif")),
        );
        write_clips(&drawn, &sheet, &gif).map_err(anyhow::Error::msg)?;
        println!(
            "drawn: {}, flicker {:.3}; {} and {}",
            v.summary(),
            moving::flicker(&drawn.concat()),
            sheet.display(),
            gif.display()
        );
        if let Some(median) = v.median_judge() {
            println!(
                "not mostly right, by the median judge: {}",
                median.failures()
            );
        }
        return Ok(());
    }

    let model = match &args.load {
        Some(dir) => video_pipeline::load_pipeline::<backend::Train>(dir, &device)
            .with_context(|| format!("loading {}", dir.display()))?,
        None => {
            backend::Train::seed(&device, args.seed);
            VideoDitConfig::new()
                .with_num_layers(args.layers)
                .with_num_attention_heads(args.heads)
                .with_attention_head_dim(args.d_model / args.heads)
                .with_attention(args.attention)
                .init::<backend::Train>(&device)
        }
    };
    println!(
        "data: clips made from MNIST ({}), {} training digits | model: video DiT, {} blocks ({:?} attention), d_model {}, {} heads, {} frames × {} patches = {} tokens: {} parameters | backend {}",
        data.source,
        data.train.len(),
        model.config.num_layers,
        model.config.attention,
        model.config.d_model(),
        model.config.num_attention_heads,
        model.config.frames,
        model.config.patches(),
        model.config.frames * model.config.patches(),
        model.valid().num_params(),
        backend::NAME
    );
    let warmup = nervus_training::schedule::warmup_steps(args.warmup, args.steps);
    let opts = VideoOptions {
        steps: args.steps,
        batch: args.batch,
        parts: args.parts,
        lr: args.lr,
        warmup,
        decay_to: args.decay_to,
        clip: (args.clip > 0.0).then_some(args.clip),
        weight_decay: args.weight_decay,
        seed: args.seed,
        eval_every: args.eval_every,
        eval_clips: args.eval_clips,
        label_dropout: args.label_dropout,
        time: TimeSampling::parse(&args.time_sampling).map_err(anyhow::Error::msg)?,
        double_contrast: args.double_contrast,
        draw: settings,
        judge_every: args.judge_every,
        save: Some(args.save.clone()),
        out: args.out.clone(),
        run_dir: args.out.join("train"),
        resume: args.resume,
        stop_after: args.stop_after,
        data_name: data.source.clone(),
        continued_from: args.load.clone(),
        overwrite: args.overwrite,
    };
    let (result, _) = train(
        &opts,
        train_clips,
        &test_clips,
        judges,
        model,
        report.clone(),
    )?;
    if let Some(last) = result.checkpoints.last() {
        let judged = last.verdicts.as_ref().map_or(String::new(), |v| {
            format!(
                "judged {} (real clips {}), ",
                v.summary(),
                real_verdict.summary()
            )
        });
        report.line(format!(
            "final: validation {:.4}, label gap {:+.4} ± {:.4}, flicker {:.3} (real {:.3}), {judged}{} in all",
            last.valid_loss,
            last.label_gap,
            last.label_gap_se,
            last.flicker,
            moving::flicker(&real.concat()),
            duration(result.seconds)
        ));
    }
    if let Some((step, loss)) = result.best {
        report.line(format!(
            "best validation loss {loss:.4} at step {step}, saved in {}",
            args.save.display()
        ));
    }
    Ok(())
}
