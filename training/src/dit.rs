//! The DiT on the shared path: MNIST digits as flow-matching batches, a validation loss that asks
//! the same questions every time, and a judge that reads what the model draws.
//!
//! Why three measurements. The training loss depends mostly on how noisy each example happened to
//! be, so validation uses 64 fixed test digits at 8 fixed noise levels with fixed noise. Even that
//! says nothing about whether the drawings are digits, so at every checkpoint the MNIST classifier
//! (the judge) reads a 10×10 grid (row = digit asked for, column = one fixed noise image) and the
//! score is the share read as the digit asked for. It is a crude judge, a model that drew one
//! perfect 7 a hundred times would score full marks on sevens, but it is a number.

use crate::checkpoint::replace_dir;
use crate::loader::BatchSource;
use crate::optim::OptimizerSpec;
use crate::options::{KeepBest, RunOptions};
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
use nervus_datasets::mnist::{PIXELS, SIDE, Split};
use nervus_datasets::rng::Rng;
pub use nervus_inference::drawing::{DrawSettings, DrawSettingsError, to_unit};
use nervus_inference::render::grid_png;
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::diffusers;
use nervus_models::dit::Dit;
use nervus_models::flow::FlowBatch;
use nervus_models::mlp::Mlp;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Streams the fixed questions are drawn from (independent of any run's seed).
const EVAL_SEED: u64 = 0xD1_7E_A1;
const GRID_SEED: u64 = 0x6E1D;

/// How noise levels are drawn for training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeSampling {
    /// `t ~ U(0, 1)`.
    Uniform,
    /// `t = σ(z)`, `z ~ N(0, 1)` (SD3's logit-normal: more examples at middling noise).
    LogitNormal,
    /// Three quarters of the levels above 0.5: density 0.5 on `[0, 0.5)` and 1.5 on `[0.5, 1)`,
    /// for the noisy levels where a clip's labels change its loss most (the video model's label
    /// gap per level, README), without leaving the clean end untrained.
    HighNoise,
}

