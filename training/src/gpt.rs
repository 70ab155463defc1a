//! The GPT on the shared path: windows of text as batches, a fixed validation set, samples and the
//! best model saved at every checkpoint, continuations that only ever replace a model with a
//! better one.
//!
//! Data. Training windows come from the first 90% of the text and validation windows from the last
//! 10%: the tail, not a random sample, because windows overlap and a random validation window
//! would share most of its characters with training windows. Validation uses a fixed set of
//! windows drawn by a generator of its own, so every checkpoint and every run (whatever its seed
//! or `--eval-every`) is scored on the same questions, and drawing them never moves the training
//! stream: training batch `n` is a function of the seed and `n` alone.

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
use nervus_datasets::download::sha256_hex;
use nervus_datasets::rng::Rng;
use nervus_datasets::text::{CharTokenizer, UnknownChar};
use nervus_inference::generate::{SampleOptions, generate};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::gpt::{Gpt, GptConfig, LmBatch};
use nervus_models::gpt2;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The stream validation windows are drawn from (independent of any run's seed).
const EVAL_SEED: u64 = 0x5EED_E7A1;

/// A text as token ids, with the point where validation begins.
#[derive(Clone, Debug)]
pub struct TextData {
    pub name: String,
    pub sha256: String,
    pub tokenizer: CharTokenizer,
    pub ids: Arc<Vec<u32>>,
    /// Ids `0..split` train, `split..` validate.
    pub split: usize,
}

/// Why a text cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TextDataError {
    #[error(transparent)]
    Unknown(#[from] UnknownChar),
    #[error(
        "{name}: {len} characters is too short: the last 10% must hold a validation window of {need} \
         (context + 1); use a longer text or a smaller --context"
    )]
    TooShort {
        name: String,
        len: usize,
        need: usize,
    },
}

impl TextData {
    /// Splits `text` 90/10, with `tokenizer` (a continuation's) or one built from the text.
    pub fn new(
        name: &str,
        text: &str,
        tokenizer: Option<CharTokenizer>,
        context: usize,
    ) -> Result<Self, TextDataError> {
        let tokenizer = tokenizer.unwrap_or_else(|| CharTokenizer::from_text(text));
        let ids = tokenizer.encode(text, name)?;
        let split = ids.len() * 9 / 10;
        if ids.len() - split < context + 1 || split < context + 1 {
            return Err(TextDataError::TooShort {
                name: name.to_string(),
                len: ids.len(),
                need: context + 1,
            });
        }
        Ok(Self {
            name: name.to_string(),
            sha256: sha256_hex(text.as_bytes()),
            tokenizer,
            ids: Arc::new(ids),
            split,
        })
    }

    /// `(ln V, unigram entropy of the training part)`: the losses of knowing nothing and of
    /// knowing only how common each character is.
    pub fn losses_to_beat(&self) -> (f64, f64) {
        let v = self.tokenizer.vocab_size();
        (
            (v as f64).ln(),
            nervus_datasets::text::unigram_entropy(&self.ids[..self.split], v),
        )
    }
}

fn lm_batch<B: Backend>(ids: &[u32], starts: &[usize], t: usize, device: &B::Device) -> LmBatch<B> {
    let b = starts.len();
    let mut x = Vec::with_capacity(b * t);
    let mut y = Vec::with_capacity(b * t);
    for &s in starts {
        x.extend(ids[s..s + t].iter().map(|&v| v as i64));
        y.extend(ids[s + 1..s + t + 1].iter().map(|&v| v as i64));
    }
    LmBatch {
        inputs: Tensor::from_data(TensorData::new(x, [b, t]), device),
        targets: Tensor::from_data(TensorData::new(y, [b, t]), device),
        doc_mask: None,
    }
}

/// Random training windows: batch `n` of the run is drawn by `Rng::stream(seed, n)`.
pub struct WindowSource {
    ids: Arc<Vec<u32>>,
    /// Window starts are drawn from `0..=last_start`.
    last_start: usize,
    context: usize,
    batch: usize,
    seed: u64,
    /// Batches in each epoch (the last may be shorter).
    epochs: Vec<usize>,
}

impl WindowSource {
    pub fn new(
        data: &TextData,
        context: usize,
        batch: usize,
        seed: u64,
        steps: usize,
        every: usize,
    ) -> Self {
        let epochs = crate::loader::epoch_lengths(steps, every);
        Self {
            ids: data.ids.clone(),
            last_start: data.split - context - 1,
            context,
            batch,
            seed,
            epochs,
        }
    }

    pub fn epochs(&self) -> usize {
        self.epochs.len()
    }

