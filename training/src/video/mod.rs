//! The video DiT on the shared path: clips of two digits moving apart as flow-matching batches,
//! a validation loss on fixed clips and fixed noise, the label gap, flicker, and a judge that
//! reads the drawn clips frame by frame.
//!
//! What each measurement is for. Validation loss says the model is learning something; the label
//! gap (the same validation with wrong labels, minus the right one) says it is learning to use
//! its labels, which a model of scattered digits in the reference crate barely did. Flicker (the
//! mean change from frame to frame) says whether the drawn digits move as much as real ones. And
//! the judge says whether they are the digits asked for, all the way through: every pair of digits
//! (55 of them) is drawn and read back in frames 2–7; "mostly right" is the digit read most often
//! in each place being the ones asked for (either way round: a model that adds its two labels
//! cannot know which goes where), "held" is each place read as one digit in every judged frame.
//! Real clips are judged the same way first, and set the ceiling.
//!
//! The pieces: the data ([`clips`]), the judge ([`judge`]), its verdicts ([`verdict`]), and here
//! the run that ties them to the shared training path. The samplers live in
//! [`nervus_inference::video`].

pub mod clips;
pub mod draw;
pub mod judge;
pub mod verdict;

use crate::checkpoint::replace_dir;
use crate::checks::BadValue;
use crate::dit::{DrawSettings, TimeSampling};
use crate::optim::OptimizerSpec;
use crate::options::{KeepBest, RunOptions};
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
use clips::{ClipSource, FixedClips};
use judge::JudgeChoice;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving::{self, Clip, Clips, FRAME, FRAMES};
use nervus_datasets::rng::Rng;
use nervus_inference::render::grid_png;
use nervus_inference::video::{GUESS_SEED, SHOWCASE, draw, guesses, write_clips};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::mlp::Mlp;
use nervus_models::video_dit::{Attention, VideoDit, VideoDitConfig};
use nervus_models::video_pipeline;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use verdict::PanelVerdict;

/// What a video run was, saved beside the pipeline as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VideoSettings {
    pub data: String,
    pub steps: usize,
    pub batch: usize,
    /// Threads each batch was cut across (runs older than the option: 1).
    #[serde(default = "crate::shard::one")]
    pub parts: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub seed: u64,
    pub label_dropout: f64,
    pub time: TimeSampling,
    /// The double contrast's weight λ (runs older than it: 0).
    #[serde(default)]
    pub double_contrast: f64,
    pub draw: DrawSettings,
    pub backend: String,
    pub step: usize,
    pub valid_loss: Option<f64>,
    pub label_gap: Option<f64>,
    /// Share of the 55 pairs the median judge of the panel read as mostly right.
    pub mostly_right: Option<f64>,
}

crate::options::record_step_and_loss!(VideoSettings);

/// Everything a video run needs besides the data, the judge and the model.
#[derive(Clone, Debug)]
pub struct VideoOptions {
    /// What every run shares (steps, schedule, saving, resuming).
    pub run: RunOptions,
    /// Fixed validation clips (each at [`clips::EVAL_LEVELS`] noise levels).
    pub eval_clips: usize,
    pub label_dropout: f64,
    pub time: TimeSampling,
    /// λ of the double contrast ([`ClipSource::with_double_contrast`]); 0 trains by flow
    /// matching alone.
    pub double_contrast: f64,
    pub draw: DrawSettings,
    /// Judge all 55 pairs at every checkpoint (else only the showcase pairs, and all 55 at the end).
    pub judge_every: bool,
    /// Where clips, sheets and `checkpoints.json` go.
    pub out: PathBuf,
    pub data_name: String,
}

impl VideoOptions {
    /// Refuses numbers out of their range, each named by its flag.
    pub fn check(&self) -> Result<(), TrainError> {
        self.run.check()?;
        crate::checks::diffusion(self.label_dropout, self.draw.steps, self.draw.guidance)?;
        crate::checks::at_least_one("--eval-clips", self.eval_clips)?;
        crate::checks::non_negative("--double-contrast", self.double_contrast)?;
        self.draw.check()?;
        Ok(())
    }
}