impl TimeSampling {
    /// The names the examples' `--time-sampling` takes, in order.
    pub const NAMES: [&'static str; 3] = ["uniform", "logit-normal", "high-noise"];

    /// From a `--time-sampling` name.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "uniform" => Ok(Self::Uniform),
            "logit-normal" => Ok(Self::LogitNormal),
            "high-noise" => Ok(Self::HighNoise),
            other => Err(format!(
                "--time-sampling {other:?}: expected one of {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// One noise level in 0..1.
    pub fn draw(self, rng: &mut Rng) -> f32 {
        match self {
            Self::Uniform => rng.uniform() as f32,
            Self::LogitNormal => (1.0 / (1.0 + (-rng.normal()).exp())) as f32,
            Self::HighNoise => {
                // Inverse of the piecewise-linear distribution function: a quarter of the mass
                // below 0.5.
                let u = rng.uniform();
                (if u < 0.25 {
                    2.0 * u
                } else {
                    0.5 + (u - 0.25) / 1.5
                }) as f32
            }
        }
    }
}

/// A pixel byte to the model's −1..1.
pub fn to_model_range(p: u8) -> f32 {
    p as f32 / 127.5 - 1.0
}

/// Training batches: random digits, their noise, noise levels and (sometimes dropped) labels;
/// batch `n` of the run is a function of the seed and `n` alone.
pub struct DigitSource {
    split: Arc<Split>,
    batch: usize,
    seed: u64,
    label_dropout: f64,
    time: TimeSampling,
    null: i64,
    epochs: Vec<usize>,
}

impl DigitSource {
    pub fn new(
        split: Arc<Split>,
        batch: usize,
        seed: u64,
        label_dropout: f64,
        time: TimeSampling,
        classes: usize,
        epochs: Vec<usize>,
    ) -> Self {
        Self {
            split,
            batch,
            seed,
            label_dropout,
            time,
            null: classes as i64,
            epochs,
        }
    }

    pub fn epochs(&self) -> usize {
        self.epochs.len()
    }
}

/// A flow-matching batch from flat values: samples of `shape` (batch first), their noise, one noise
/// level per sample and the samples' labels, row after row.
pub fn flow_batch<B: Backend, const D: usize>(
    x: Vec<f32>,
    noise: Vec<f32>,
    t: Vec<f32>,
    labels: Vec<i64>,
    shape: [usize; D],
    device: &B::Device,
) -> FlowBatch<B, D> {
    let (b, per) = (t.len(), labels.len() / t.len().max(1));
    FlowBatch {
        x: Tensor::from_data(TensorData::new(x, shape), device),
        noise: Tensor::from_data(TensorData::new(noise, shape), device),
        t: Tensor::from_data(TensorData::new(t, [b]), device),
        labels: Tensor::from_data(TensorData::new(labels, [b, per]), device),
    }
}

impl<B: Backend> BatchSource<B> for DigitSource {
    type Batch = FlowBatch<B, 4>;

    fn batches(&self, epoch: usize) -> usize {
        crate::loader::batches_in(&self.epochs, epoch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> FlowBatch<B, 4> {
        let n = crate::loader::run_index(&self.epochs, epoch, index);
        let mut rng = Rng::stream(self.seed, n as u64);
        let (mut x, mut noise, mut t, mut labels) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.batch {
            let i = rng.below(self.split.len());
            x.extend(self.split.image(i).iter().map(|&p| to_model_range(p)));
            let dropped = rng.uniform() < self.label_dropout;
            labels.push(if dropped {
                self.null
            } else {
                self.split.labels[i] as i64
            });
            t.push(self.time.draw(&mut rng));
            noise.extend((0..PIXELS).map(|_| rng.normal() as f32));
        }
        flow_batch(x, noise, t, labels, [self.batch, 1, SIDE, SIDE], device)
    }
}

/// The validation questions: `images` test digits at 8 noise levels (1/16, 3/16, … 15/16), with
/// noise drawn once.
pub struct FixedNoiseEval {
    x: Vec<f32>,
    labels: Vec<i64>,
    noise: Vec<Vec<f32>>,
    images: usize,
}

/// Noise levels validation is measured at.
pub const EVAL_LEVELS: usize = 8;

impl FixedNoiseEval {
    pub fn new(test: &Split, images: usize) -> Self {
        let images = images.min(test.len());
        let mut rng = Rng::new(EVAL_SEED);
        // Spread over the split so every digit is represented.
        let picks: Vec<usize> = (0..images).map(|k| k * test.len() / images).collect();
        let x = picks
            .iter()
            .flat_map(|&i| test.image(i).iter().map(|&p| to_model_range(p)))
            .collect();
        let labels = picks.iter().map(|&i| test.labels[i] as i64).collect();
        let noise = (0..EVAL_LEVELS)
            .map(|_| (0..images * PIXELS).map(|_| rng.normal() as f32).collect())
            .collect();
        Self {
            x,
            labels,
            noise,
            images,
        }
    }
}

impl<B: Backend> BatchSource<B> for FixedNoiseEval {
    type Batch = FlowBatch<B, 4>;

    fn batches(&self, _epoch: usize) -> usize {
        EVAL_LEVELS
    }

    fn items_per_batch(&self) -> usize {
        self.images
    }

    fn batch(&self, _epoch: usize, level: usize, device: &B::Device) -> FlowBatch<B, 4> {
        let t = (2 * level + 1) as f32 / (2 * EVAL_LEVELS) as f32;
        flow_batch(
            self.x.clone(),
            self.noise[level].clone(),
            vec![t; self.images],
            self.labels.clone(),
            [self.images, 1, SIDE, SIDE],
            device,
        )
    }
}

/// The fixed noise images of the grid's columns.
pub fn grid_noise(columns: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(GRID_SEED);
    (0..columns)
        .map(|_| (0..PIXELS).map(|_| rng.normal() as f32).collect())
        .collect()
}

/// Draws digit `r` from noise `c` for every row `r` in `digits` and column `c`; images in 0..1,
/// row after row.
pub fn draw<B: Backend>(
    model: &Dit<B>,
    digits: &[usize],
    noise: &[Vec<f32>],
    settings: DrawSettings,
) -> Vec<Vec<f32>> {
    let device = model.proj_out_2.weight.device();
    let n = digits.len() * noise.len();
    let x1: Vec<f32> = digits
        .iter()
        .flat_map(|_| noise.iter().flatten().copied())
        .collect();
    let labels: Vec<i64> = digits
        .iter()
        .flat_map(|&d| std::iter::repeat_n(d as i64, noise.len()))
        .collect();
    let x1 = Tensor::<B, 4>::from_data(TensorData::new(x1, [n, 1, SIDE, SIDE]), &device);
    let labels = Tensor::<B, 2, Int>::from_data(TensorData::new(labels, [n, 1]), &device);
    let out = settings.draw_pixels(model, x1, labels);
    out.chunks(PIXELS).map(<[f32]>::to_vec).collect()
}

/// What the judge read in a grid.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// For each digit asked for, how many of its drawings were read as that digit.
    pub right: Vec<usize>,
    /// Drawings per digit.
    pub per_digit: usize,
}

impl Verdict {
    pub fn score(&self) -> f64 {
        self.right.iter().sum::<usize>() as f64 / (self.right.len() * self.per_digit).max(1) as f64
    }

    /// Digits read right in at least half of their drawings.
    pub fn digits_drawn(&self) -> usize {
        self.right
            .iter()
            .filter(|&&r| 2 * r >= self.per_digit)
            .count()
    }
}

/// The judge's reading of images (0..1) drawn for `digits`, `per_digit` each, row after row.
pub fn judge<B: Backend>(
    judge: &Mlp<B>,
    images: &[Vec<f32>],
    digits: &[usize],
    per_digit: usize,
) -> Verdict {
    let device = judge.fc1.weight.device();
    let flat: Vec<f32> = images.iter().flatten().copied().collect();
    let x = Tensor::<B, 2>::from_data(TensorData::new(flat, [images.len(), PIXELS]), &device);
    let read: Vec<i64> = judge
        .forward(x)
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .collect();
    let right = digits
        .iter()
        .enumerate()
        .map(|(row, &d)| {
            read[row * per_digit..(row + 1) * per_digit]
                .iter()
                .filter(|&&r| r == d as i64)
                .count()
        })
        .collect();
    Verdict { right, per_digit }
}

/// What a DiT run was, saved beside the pipeline as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DitSettings {
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
    pub optimizer: OptimizerSpec,
    pub seed: u64,
    pub label_dropout: f64,
    pub time: TimeSampling,
    pub draw: DrawSettings,
    pub backend: String,
    pub step: usize,
    pub valid_loss: Option<f64>,
    pub judge_score: Option<f64>,
}

/// Everything a DiT run needs besides the data, the judge and the model.
#[derive(Clone, Debug)]
pub struct DitOptions {
    /// What every run shares (steps, schedule, saving, resuming).
    pub run: RunOptions,
    pub label_dropout: f64,
    pub time: TimeSampling,
    pub draw: DrawSettings,
    /// Where grids and the strip go.
    pub out: PathBuf,
    pub data_name: String,
}

impl DitOptions {
    /// Refuses numbers no run can use, naming the flag.
    pub fn check(&self) -> Result<(), TrainError> {
        self.run.check()?;
        crate::checks::diffusion(self.label_dropout, self.draw.steps, self.draw.guidance)?;
        self.draw.check()?;
        Ok(())
    }
}

crate::options::record_step_and_loss!(DitSettings);

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct DitReport {
    /// `(step, train loss, validation loss, judge)` at each checkpoint.
    pub checkpoints: Vec<(usize, f64, f64, Verdict)>,
    pub best: Option<(usize, f64)>,
    pub seconds: f64,
}

/// Writes the pipeline and `training.json` into `dir`, replacing what was there in one move.
pub fn save_pipeline<B: Backend>(
    model: &Dit<B>,
    settings: &DitSettings,
    dir: &Path,
) -> Result<(), CheckpointError> {
    replace_dir(dir, |staging| {
        diffusers::save_pipeline(model, staging)?;
        write_json(&staging.join("training.json"), settings)
    })
}

struct DitHook<I: Backend> {
    report: Reporter,
    opts: DitOptions,
    judge: Mlp<I>,
    noise: Vec<Vec<f32>>,
    keep: KeepBest<DitSettings>,
    last_step: usize,
    strip: Vec<Vec<f32>>,
    out: Arc<Mutex<DitReport>>,
}

const DIGITS: [usize; 10] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

impl<I: Backend> EpochHook<Dit<I>> for DitHook<I> {
    fn stop_requested(&self) -> bool {
        self.opts.run.stops_at(self.last_step)
    }

    fn baseline(&mut self, valid: Score, _model: &Dit<I>) -> Result<(), String> {
        self.keep.baseline(valid.loss());
        Ok(())
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &Dit<I>) -> Result<(), String> {
        self.last_step = info.step;
        let images = draw(model, &DIGITS, &self.noise, self.opts.draw);
        let verdict = judge(&self.judge, &images, &DIGITS, self.noise.len());
        let grid = self.opts.out.join(format!("grid-step{:05}.png", info.step));
        grid_png(&images, 10, self.noise.len(), SIDE, 2, &grid)?;
        // The strip: one row per checkpoint, each digit drawn from the first noise image.
        self.strip
            .extend((0..10).map(|d| images[d * self.noise.len()].clone()));
        let rows = self.strip.len() / 10;
        grid_png(
            &self.strip,
            rows,
            10,
            SIDE,
            2,
            &self.opts.out.join("strip.png"),
        )?;
        let valid = info.valid.loss();
        self.keep.settings.judge_score = Some(verdict.score());
        let note = self.keep.offer(info.step, valid, |settings, dir| {
            save_pipeline(model, settings, dir)
        })?;
        self.out.lock().expect("report").best = self.keep.found;
        self.report.line(format!(
            "step {:>5}  train loss {:.4}  validation loss {:.4}  judge {:>3.0}% ({} of 10 digits drawn)  ({}){note}",
            info.step,
            info.train.loss(),
            valid,
            verdict.score() * 100.0,
            verdict.digits_drawn(),
            duration(info.elapsed)
        ));
        self.report.line(format!(
            "  read right per digit: {}   grid: {}",
            verdict
                .right
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            grid.display()
        ));
        let mut out = self.out.lock().expect("report");
        out.checkpoints
            .push((info.step, info.train.loss(), valid, verdict));
        out.seconds = info.elapsed;
        Ok(())
    }
}

/// Trains `model` on `train`, validating on `test`, judged by `judge`. Writes a grid per
/// checkpoint and `strip.png` (one row per checkpoint so far, the same noise each time).
pub fn train<B: AutodiffBackend>(
    opts: &DitOptions,
    train: Arc<Split>,
    test: &Split,
    judge: Mlp<B::InnerBackend>,
    model: Dit<B>,
    report: Reporter,
) -> Result<(DitReport, Dit<B::InnerBackend>), TrainError> {
    let classes = model.config.classes;
    opts.check()?;
    let best = crate::checkpoint::claim_save(
        opts.run.save.as_deref(),
        opts.run.continued_from.as_deref(),
        opts.run.resume,
        opts.run.overwrite,
    )?;
    let optimizer = OptimizerSpec::adamw(opts.run.weight_decay);
    let settings = DitSettings {
        data: opts.data_name.clone(),
        steps: opts.run.steps,
        batch: opts.run.batch,
        parts: opts.run.parts,
        lr: opts.run.lr,
        warmup: opts.run.warmup,
        decay_to: opts.run.decay_to,
        clip: opts.run.clip,
        optimizer: optimizer.clone(),
        seed: opts.run.seed,
        label_dropout: opts.label_dropout,
        time: opts.time,
        draw: opts.draw,
        backend: crate::backend::NAME.into(),
        step: 0,
        valid_loss: None,
        judge_score: None,
    };
    let mut fingerprint = crate::run::fingerprint(&settings, &model.config);
    if let Some(o) = fingerprint.as_object_mut() {
        o.insert("eval_every".into(), opts.run.eval_every.into());
        o.insert("weight_decay".into(), opts.run.weight_decay.into());
    }
    let out = Arc::new(Mutex::new(DitReport::default()));
    let hook = DitHook {
        report: report.clone(),
        opts: opts.clone(),
        judge,
        noise: grid_noise(10),
        keep: KeepBest::new(best, opts.run.save.clone(), settings),
        last_step: 0,
        strip: Vec::new(),
        out: out.clone(),
    };
    let source = DigitSource::new(
        train,
        opts.run.batch,
        opts.run.seed,
        opts.label_dropout,
        opts.time,
        classes,
        crate::loader::epoch_lengths(opts.run.steps, opts.run.eval_every),
    );
    let config = RunConfig {
        dir: opts.run.run_dir.clone(),
        epochs: source.epochs(),
        accumulation: 1,
        parts: opts.run.parts,
        resume: opts.run.resume,
        baseline: opts.run.continued_from.is_some(),
        overwrite: opts.run.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some((opts.run.batch as f64, "images".into())),
    };
    let last = fit(
        config,
        model,
        optimizer.build(opts.run.clip),
        WarmupCosine::new(
            opts.run.lr,
            opts.run.warmup,
            opts.run.steps,
            opts.run.decay_to,
        ),
        source,
        FixedNoiseEval::new(test, 64),
        |t| {
            t.metrics((LossMetric::new(),))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let out = out.lock().expect("report").clone();
    Ok((out, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The high-noise levels have the distribution they claim: a quarter below 0.5, spread evenly
    /// on each side (means 0.25 and 0.75 of the two halves), all inside 0..1; every name parses
    /// back to its variant and an unknown one is refused by name.
    #[test]
    fn high_noise_levels_put_three_quarters_above_one_half() {
        let mut rng = Rng::new(7);
        let n = 40_000;
        let t: Vec<f64> = (0..n)
            .map(|_| TimeSampling::HighNoise.draw(&mut rng) as f64)
            .collect();
        assert!(t.iter().all(|v| (0.0..1.0).contains(v)));
        let (low, high): (Vec<f64>, Vec<f64>) = t.iter().partition(|v| **v < 0.5);
        let share = low.len() as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.01, "share below 0.5: {share}");
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean(&low) - 0.25).abs() < 0.01, "{}", mean(&low));
        assert!((mean(&high) - 0.75).abs() < 0.01, "{}", mean(&high));
        for (name, want) in TimeSampling::NAMES.iter().zip([
            TimeSampling::Uniform,
            TimeSampling::LogitNormal,
            TimeSampling::HighNoise,
        ]) {
            assert_eq!(TimeSampling::parse(name), Ok(want));
        }
        let e = TimeSampling::parse("high").unwrap_err();
        assert!(e.contains("\"high\"") && e.contains("high-noise"), "{e}");
    }
}

/// A DiT run as the example starts it.
#[derive(Clone, Debug)]
pub struct DitRun {
    /// The run; `run.continued_from` is the pipeline to start from (or, with 0 steps, to draw
    /// with).
    pub options: DitOptions,
    /// The fresh model's shape (a continuation keeps its own).
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    pub patch: usize,
    /// A saved judge; default: train one first (about 10 s).
    pub judge: Option<PathBuf>,
    /// Train on the full MNIST, fetched and verified, instead of the vendored subset.
    pub download: bool,
}

impl DitRun {
    /// The fresh model's configuration, or the refusal of a shape no model can have.
    pub fn model_config(&self) -> Result<nervus_models::dit::DitConfig, TrainError> {
        for (flag, v) in [
            ("--layers", self.layers),
            ("--d-model", self.d_model),
            ("--heads", self.heads),
            ("--patch", self.patch),
        ] {
            crate::checks::at_least_one(flag, v)?;
        }
        if !SIDE.is_multiple_of(self.patch) || !self.d_model.is_multiple_of(self.heads) {
            return Err(TrainError::BadValue(crate::checks::BadValue {
                flag: "--patch",
                value: format!(
                    "{} with --heads {} and --d-model {}",
                    self.patch, self.heads, self.d_model
                ),
                rule: "--patch must divide 28 and --heads must divide --d-model",
            }));
        }
        Ok(nervus_models::dit::DitConfig::digits()
            .with_num_layers(self.layers)
            .with_patch_size(self.patch)
            .with_num_attention_heads(self.heads)
            .with_attention_head_dim(self.d_model / self.heads))
    }
}

/// The judge a DiT run reads its drawings with: the MNIST MLP saved in `judge`, or one trained
/// here on `data` and saved in `out/judge`.
pub fn judge_model<B: AutodiffBackend>(
    judge: Option<&Path>,
    data: &nervus_datasets::mnist::Mnist,
    out: &Path,
    report: &Reporter,
    device: &B::Device,
) -> Result<Mlp<B::InnerBackend>, TrainError> {
    if let Some(dir) = judge {
        return Mlp::load(dir, device)
            .map_err(|e| TrainError::read(format!("loading the judge from {}", dir.display()), e));
    }
    let opts = crate::mnist::MnistOptions {
        hidden: 128,
        optimizer: OptimizerSpec::Sgd { momentum: 0.9 },
        lr: 0.02,
        epochs: 10,
        batch: 32,
        seed: 1,
        save: Some(out.join("judge")),
        run_dir: out.join("judge-train"),
        // A deterministic by-product, trained again on every run without --judge.
        overwrite: true,
    };
    let (model, r) = crate::mnist::train::<B>(
        &opts,
        Arc::new(data.train.clone()),
        Arc::new(data.test.clone()),
        Reporter::silent(),
        device,
    )?;
    report.line(format!(
        "judge: the MNIST MLP, trained here in {} to {:.1}% on the test split (saved in {})",
        duration(r.seconds),
        r.final_accuracy() * 100.0,
        out.join("judge").display()
    ));
    Ok(model)
}

/// Runs `spec`: with 0 steps draws a grid with the loaded pipeline and has the judge read it;
/// otherwise trains (a fresh model, or the loaded one) and reports the end. Everything that can
/// be refused is refused before any data is read or a judge is trained.
pub fn run<B: AutodiffBackend>(
    spec: &DitRun,
    report: &Reporter,
    device: &B::Device,
) -> Result<Option<DitReport>, TrainError> {
    let opts = &spec.options;
    let run = &opts.run;
    let loaded = match &run.continued_from {
        Some(dir) => {
            if !dir.join("model_index.json").is_file() {
                return Err(TrainError::read(
                    dir.display().to_string(),
                    "not a diffusers pipeline (no model_index.json); give the directory a run saved",
                ));
            }
            Some(
                diffusers::load_transformer::<B>(&dir.join("transformer"), device)
                    .map_err(|e| TrainError::read(format!("loading {}", dir.display()), e))?,
            )
        }
        None => None,
    };
    let fresh = match loaded {
        None => Some(spec.model_config()?),
        Some(_) => None,
    };
    if run.steps == 0 {
        let Some(model) = loaded else {
            return Err(TrainError::NothingLoaded("draw", "pipeline"));
        };
        opts.draw.check()?;
        let data = nervus_datasets::mnist::Mnist::load(spec.download, None)?;
        let judge = judge_model::<B>(spec.judge.as_deref(), &data, &opts.out, report, device)?;
        draw_grid(&model.valid(), &judge, opts.draw, &opts.out, report)?;
        return Ok(None);
    }
    opts.check()?;
    if let Some(save) = &run.save {
        crate::checkpoint::check_fresh_save(
            save,
            run.continued_from.as_deref(),
            run.resume,
            run.overwrite,
        )?;
    }
    let data = nervus_datasets::mnist::Mnist::load(spec.download, None)?;
    let judge = judge_model::<B>(spec.judge.as_deref(), &data, &opts.out, report, device)?;
    let model = match (loaded, fresh) {
        (Some(model), _) => model,
        (None, Some(config)) => {
            B::seed(device, run.seed);
            config.init::<B>(device)
        }
        (None, None) => unreachable!("a fresh run has a configuration"),
    };
    let c = &model.config;
    report.line(format!(
        "data: MNIST ({}), {} training digits | model: DiT, {} blocks, d_model {}, {} heads, {}×{} patches ({} tokens): {} parameters | backend {}",
        data.source,
        data.train.len(),
        c.num_layers,
        c.d_model(),
        c.num_attention_heads,
        c.patch_size,
        c.patch_size,
        c.tokens(),
        model.num_params(),
        crate::backend::NAME
    ));
    let options = DitOptions {
        data_name: data.source.clone(),
        ..opts.clone()
    };
    let (result, _) = train(
        &options,
        Arc::new(data.train),
        &data.test,
        judge,
        model,
        report.clone(),
    )?;
    if let Some((_, _, _, v)) = result.checkpoints.last() {
        report.line(format!(
            "final judge {:.0}%, {} of 10 digits drawn at least half the time; {} in all; strip in {}",
            v.score() * 100.0,
            v.digits_drawn(),
            duration(result.seconds),
            opts.out.join("strip.png").display()
        ));
    }
    if let (Some((step, loss)), Some(save)) = (result.best, &run.save) {
        report.line(format!(
            "best validation loss {loss:.4} at step {step}, saved in {}",
            save.display()
        ));
    }
    Ok(Some(result))
}

/// Draws every digit from the ten fixed noise images of [`grid_noise`] with `settings`, has the
/// judge read the grid, and writes it to `out/grid-g<guidance>-s<steps>….png`.
pub fn draw_grid<B: Backend>(
    model: &Dit<B>,
    judge_model: &Mlp<B>,
    settings: DrawSettings,
    out: &Path,
    report: &Reporter,
) -> Result<Verdict, TrainError> {
    let digits: Vec<usize> = (0..10).collect();
    let images = draw(model, &digits, &grid_noise(10), settings);
    let verdict = judge(judge_model, &images, &digits, 10);
    let mut name = format!("grid-g{}-s{}", settings.guidance, settings.steps);
    if settings.shift != 1.0 {
        name += &format!("-shift{}", settings.shift);
    }
    if settings.guidance_below < 1.0 {
        name += &format!("-below{}", settings.guidance_below);
        if settings.guidance_above != 1.0 {
            name += &format!("-above{}", settings.guidance_above);
        }
    }
    let path = out.join(format!("{name}.png"));
    grid_png(&images, 10, 10, SIDE, 2, &path).map_err(TrainError::Hook)?;
    report.line(format!(
        "judge: {:.0}% read as asked ({} of 10 digits drawn); per digit {:?}; grid in {}",
        verdict.score() * 100.0,
        verdict.digits_drawn(),
        verdict.right,
        path.display()
    ));
    Ok(verdict)
}
