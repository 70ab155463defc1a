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
pub mod judge;
pub mod verdict;

use crate::checkpoint::replace_dir;
use crate::dit::{DrawSettings, TimeSampling};
use crate::optim::OptimizerSpec;
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
use clips::{ClipSource, FixedClips};
use nervus_datasets::moving::{self, Clip, Clips, FRAME, FRAMES};
use nervus_datasets::rng::Rng;
use nervus_inference::render::grid_png;
use nervus_inference::video::{ClipGuidance, GUESS_SEED, SHOWCASE, draw, guesses, write_clips};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::mlp::Mlp;
use nervus_models::video_dit::VideoDit;
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

/// Everything a video run needs besides the data, the judge and the model.
#[derive(Clone, Debug)]
pub struct VideoOptions {
    pub steps: usize,
    pub batch: usize,
    /// Threads each batch is cut across ([`crate::shard`]).
    pub parts: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub weight_decay: f64,
    pub seed: u64,
    pub eval_every: usize,
    pub eval_clips: usize,
    pub label_dropout: f64,
    pub time: TimeSampling,
    /// λ of the double contrast ([`ClipSource::with_double_contrast`]); 0 trains by flow
    /// matching alone.
    pub double_contrast: f64,
    pub draw: DrawSettings,
    /// Judge all 55 pairs at every checkpoint (else only the showcase pairs, and all 55 at the end).
    pub judge_every: bool,
    pub save: Option<PathBuf>,
    pub out: PathBuf,
    pub run_dir: PathBuf,
    pub resume: bool,
    /// End the run cleanly (checkpoint written) at the first evaluation at or after this step,
    /// to be continued with `resume`: training in sessions.
    pub stop_after: Option<usize>,
    pub data_name: String,
    /// The pipeline the starting model came from (a continuation: only a checkpoint better than
    /// the start replaces a model).
    pub continued_from: Option<PathBuf>,
    /// Start afresh over a model already at `save` and another run's checkpoints.
    pub overwrite: bool,
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
    settings: VideoSettings,
    best: f64,
    last_step: usize,
    out: Arc<Mutex<VideoReport>>,
}

impl<I: Backend> EpochHook<VideoDit<I>> for VideoHook<I> {
    fn stop_requested(&self) -> bool {
        self.opts
            .stop_after
            .is_some_and(|s| self.last_step >= s && self.last_step < self.opts.steps)
    }

    fn baseline(&mut self, valid: Score, _model: &VideoDit<I>) -> Result<(), String> {
        self.best = self.best.min(valid.loss());
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
        let drawn = draw(
            model,
            &pairs,
            self.opts.draw,
            &ClipGuidance::default(),
            0,
            16,
        );
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
        let mut note = String::new();
        if valid < self.best {
            self.best = valid;
            self.out.lock().expect("report").best = Some((info.step, valid));
            if let Some(dir) = &self.opts.save {
                self.settings.step = info.step;
                self.settings.valid_loss = Some(valid);
                self.settings.label_gap = Some(gap);
                self.settings.mostly_right = verdict
                    .as_ref()
                    .map(PanelVerdict::median_mostly_right_share);
                save_pipeline(model, &self.settings, dir).map_err(|e| e.to_string())?;
                note = "  saved".into();
            }
        }
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
    let classes = model.config.classes;
    crate::checks::diffusion(
        opts.steps,
        opts.batch,
        opts.parts,
        opts.lr,
        opts.decay_to,
        opts.clip,
        opts.weight_decay,
        opts.eval_every,
        opts.label_dropout,
        opts.draw.steps,
        opts.draw.guidance,
    )?;
    crate::checks::at_least_one("--eval-clips", opts.eval_clips)?;
    crate::checks::non_negative("--double-contrast", opts.double_contrast)?;
    let best = crate::checkpoint::claim_save(
        opts.save.as_deref(),
        opts.continued_from.as_deref(),
        opts.resume,
        opts.overwrite,
    )?;
    let settings = VideoSettings {
        data: opts.data_name.clone(),
        steps: opts.steps,
        batch: opts.batch,
        parts: opts.parts,
        lr: opts.lr,
        warmup: opts.warmup,
        decay_to: opts.decay_to,
        clip: opts.clip,
        seed: opts.seed,
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
        o.insert("eval_every".into(), opts.eval_every.into());
        o.insert("eval_clips".into(), opts.eval_clips.into());
        o.insert("weight_decay".into(), opts.weight_decay.into());
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
        settings,
        best,
        last_step: 0,
        out: out.clone(),
    };
    let source = ClipSource::new(
        train,
        opts.batch,
        opts.seed,
        opts.label_dropout,
        opts.time,
        classes,
        crate::loader::epoch_lengths(opts.steps, opts.eval_every),
    )
    .with_double_contrast(opts.double_contrast);
    let run = RunConfig {
        dir: opts.run_dir.clone(),
        epochs: source.epochs(),
        accumulation: 1,
        parts: opts.parts,
        resume: opts.resume,
        baseline: opts.continued_from.is_some(),
        overwrite: opts.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some((opts.batch as f64, "clips".into())),
    };
    let eval_source = FixedClips::new(test, opts.eval_clips);
    let last = fit(
        run,
        model,
        OptimizerSpec::adamw(opts.weight_decay).build(opts.clip),
        WarmupCosine::new(opts.lr, opts.warmup, opts.steps, opts.decay_to),
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