/// One checkpoint's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VideoCheckpoint {
    pub step: usize,
    pub train_loss: f64,
    pub valid_loss: f64,
    pub label_gap: f64,
    /// The label gap's standard error over the validation clips (0 in runs older than it).
    #[serde(default)]
    pub label_gap_se: f64,
    pub flicker: f64,
    /// The judges' verdicts on all 55 pairs, where they were drawn (runs older than the panel
    /// wrote one judge's verdict as `verdict`, which is not read back).
    pub verdicts: Option<PanelVerdict>,
    pub seconds: f64,
}

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct VideoReport {
    pub checkpoints: Vec<VideoCheckpoint>,
    pub best: Option<(usize, f64)>,
    pub seconds: f64,
}

/// Writes the pipeline and `training.json` into `dir`, replacing what was there in one move.
pub fn save_pipeline<B: Backend>(
    model: &VideoDit<B>,
    settings: &VideoSettings,
    dir: &Path,
) -> Result<(), CheckpointError> {
    replace_dir(dir, |staging| {
        video_pipeline::save_pipeline(model, staging)?;
        write_json(&staging.join("training.json"), settings)
    })
}

struct VideoHook<I: Backend> {
    report: Reporter,
    opts: VideoOptions,
    judges: Vec<Mlp<I>>,
    eval: Arc<FixedClips>,
    guess_clips: Vec<Clip>,
    keep: KeepBest<VideoSettings>,
    last_step: usize,
    out: Arc<Mutex<VideoReport>>,
}

impl<I: Backend> EpochHook<VideoDit<I>> for VideoHook<I> {
    fn stop_requested(&self) -> bool {
        self.opts.run.stops_at(self.last_step)
    }