    /// The window starts of the run's `n`-th batch (0-based).
    pub fn starts(&self, n: usize) -> Vec<usize> {
        let mut rng = Rng::stream(self.seed, n as u64);
        (0..self.batch)
            .map(|_| rng.below(self.last_start + 1))
            .collect()
    }
}

impl<B: Backend> BatchSource<B> for WindowSource {
    type Batch = LmBatch<B>;

    fn batches(&self, epoch: usize) -> usize {
        crate::loader::batches_in(&self.epochs, epoch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> LmBatch<B> {
        let n = crate::loader::run_index(&self.epochs, epoch, index);
        lm_batch(&self.ids, &self.starts(n), self.context, device)
    }
}

/// The fixed validation windows, from the tail of the text.
pub struct EvalSource {
    ids: Arc<Vec<u32>>,
    starts: Vec<usize>,
    context: usize,
    batch: usize,
}

impl EvalSource {
    /// `windows` windows drawn once from the validation part by the evaluation stream.
    pub fn new(data: &TextData, context: usize, windows: usize, batch: usize) -> Self {
        let mut rng = Rng::new(EVAL_SEED);
        let span = data.ids.len() - context - 1 - data.split;
        let starts = (0..windows)
            .map(|_| data.split + rng.below(span + 1))
            .collect();
        Self {
            ids: data.ids.clone(),
            starts,
            context,
            batch: batch.max(1),
        }
    }

    /// The default number of windows: about 16K predictions, at least 32 windows.
    pub fn default_windows(context: usize) -> usize {
        16_384usize.div_ceil(context).max(32)
    }

    pub fn starts(&self) -> &[usize] {
        &self.starts
    }
}

impl<B: Backend> BatchSource<B> for EvalSource {
    type Batch = LmBatch<B>;

    fn batches(&self, _epoch: usize) -> usize {
        self.starts.len().div_ceil(self.batch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, _epoch: usize, index: usize, device: &B::Device) -> LmBatch<B> {
        let end = ((index + 1) * self.batch).min(self.starts.len());
        lm_batch(
            &self.ids,
            &self.starts[index * self.batch..end],
            self.context,
            device,
        )
    }
}

/// What a run was, saved beside the model as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingSettings {
    pub data: String,
    pub data_sha256: String,
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
    pub eval_every: usize,
    pub eval_windows: usize,
    pub backend: String,
    /// The directory this run continued from, if any.
    pub continued_from: Option<String>,
    /// Optimizer steps taken when this model was saved (counting from this run's start).
    pub step: usize,
    /// Its validation loss (nats per character) on the fixed windows, once measured.
    pub valid_loss: Option<f64>,
    /// The model's configuration (runs older than the field: none), against which a
    /// `config.json` edited afterwards is caught.
    #[serde(default)]
    pub model: Option<GptConfig>,
}

crate::options::record_step_and_loss!(TrainingSettings);

/// Everything a GPT run needs besides the data.
#[derive(Clone, Debug)]
pub struct GptOptions {
    pub model: GptConfig,
    /// What every run shares (steps, schedule, saving, resuming).
    pub run: RunOptions,
    pub eval_windows: usize,
    /// What the checkpoint sample looks like.
    pub sample: SampleOptions,
    /// The sample's prompt.
    pub prompt: String,
}

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct GptReport {
    /// `(step, train loss, validation loss)` at each checkpoint.
    pub checkpoints: Vec<(usize, f64, f64)>,
    /// Validation loss of the starting model, for a continuation.
    pub baseline: Option<f64>,
    /// The best validation loss and the step it was reached at (`None`: nothing beat the start).
    pub best: Option<(usize, f64)>,
    pub seconds: f64,
    /// The last checkpoint's sample.
    pub sample: String,
}

/// Writes a model directory: `model.safetensors` + `config.json` (GPT-2), `tokenizer.json` and
/// `training.json`. All four go into a fresh directory beside `dir` which then takes `dir`'s
/// place, so a reader sees the old model or the new one, never half of each.
pub fn save_dir<B: Backend>(
    model: &Gpt<B>,
    tokenizer: &CharTokenizer,
    settings: &TrainingSettings,
    dir: &Path,
) -> Result<(), CheckpointError> {
    crate::checkpoint::replace_dir(dir, |staging| {
        gpt2::save(model, staging)?;
        tokenizer
            .save(&staging.join("tokenizer.json"))
            .map_err(|e| CheckpointError::format(staging, e.to_string()))?;
        write_json(&staging.join("training.json"), settings)
    })
}

/// Reads a model directory written by [`save_dir`] (or any GPT-2 directory with a character
/// `tokenizer.json`).
pub fn load_dir<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<(Gpt<B>, CharTokenizer, Option<TrainingSettings>), CheckpointError> {
    let model = gpt2::load(dir, device)?;
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = CharTokenizer::load(&tok_path).map_err(|e| {
        let text = e.to_string();
        let own = format!("{}: ", tok_path.display());
        CheckpointError::format(&tok_path, text.strip_prefix(&own).unwrap_or(&text))
    })?;
    crate::checkpoint::check_vocab(&tok_path, tokenizer.vocab_size(), model.config.vocab)?;
    let settings: Option<TrainingSettings> = crate::checkpoint::read_settings(dir)?;
    if let Some(saved) = settings.as_ref().and_then(|s| s.model.as_ref()) {
        let c = &model.config;
        let shape = |c: &GptConfig| (c.vocab, c.context, c.layers, c.heads, c.d_model);
        if shape(saved) != shape(c) {
            return Err(CheckpointError::format(
                dir.join("config.json"),
                format!(
                    "describes {} layers, {} heads, width {}, context {}, vocabulary {}, but the \
                     model was trained as {} layers, {} heads, width {}, context {}, vocabulary {} \
                     (training.json): the file was edited",
                    c.layers,
                    c.heads,
                    c.d_model,
                    c.context,
                    c.vocab,
                    saved.layers,
                    saved.heads,
                    saved.d_model,
                    saved.context,
                    saved.vocab
                ),
            ));
        }
    }
    Ok((model, tokenizer, settings))
}

struct GptHook {
    report: Reporter,
    opts: GptOptions,
    tokenizer: CharTokenizer,
    prompt: Vec<u32>,
    keep: KeepBest<TrainingSettings>,
    last_step: usize,
    out: Arc<Mutex<GptReport>>,
}

impl<B: Backend> EpochHook<Gpt<B>> for GptHook {
    fn stop_requested(&self) -> bool {
        self.opts.run.stops_at(self.last_step)
    }

    fn baseline(&mut self, valid: Score, _model: &Gpt<B>) -> Result<(), String> {
        self.keep.baseline(valid.loss());
        self.out.lock().expect("report").baseline = Some(valid.loss());
        self.report.line(format!(
            "the starting model scores {:.4} on the validation windows: a checkpoint must beat that to be saved",
            valid.loss()
        ));
        Ok(())
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &Gpt<B>) -> Result<(), String> {
        let mut rng = Rng::stream(self.opts.run.seed ^ 0xA5A5, info.step as u64);
        let sample =
            self.tokenizer
                .decode(&generate(model, &self.prompt, &self.opts.sample, &mut rng));
        self.last_step = info.step;
        let valid = info.valid.loss();
        let tokenizer = &self.tokenizer;
        let note = self.keep.offer(info.step, valid, |settings, dir| {
            save_dir(model, tokenizer, settings, dir)
        })?;
        self.out.lock().expect("report").best = self.keep.found;
        self.report.line(format!(
            "step {:>5}  train loss {:.3}  validation loss {:.3}  lr {:.2e}  ({}){note}",
            info.step,
            info.train.loss(),
            valid,
            info.lr,
            duration(info.elapsed)
        ));
        let shown = format!("{}{}", self.opts.prompt, sample);
        for line in shown.lines() {
            self.report.line(format!("  > {line}"));
        }
        let mut out = self.out.lock().expect("report");
        out.checkpoints.push((info.step, info.train.loss(), valid));
        out.seconds = info.elapsed;
        out.sample = sample;
        Ok(())
    }
}

/// Trains `model` (a fresh one, or a continuation's) on `data`; returns what was measured and the
/// model as it ended (the best one is on disk, if `save` was given).
pub fn train<B: AutodiffBackend>(
    opts: &GptOptions,
    data: &TextData,
    model: Gpt<B>,
    report: Reporter,
) -> Result<(GptReport, Gpt<B::InnerBackend>), TrainError> {
    train_with(
        opts,
        OptimizerSpec::adamw(opts.run.weight_decay),
        data,
        model,
        report,
    )
}

/// [`train`] with another optimizer (the experiments compare AdamW with SGD).
pub fn train_with<B: AutodiffBackend>(
    opts: &GptOptions,
    optimizer: OptimizerSpec,
    data: &TextData,
    model: Gpt<B>,
    report: Reporter,
) -> Result<(GptReport, Gpt<B::InnerBackend>), TrainError> {
    let context = model.context();
    opts.model.check()?;
    opts.run.check()?;
    crate::checks::at_least_one("--eval-windows", opts.eval_windows)?;
    crate::checks::sample(&opts.sample)?;
    let c = &model.config;
    crate::checks::attention_fits(c.context, opts.run.batch, c.heads, c.layers)?;
    let best = crate::checkpoint::claim_save(
        opts.run.save.as_deref(),
        opts.run.continued_from.as_deref(),
        opts.run.resume,
        opts.run.overwrite,
    )?;
    let prompt = data
        .tokenizer
        .encode(&opts.prompt, "--prompt")
        .map_err(|e| TrainError::Hook(e.to_string()))?;
    let prompt = if prompt.is_empty() {
        vec![data.ids[data.split]]
    } else {
        prompt
    };
    let settings = TrainingSettings {
        data: data.name.clone(),
        data_sha256: data.sha256.clone(),
        steps: opts.run.steps,
        batch: opts.run.batch,
        parts: opts.run.parts,
        lr: opts.run.lr,
        warmup: opts.run.warmup,
        decay_to: opts.run.decay_to,
        clip: opts.run.clip,
        optimizer: optimizer.clone(),
        seed: opts.run.seed,
        eval_every: opts.run.eval_every,
        eval_windows: opts.eval_windows,
        backend: crate::backend::NAME.to_string(),
        continued_from: opts
            .run
            .continued_from
            .as_ref()
            .map(|p| p.display().to_string()),
        step: 0,
        valid_loss: None,
        model: Some(opts.model.clone()),
    };
    let fingerprint = crate::run::fingerprint(&settings, &opts.model);
    let out = Arc::new(Mutex::new(GptReport::default()));
    let hook = GptHook {
        report: report.clone(),
        opts: opts.clone(),
        tokenizer: data.tokenizer.clone(),
        prompt,
        keep: KeepBest::new(best, opts.run.save.clone(), settings),
        last_step: 0,
        out: out.clone(),
    };
    let train_src = WindowSource::new(
        data,
        context,
        opts.run.batch,
        opts.run.seed,
        opts.run.steps,
        opts.run.eval_every,
    );
    let epochs = train_src.epochs();
    let config = RunConfig {
        dir: opts.run.run_dir.clone(),
        epochs,
        accumulation: 1,
        parts: opts.run.parts.max(1),
        resume: opts.run.resume,
        baseline: opts.run.continued_from.is_some(),
        overwrite: opts.run.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some(((opts.run.batch * context) as f64, "characters".into())),
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
        train_src,
        EvalSource::new(data, context, opts.eval_windows, 64),
        |t| {
            t.metrics((LossMetric::new(),))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let out = out.lock().expect("report").clone();
    if let (Some(base), None) = (out.baseline, out.best) {
        report.line(format!(
            "nothing beat the model this run started from: it scores {base:.4}, and no checkpoint here did better; \
             the saved model is unchanged"
        ));
    }
    Ok((out, last))
}

/// A GPT run as the example starts it.
#[derive(Clone, Debug)]
pub struct GptRun {
    /// What every run shares; `continued_from` is the model to start from (or, with 0 steps, to
    /// write with).
    pub run: RunOptions,
    /// The fresh model's size preset (small, medium, large) and the flags that change it (a
    /// continuation keeps its own shape and refuses them).
    pub size: String,
    pub layers: Option<usize>,
    pub heads: Option<usize>,
    pub d_model: Option<usize>,
    pub context: Option<usize>,
    /// Fixed validation windows (default: [`EvalSource::default_windows`]).
    pub eval_windows: Option<usize>,
    /// How the model writes at the end (the checkpoint samples share its temperature and top-k
    /// and are 80 characters long).
    pub sample: SampleOptions,
    pub prompt: String,
    /// A corpus to fetch (tiny-shakespeare), or a text file; else the vendored Shakespeare.
    pub download: Option<String>,
    pub data: Option<PathBuf>,
}

/// What a GPT run did: trained (its report), and what the model it leaves wrote.
pub type GptOutcome = crate::options::TextOutcome<GptReport>;

/// `model` continuing `prompt` (from a line break where it is empty) with `sample`, seeded by
/// `seed`.
pub fn write<B: Backend>(
    model: &Gpt<B>,
    tokenizer: &CharTokenizer,
    prompt: &str,
    sample: &SampleOptions,
    seed: u64,
) -> Result<String, TrainError> {
    crate::checks::sample(sample)?;
    let ids = if prompt.is_empty() {
        // Start at a line break, or where the text has none, at its vocabulary's first character.
        tokenizer.encode("\n", "").unwrap_or_else(|_| vec![0])
    } else {
        tokenizer
            .encode(prompt, "--prompt")
            .map_err(|e| TrainError::Hook(e.to_string()))?
    };
    Ok(tokenizer.decode(&generate(model, &ids, sample, &mut Rng::new(seed))))
}

/// Runs `spec`: with 0 steps writes with the loaded model; otherwise reads the text, starts the
/// model (fresh from the preset, or the loaded one), trains it, and has the saved model write.
pub fn run<B: AutodiffBackend>(
    spec: &GptRun,
    report: &Reporter,
    device: &B::Device,
) -> Result<GptOutcome, TrainError> {
    let run = &spec.run;
    if run.continued_from.is_some() {
        TrainError::refuse_shape_with_load(&[
            ("--layers", spec.layers),
            ("--heads", spec.heads),
            ("--d-model", spec.d_model),
            ("--context", spec.context),
        ])?;
    }
    let loaded = match &run.continued_from {
        Some(dir) => Some(
            load_dir::<B>(dir, device)
                .map_err(|e| TrainError::read(format!("loading {}", dir.display()), e))?,
        ),
        None => None,
    };
    if run.steps == 0 {
        let Some((model, tokenizer, _)) = loaded else {
            return Err(TrainError::NothingLoaded("write", "model"));
        };
        let text = write(
            &model.valid(),
            &tokenizer,
            &spec.prompt,
            &spec.sample,
            run.seed,
        )?;
        return Ok(GptOutcome {
            report: None,
            writes: Some(text),
        });
    }
    let (name, text) =
        nervus_datasets::corpus::char_corpus(spec.download.as_deref(), spec.data.as_deref())?;
    let model_config = match &loaded {
        Some((m, _, _)) => m.config.clone(),
        None => {
            let size = nervus_models::gpt::GptSize::parse(&spec.size).ok_or_else(|| {
                crate::checks::BadValue {
                    flag: "--size",
                    value: spec.size.clone(),
                    rule: "one of small, medium, large",
                }
            })?;
            let mut c = size.config(CharTokenizer::from_text(&text).vocab_size());
            c.layers = spec.layers.unwrap_or(c.layers);
            c.heads = spec.heads.unwrap_or(c.heads);
            c.d_model = spec.d_model.unwrap_or(c.d_model);
            c.context = spec.context.unwrap_or(c.context);
            c.check()?;
            c
        }
    };
    let data = TextData::new(
        &name,
        &text,
        loaded.as_ref().map(|l| l.1.clone()),
        model_config.context,
    )
    .map_err(|e| TrainError::Input(Box::new(e)))?;
    let model = match loaded {
        Some((m, _, _)) => m,
        None => {
            B::seed(device, run.seed);
            model_config.init::<B>(device)
        }
    };
    let (know_nothing, know_letters) = data.losses_to_beat();
    let c = &model_config;
    report.line(format!(
        "data: {} ({} characters, {} distinct; {} train / {} validation)",
        data.name,
        data.ids.len(),
        data.tokenizer.vocab_size(),
        data.split,
        data.ids.len() - data.split
    ));
    report.line(format!(
        "model: {} layers, {} heads, d_model {}, context {}, vocab {}: {} parameters | backend {}",
        c.layers,
        c.heads,
        c.d_model,
        c.context,
        c.vocab,
        model.num_params(),
        crate::backend::NAME
    ));
    report.line(format!(
        "loss to beat: {know_nothing:.3} knowing nothing (ln {}), {know_letters:.3} knowing only letter frequencies",
        data.tokenizer.vocab_size()
    ));
    let opts = GptOptions {
        model: model_config.clone(),
        run: run.clone(),
        eval_windows: spec
            .eval_windows
            .unwrap_or_else(|| EvalSource::default_windows(model_config.context)),
        sample: SampleOptions {
            length: 80,
            ..spec.sample.clone()
        },
        prompt: spec.prompt.clone(),
    };
    let (result, _) = train(&opts, &data, model, report.clone())?;
    match (result.best, &run.save) {
        (Some((step, loss)), Some(save)) => report.line(format!(
            "best validation loss {loss:.4} at step {step}, saved in {} ({} in all)",
            save.display(),
            duration(result.seconds)
        )),
        _ => report.line(format!(
            "no checkpoint improved on the starting model ({} in all)",
            duration(result.seconds)
        )),
    }
    let writes = match &run.save {
        Some(save) => match load_dir::<B::InnerBackend>(save, device) {
            Ok((best, tokenizer, _)) => Some(write(
                &best,
                &tokenizer,
                &spec.prompt,
                &spec.sample,
                run.seed,
            )?),
            Err(_) => None,
        },
        None => None,
    };
    Ok(GptOutcome {
        report: Some(result),
        writes,
    })
}
