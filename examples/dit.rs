//! Train a class-conditional DiT that draws MNIST digits from noise by flow matching, judged by a
//! classifier, saved as a diffusers pipeline.
//!
//! ```text
//! cargo run --release --example dit                                   # the digits that ship here
//! cargo run --release --example dit -- --load out/dit/model --steps 0 --guidance 4 --sample-steps 50
//! ```

use anyhow::{Context, Result, bail};
use burn::module::{AutodiffModule, Module};
use burn::tensor::backend::Backend;
use clap::Parser;
use nervus_datasets::{cache, mnist};
use nervus_inference::render::grid_png;
use nervus_models::diffusers;
use nervus_models::dit::DitConfig;
use nervus_models::mlp::Mlp;
use nervus_training::backend;
use nervus_training::dit::{
    DitOptions, DrawSettings, TimeSampling, draw, grid_noise, judge, train,
};
use nervus_training::mnist::MnistOptions;
use nervus_training::optim::OptimizerSpec;
use nervus_training::report::{Reporter, Ui, duration};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Train a DiT to draw MNIST digits by flow matching")]
struct Args {
    /// Optimizer steps (0 with --load: just draw).
    #[arg(long, default_value_t = 4000)]
    steps: usize,
    #[arg(long, default_value_t = 64)]
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
    /// Share of training examples whose label is replaced by "no label".
    #[arg(long, default_value_t = 0.1)]
    label_dropout: f64,
    /// How noise levels are drawn in training: uniform, logit-normal or high-noise (three
    /// quarters of them above 0.5).
    #[arg(long, default_value = "uniform", value_parser = TimeSampling::NAMES)]
    time_sampling: String,
    #[arg(long, default_value_t = 500)]
    eval_every: usize,
    /// Where the best model's diffusers pipeline goes.
    #[arg(long, default_value = "out/dit/model")]
    save: PathBuf,
    /// Start from (or, with --steps 0, draw with) a saved pipeline.
    #[arg(long)]
    load: Option<PathBuf>,
    /// Where grids and the strip go.
    #[arg(long, default_value = "out/dit")]
    out: PathBuf,
    /// Continue a killed run, exactly where its last checkpoint left it (same flags as that run).
    #[arg(long)]
    resume: bool,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    overwrite: bool,
    /// A saved MNIST classifier to judge with (default: train one first, ~3 s).
    #[arg(long)]
    judge: Option<PathBuf>,
    /// Train on the full MNIST (fetched and verified; see the mnist example).
    #[arg(long)]
    download: bool,
    #[arg(long)]
    plain: bool,
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let device = backend::device();
    // What can be refused is refused before any data is read or a judge is trained.
    if args.steps == 0 && args.load.is_none() {
        bail!("--steps 0 means \"just draw\": give a pipeline with --load DIR");
    }
    let loaded = match &args.load {
        Some(dir) => {
            if !dir.join("model_index.json").is_file() {
                bail!(
                    "{}: not a diffusers pipeline (no model_index.json); give the directory a run saved",
                    dir.display()
                );
            }
            Some(
                diffusers::load_transformer::<backend::Train>(&dir.join("transformer"), &device)
                    .with_context(|| format!("loading {}", dir.display()))?,
            )
        }
        None => None,
    };
    if loaded.is_none() {
        for (flag, v) in [
            ("--layers", args.layers),
            ("--d-model", args.d_model),
            ("--heads", args.heads),
            ("--patch", args.patch),
        ] {
            nervus_training::checks::at_least_one(flag, v)?;
        }
        if 28 % args.patch != 0 || args.d_model % args.heads != 0 {
            bail!("--patch must divide 28 and --heads must divide --d-model");
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
    let ui = if args.plain { Ui::Plain } else { Ui::auto() };
    let report = Reporter::new(ui, Some(args.out.join("log.txt")));

    let judge_model: Mlp<backend::Infer> = match &args.judge {
        Some(dir) => Mlp::load(dir, &device)
            .with_context(|| format!("loading the judge from {}", dir.display()))?,
        None => {
            let opts = MnistOptions {
                hidden: 128,
                optimizer: OptimizerSpec::Sgd { momentum: 0.9 },
                lr: 0.02,
                epochs: 10,
                batch: 32,
                seed: 1,
                save: Some(args.out.join("judge")),
                run_dir: args.out.join("judge-train"),
                // A deterministic by-product, trained again on every run without --judge.
                overwrite: true,
            };
            let (m, r) = nervus_training::mnist::train::<backend::Train>(
                &opts,
                Arc::new(data.train.clone()),
                Arc::new(data.test.clone()),
                Reporter::silent(),
                &device,
            )?;
            println!(
                "judge: the MNIST MLP, trained here in {} to {:.1}% on the test split (saved in {})",
                duration(r.seconds),
                r.final_accuracy() * 100.0,
                args.out.join("judge").display()
            );
            m
        }
    };
    let settings = DrawSettings {
        steps: args.sample_steps,
        guidance: args.guidance,
        shift: args.shift,
        guidance_below: args.guidance_below,
        guidance_above: 1.0,
    };
    settings.check()?;

    if args.steps == 0 {
        let Some(model) = loaded else {
            bail!("--steps 0 means \"just draw\": give a pipeline with --load DIR");
        };
        let model = model.valid();
        let digits: Vec<usize> = (0..10).collect();
        let noise = grid_noise(10);
        let images = draw(&model, &digits, &noise, settings);
        let verdict = judge(&judge_model, &images, &digits, 10);
        let mut shift = if args.shift == 1.0 {
            String::new()
        } else {
            format!("-shift{}", args.shift)
        };
        if args.guidance_below < 1.0 {
            shift += &format!("-below{}", args.guidance_below);
        }
        let path = args.out.join(format!(
            "grid-g{}-s{}{shift}.png",
            args.guidance, args.sample_steps
        ));
        grid_png(&images, 10, 10, 28, 2, &path).map_err(anyhow::Error::msg)?;
        println!(
            "judge: {:.0}% read as asked ({} of 10 digits drawn); per digit {:?}; grid in {}",
            verdict.score() * 100.0,
            verdict.digits_drawn(),
            verdict.right,
            path.display()
        );
        return Ok(());
    }

    let model = match loaded {
        Some(model) => model,
        None => {
            backend::Train::seed(&device, args.seed);
            DitConfig::digits()
                .with_num_layers(args.layers)
                .with_patch_size(args.patch)
                .with_num_attention_heads(args.heads)
                .with_attention_head_dim(args.d_model / args.heads)
                .init::<backend::Train>(&device)
        }
    };
    println!(
        "data: MNIST ({}), {} training digits | model: DiT, {} blocks, d_model {}, {} heads, {}×{} patches ({} tokens): {} parameters | backend {}",
        data.source,
        data.train.len(),
        model.config.num_layers,
        model.config.d_model(),
        model.config.num_attention_heads,
        model.config.patch_size,
        model.config.patch_size,
        model.config.tokens(),
        model.valid().num_params(),
        backend::NAME
    );
    let warmup = nervus_training::schedule::warmup_steps(args.warmup, args.steps);
    let opts = DitOptions {
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
        label_dropout: args.label_dropout,
        time: TimeSampling::parse(&args.time_sampling).map_err(anyhow::Error::msg)?,
        draw: settings,
        save: Some(args.save.clone()),
        out: args.out.clone(),
        run_dir: args.out.join("train"),
        data_name: data.source.clone(),
        continued_from: args.load.clone(),
        resume: args.resume,
        overwrite: args.overwrite,
    };
    let test = data.test.clone();
    let (result, _) = train(
        &opts,
        Arc::new(data.train),
        &test,
        judge_model,
        model,
        report.clone(),
    )?;
    if let Some((_, _, _, v)) = result.checkpoints.last() {
        report.line(format!(
            "final judge {:.0}%, {} of 10 digits drawn at least half the time; {} in all; strip in {}",
            v.score() * 100.0,
            v.digits_drawn(),
            duration(result.seconds),
            args.out.join("strip.png").display()
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