    fn baseline(&mut self, valid: Score, _model: &VideoDit<I>) -> Result<(), String> {
        self.keep.baseline(valid.loss());
        Ok(())
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &VideoDit<I>) -> Result<(), String> {
        self.last_step = info.step;
        let last = info.epoch == info.epochs;
        let pairs = if self.opts.judge_every || last {
            moving::pairs()
        } else {
            SHOWCASE.to_vec()
        };
        let drawn = draw(model, &pairs, self.opts.draw, 1.0, 0, 16);
        let flicker = moving::flicker(&drawn.concat());
        let verdict = (pairs.len() == 55).then(|| PanelVerdict::of(&self.judges, &drawn, &pairs));
        let showcase: Vec<Vec<f32>> = SHOWCASE
            .iter()
            .map(|&(a, b)| {
                let key = (a.min(b), a.max(b));
                let k = pairs
                    .iter()
                    .position(|&p| p == key || p == (a, b))
                    .unwrap_or(0);
                drawn[k].clone()
            })
            .collect();
        let name = format!("step{:05}", info.step);
        write_clips(
            &showcase,
            &self.opts.out.join(format!("clips-{name}.png")),
            &self.opts.out.join(format!("clips-{name}.gif")),
        )?;
        let g = guesses(model, &self.guess_clips);
        grid_png(
            &g,
            g.len() / FRAMES,
            FRAMES,
            FRAME,
            2,
            &self.opts.out.join(format!("guess-{name}.png")),
        )?;
        let valid = info.valid.loss();
        let label_gap = self.eval.label_gap(model);
        let gap = label_gap.mean;
        self.keep.settings.label_gap = Some(gap);
        self.keep.settings.mostly_right = verdict
            .as_ref()
            .map(PanelVerdict::median_mostly_right_share);
        let note = self.keep.offer(info.step, valid, |settings, dir| {
            save_pipeline(model, settings, dir)
        })?;
        let judged = match &verdict {
            Some(v) => format!("  judge: {}", v.summary()),
            None => String::new(),
        };
        self.report.line(format!(
            "step {:>5}  train loss {:.4}  validation loss {:.4}  label gap {:+.4} ± {:.4}  flicker {:.3}{judged}  ({}){note}",
            info.step,
            info.train.loss(),
            valid,
            gap,
            label_gap.standard_error,
            flicker,
            duration(info.elapsed)
        ));
        let mut out = self.out.lock().expect("report");
        out.best = self.keep.found;
        out.checkpoints.push(VideoCheckpoint {
            step: info.step,
            train_loss: info.train.loss(),
            valid_loss: valid,
            label_gap: gap,
            label_gap_se: label_gap.standard_error,
            flicker,
            verdicts: verdict,
            seconds: info.elapsed,
        });
        out.seconds = info.elapsed;
        write_json(&self.opts.out.join("checkpoints.json"), &out.checkpoints)
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Trains `model` on clips from `train`, validating on clips from `test`, judged by the panel
/// `judges`.
pub fn train<B: AutodiffBackend>(
    opts: &VideoOptions,
    train: Arc<Clips>,
    test: &Clips,
    judges: Vec<Mlp<B::InnerBackend>>,
    model: VideoDit<B>,
    report: Reporter,
) -> Result<(VideoReport, VideoDit<B::InnerBackend>), TrainError> {
    opts.check()?;
    let run = &opts.run;
    let classes = model.config.classes;
    let best = crate::checkpoint::claim_save(
        run.save.as_deref(),
        run.continued_from.as_deref(),
        run.resume,
        run.overwrite,
    )?;
    let settings = VideoSettings {
        data: opts.data_name.clone(),
        steps: run.steps,
        batch: run.batch,
        parts: run.parts,
        lr: run.lr,
        warmup: run.warmup,
        decay_to: run.decay_to,
        clip: run.clip,
        seed: run.seed,
        label_dropout: opts.label_dropout,
        time: opts.time,
        double_contrast: opts.double_contrast,
        draw: opts.draw,
        backend: crate::backend::NAME.into(),
        step: 0,
        valid_loss: None,
        label_gap: None,
        mostly_right: None,
    };
    let mut fingerprint = crate::run::fingerprint(&settings, &model.config);
    if let Some(o) = fingerprint.as_object_mut() {
        o.insert("eval_every".into(), run.eval_every.into());
        o.insert("eval_clips".into(), opts.eval_clips.into());
        o.insert("weight_decay".into(), run.weight_decay.into());
    }
    let eval = Arc::new(FixedClips::new(test, opts.eval_clips));
    let mut rng = Rng::new(GUESS_SEED);
    let guess_clips = [(3, 7), (0, 1), (4, 9)]
        .iter()
        .map(|&(a, b)| test.of(a, b, &mut rng))
        .collect();
    let out = Arc::new(Mutex::new(VideoReport::default()));
    let hook = VideoHook {
        report: report.clone(),
        opts: opts.clone(),
        judges,
        eval: eval.clone(),
        guess_clips,
        keep: KeepBest::new(best, run.save.clone(), settings),
        last_step: 0,
        out: out.clone(),
    };
    let source = ClipSource::new(
        train,
        run.batch,
        run.seed,
        opts.label_dropout,
        opts.time,
        classes,
        crate::loader::epoch_lengths(run.steps, run.eval_every),
    )
    .with_double_contrast(opts.double_contrast);
    let config = RunConfig {
        dir: run.run_dir.clone(),
        epochs: source.epochs(),
        accumulation: 1,
        parts: run.parts,
        resume: run.resume,
        baseline: run.continued_from.is_some(),
        overwrite: run.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some((run.batch as f64, "clips".into())),
    };
    let eval_source = FixedClips::new(test, opts.eval_clips);
    let last = fit(
        config,
        model,
        OptimizerSpec::adamw(run.weight_decay).build(run.clip),
        WarmupCosine::new(run.lr, run.warmup, run.steps, run.decay_to),
        source,
        eval_source,
        |t| {
            t.metrics((LossMetric::new(),))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let out = out.lock().expect("report").clone();
    Ok((out, last))
}

/// The model a fresh run starts from: `layers` blocks of width `d_model` in `heads` heads.
/// Refuses zero blocks or heads and heads that do not divide the width.
pub fn model_config(
    layers: usize,
    d_model: usize,
    heads: usize,
    attention: Attention,
) -> Result<VideoDitConfig, BadValue> {
    crate::checks::at_least_one("--layers", layers)?;
    crate::checks::at_least_one("--heads", heads)?;
    if d_model == 0 || !d_model.is_multiple_of(heads) {
        return Err(BadValue {
            flag: "--d-model",
            value: d_model.to_string(),
            rule: "a width above 0 that --heads divides",
        });
    }
    Ok(VideoDitConfig::new()
        .with_num_layers(layers)
        .with_num_attention_heads(heads)
        .with_attention_head_dim(d_model / heads)
        .with_attention(attention))
}

/// A whole video run as the example starts it.
#[derive(Clone, Debug)]
pub struct VideoRun {
    pub options: VideoOptions,
    /// The fresh model's shape (a continuation, `run.continued_from`, keeps its own).
    pub model: VideoDitConfig,
    pub judges: JudgeChoice,
    /// Train on the full MNIST, fetched and verified, instead of the vendored subset.
    pub download: bool,
}

/// Runs `spec`: checks every setting, readies the data and the judges (the ceiling on real
/// clips first), starts the model (fresh, or the saved one it continues), trains it, and reports
/// the end.
pub fn run<B: AutodiffBackend>(
    spec: &VideoRun,
    report: Reporter,
    device: &B::Device,
) -> Result<VideoReport, TrainError> {
    let opts = &spec.options;
    let run = &opts.run;
    if run.steps == 0 {
        return Err(BadValue {
            flag: "--steps",
            value: "0".into(),
            rule: "a run takes at least 1 step (to draw with a saved model: the video_draw example)",
        }
        .into());
    }
    opts.check()?;
    spec.judges.check()?;
    if let Some(save) = &run.save {
        crate::checkpoint::check_fresh_save(
            save,
            run.continued_from.as_deref(),
            run.resume,
            run.overwrite,
        )?;
    }
    let data = Mnist::load(spec.download, None)?;
    let train_clips = Arc::new(Clips::new(&data.train));
    let test_clips = Clips::new(&data.test);
    let judges = judge::panel::<B>(
        &spec.judges,
        &train_clips,
        &test_clips,
        &opts.out,
        &report,
        device,
    )?;
    let (ceiling, real_flicker) =
        verdict::ceiling(&judges, &test_clips, &moving::pairs(), &opts.out, &report)?;
    let model = match &run.continued_from {
        Some(dir) => video_pipeline::load_pipeline::<B>(dir, device)
            .map_err(|e| TrainError::read(format!("loading {}", dir.display()), e))?,
        None => {
            B::seed(device, run.seed);
            spec.model.init::<B>(device)
        }
    };
    let c = &model.config;
    report.line(format!(
        "data: clips made from MNIST ({}), {} training digits | model: video DiT, {} blocks ({:?} attention), d_model {}, {} heads, {} frames × {} patches = {} tokens: {} parameters | backend {}",
        data.source,
        data.train.len(),
        c.num_layers,
        c.attention,
        c.d_model(),
        c.num_attention_heads,
        c.frames,
        c.patches(),
        c.frames * c.patches(),
        model.num_params(),
        crate::backend::NAME
    ));
    let options = VideoOptions {
        data_name: data.source.clone(),
        ..opts.clone()
    };
    let (result, _) = train(
        &options,
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
                ceiling.summary()
            )
        });
        report.line(format!(
            "final: validation {:.4}, label gap {:+.4} ± {:.4}, flicker {:.3} (real {real_flicker:.3}), {judged}{} in all",
            last.valid_loss,
            last.label_gap,
            last.label_gap_se,
            last.flicker,
            duration(result.seconds)
        ));
    }
    if let (Some((step, loss)), Some(save)) = (result.best, &run.save) {
        report.line(format!(
            "best validation loss {loss:.4} at step {step}, saved in {}",
            save.display()
        ));
    }
    Ok(result)
}
