//! The modern language model on the shared path: a byte-level BPE corpus in memory-mapped u16
//! shards, windows with an optional block-diagonal document mask, a deterministic evaluation in
//! nats and bits per byte with the reversed-text gap beside it, the best model saved in nervus's
//! layout with its `tokenizer.json`, and exact resume.
//!
//! It is the same model family as the character GPT ([`Gpt`] with the modern options switched
//! on) and the same training path ([`fit`]); only the data and what is printed differ.
//!
//! Determinism. Training batch `n` is a function of the seed and `n` alone (drawn by
//! `Rng::stream(seed, n)`), and the evaluation windows of a corpus are drawn once by a stream of
//! their own; so a resumed run reads the same batches an uninterrupted one would, and two runs,
//! checkpoints or thread counts are scored on the same tokens.
//!
//! The data lives in [`data`]; here are the settings, the run and its hook.

pub mod data;

use crate::checks::BadValue;
use crate::loader::epoch_lengths;
use crate::optim::OptimizerSpec;
use crate::options::{KeepBest, RunOptions};
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
pub use data::{
    Corpus, CorpusOptions, EvalWindows, LmError, ShardWindows, bits_per_byte, document_mask,
    prepare,
};
use nervus_datasets::bpe::Bpe;
use nervus_datasets::rng::Rng;
use nervus_inference::generate::{SampleOptions, generate};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::gpt::{Gpt, GptConfig};
use nervus_models::native;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The size presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LmPreset {
    /// 2 layers, width 32, context 32, vocabulary 512: for tests.
    Tiny,
    /// 4 layers, width 128, 4 heads, context 128, vocabulary 2048: readable text on 2 CPU cores.
    Small,
    /// The reference's model: 10 layers, width 512, 8 heads, context 1024; vocabulary 24,576
    /// (≈57M parameters with an untied head). Meant for a GPU.
    Kalia58m,
}

impl LmPreset {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(Self::Tiny),
            "small" => Some(Self::Small),
            "kalia-58m" => Some(Self::Kalia58m),
            _ => None,
        }
    }

    /// The vocabulary the BPE is trained to.
    pub fn vocab(self) -> usize {
        match self {
            Self::Tiny => 512,
            Self::Small => 2048,
            Self::Kalia58m => 24_576,
        }
    }

    /// The modern configuration of this shape for a vocabulary of `vocab` tokens.
    pub fn config(self, vocab: usize) -> GptConfig {
        let (layers, heads, d_model, context) = match self {
            Self::Tiny => (2, 2, 32, 32),
            Self::Small => (4, 4, 128, 128),
            Self::Kalia58m => (10, 8, 512, 1024),
        };
        GptConfig::new(vocab)
            .with_layers(layers)
            .with_heads(heads)
            .with_d_model(d_model)
            .with_context(context)
            .modern()
    }
}

/// What a run was, saved beside the model as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmSettings {
    pub data: String,
    pub data_sha256: String,
    pub tokenizer_sha256: String,
    pub steps: usize,
    pub batch: usize,
    pub accumulation: usize,
    /// Threads each micro-batch was cut across (runs older than the option: 1).
    #[serde(default = "crate::shard::one")]
    pub parts: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub optimizer: OptimizerSpec,
    pub seed: u64,
    pub eval_every: usize,
    pub eval_batches: usize,
    pub doc_mask: bool,
    pub backend: String,
    pub continued_from: Option<String>,
    /// Optimizer steps when this model was saved.
    pub step: usize,
    pub valid_loss: Option<f64>,
    pub bits_per_byte: Option<f64>,
    pub reversed_gap: Option<f64>,
}

/// Everything a language-model run needs besides the corpus.
#[derive(Clone, Debug)]
pub struct LmOptions {
    pub model: GptConfig,
    /// What every run shares (steps, schedule, saving, resuming); `batch` is windows per
    /// micro-batch, and `weight_decay` is the optimizer's.
    pub run: RunOptions,
    /// Micro-batches per optimizer step (their gradients are averaged).
    pub accumulation: usize,
    pub optimizer: OptimizerSpec,
    /// Evaluation batches (of `batch` windows each).
    pub eval_batches: usize,
    /// Block-diagonal attention inside each document, in training and evaluation.
    pub doc_mask: bool,
    pub sample: SampleOptions,
    pub prompt: String,
}

crate::options::record_step_and_loss!(LmSettings);

/// One checkpoint's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmCheckpoint {
    pub step: usize,
    pub train_loss: f64,
    pub valid_loss: f64,
    pub bits_per_byte: f64,
    pub reversed_loss: f64,
    pub lr: f64,
    pub seconds: f64,
}

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct LmReport {
    pub checkpoints: Vec<LmCheckpoint>,
    pub baseline: Option<f64>,
    pub best: Option<(usize, f64)>,
    pub seconds: f64,
    pub sample: String,
    /// Training tokens a second over the run (evaluation included in the time).
    pub tokens_per_second: f64,
}

/// Writes a model directory (nervus layout, `tokenizer.json`, `training.json`) in place of `dir`,
/// atomically.
pub fn save_dir<B: Backend>(
    model: &Gpt<B>,
    bpe: &Bpe,
    settings: &LmSettings,
    dir: &Path,
) -> Result<(), CheckpointError> {
    crate::checkpoint::replace_dir(dir, |staging| {
        native::save(model, staging)?;
        let tok = staging.join("tokenizer.json");
        bpe.save(&tok)
            .map_err(|e| CheckpointError::format(&tok, e.to_string()))?;
        write_json(&staging.join("training.json"), settings)
    })
}

/// Reads a directory written by [`save_dir`].
pub fn load_dir<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<(Gpt<B>, Bpe, Option<LmSettings>), CheckpointError> {
    let model = native::load(dir, device)?;
    let tok = dir.join("tokenizer.json");
    let bpe = Bpe::load(&tok).map_err(|e| CheckpointError::format(&tok, e.to_string()))?;
    crate::checkpoint::check_vocab(&tok, bpe.vocab_size(), model.config.vocab)?;
    let settings = crate::checkpoint::read_settings(dir)?;
    Ok((model, bpe, settings))
}

struct LmHook {
    report: Reporter,
    opts: LmOptions,
    bpe: Arc<Bpe>,
    prompt: Vec<u32>,
    reversed: EvalWindows,
    tokens: u64,
    bytes: u64,
    keep: KeepBest<LmSettings>,
    out: Arc<Mutex<LmReport>>,
    /// Training tokens an optimizer step reads.
    tokens_per_step: usize,
    /// Optimizer steps in each epoch, and those taken in this process so far.
    epoch_steps: Vec<usize>,
    trained_steps: usize,
    last_step: usize,
}

impl LmHook {
    /// Adds `c` to `metrics.jsonl`. Rows at or after its step (written before a kill made this
    /// epoch run again) and a torn last line are dropped, so the file reads as one run's.
    fn append_metrics(&self, c: &LmCheckpoint) -> Result<(), String> {
        let path = self.opts.run.run_dir.join("metrics.jsonl");
        let mut text: String = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<LmCheckpoint>(l).is_ok_and(|r| r.step < c.step))
            .map(|l| format!("{l}\n"))
            .collect();
        text += &serde_json::to_string(c).map_err(|e| e.to_string())?;
        text.push('\n');
        crate::atomic::write_atomically(&path, text.as_bytes()).map_err(|e| e.to_string())
    }
}

impl<B: Backend> EpochHook<Gpt<B>> for LmHook {
    fn baseline(&mut self, valid: Score, _model: &Gpt<B>) -> Result<(), String> {
        self.keep.baseline(valid.loss());
        self.out.lock().expect("report").baseline = Some(valid.loss());
        self.report.line(format!(
            "the starting model scores {:.4} on the evaluation windows: a checkpoint must beat that to be saved",
            valid.loss()
        ));
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        self.opts.run.stops_at(self.last_step)
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &Gpt<B>) -> Result<(), String> {
        self.last_step = info.step;
        let valid = info.valid.loss();
        let bpb = bits_per_byte(valid, self.tokens, self.bytes);
        let reversed = self.reversed.mean_loss(model);
        let mut rng = Rng::stream(self.opts.run.seed ^ 0xA5A5, info.step as u64);
        let ids = generate(model, &self.prompt, &self.opts.sample, &mut rng);
        let sample = self.bpe.decode(&ids).map_err(|e| e.to_string())?;
        self.keep.settings.bits_per_byte = Some(bpb);
        self.keep.settings.reversed_gap = Some(reversed - valid);
        let bpe = &self.bpe;
        let note = self.keep.offer(info.step, valid, |settings, dir| {
            save_dir(model, bpe, settings, dir)
        })?;
        self.out.lock().expect("report").best = self.keep.found;
        self.report.line(format!(
            "step {:>5}  train {:.3}  eval {:.3} ({:.3} bits/byte)  reversed gap {:+.2}  lr {:.2e}  ({}){note}",
            info.step,
            info.train.loss(),
            valid,
            bpb,
            reversed - valid,
            info.lr,
            duration(info.elapsed)
        ));
        let shown = format!("{}{}", self.opts.prompt, sample);
        for line in shown.lines() {
            self.report.line(format!("  > {line}"));
        }
        let c = LmCheckpoint {
            step: info.step,
            train_loss: info.train.loss(),
            valid_loss: valid,
            bits_per_byte: bpb,
            reversed_loss: reversed,
            lr: info.lr,
            seconds: info.elapsed,
        };
        self.append_metrics(&c)?;
        let mut out = self.out.lock().expect("report");
        out.checkpoints.push(c);
        out.seconds = info.elapsed;
        out.sample = sample;
        self.trained_steps += self.epoch_steps.get(info.epoch - 1).copied().unwrap_or(0);
        if info.elapsed > 0.0 {
            out.tokens_per_second =
                (self.trained_steps * self.tokens_per_step) as f64 / info.elapsed;
        }
        Ok(())
    }
}

/// Trains `model` on `corpus`; returns what was measured and the model as it ended (the best
/// one is on disk, if `save` was given).
pub fn train<B: AutodiffBackend>(
    opts: &LmOptions,
    corpus: &Corpus,
    model: Gpt<B>,
    report: Reporter,
) -> Result<(LmReport, Gpt<B::InnerBackend>), LmError> {
    let context = model.context();
    opts.model.check().map_err(TrainError::from)?;
    opts.run
        .check()
        .and_then(|()| crate::checks::at_least_one("--accumulate", opts.accumulation))
        .and_then(|()| crate::checks::at_least_one("--eval-batches", opts.eval_batches))
        .and_then(|()| crate::checks::sample(&opts.sample))
        .and_then(|()| {
            let c = &model.config;
            crate::checks::attention_fits(c.context, opts.run.batch, c.heads, c.layers)
        })
        .map_err(TrainError::from)?;
    corpus.check_context(context)?;
    let best = crate::checkpoint::claim_save(
        opts.run.save.as_deref(),
        opts.run.continued_from.as_deref(),
        opts.run.resume,
        opts.run.overwrite,
    )
    .map_err(TrainError::from)?;
    let k = opts.accumulation.max(1);
    let prompt = if opts.prompt.is_empty() {
        vec![corpus.manifest.eot_id]
    } else {
        corpus.bpe.encode(&opts.prompt)?
    };
    let eval = EvalWindows::new(
        corpus,
        context,
        opts.eval_batches,
        opts.run.batch,
        opts.doc_mask,
    );
    let (tokens, bytes) = eval.tokens_and_bytes(&corpus.token_bytes);
    let settings = LmSettings {
        data: corpus.name.clone(),
        data_sha256: corpus.text_sha256.clone(),
        tokenizer_sha256: corpus.manifest.tokenizer_sha256.clone(),
        steps: opts.run.steps,
        batch: opts.run.batch,
        accumulation: k,
        parts: opts.run.parts,
        lr: opts.run.lr,
        warmup: opts.run.warmup,
        decay_to: opts.run.decay_to,
        clip: opts.run.clip,
        optimizer: opts.optimizer.clone(),
        seed: opts.run.seed,
        eval_every: opts.run.eval_every,
        eval_batches: opts.eval_batches,
        doc_mask: opts.doc_mask,
        backend: crate::backend::NAME.to_string(),
        continued_from: opts
            .run
            .continued_from
            .as_ref()
            .map(|p| p.display().to_string()),
        step: 0,
        valid_loss: None,
        bits_per_byte: None,
        reversed_gap: None,
    };
    let fingerprint = crate::run::fingerprint(&settings, &opts.model);
    let out = Arc::new(Mutex::new(LmReport::default()));
    let hook = LmHook {
        report: report.clone(),
        opts: opts.clone(),
        bpe: corpus.bpe.clone(),
        prompt,
        reversed: eval.reversed(),
        tokens,
        bytes,
        keep: KeepBest::new(best, opts.run.save.clone(), settings),
        out: out.clone(),
        tokens_per_step: opts.run.batch * k * context,
        epoch_steps: epoch_lengths(opts.run.steps, opts.run.eval_every),
        trained_steps: 0,
        last_step: 0,
    };
    let epochs: Vec<usize> = epoch_lengths(opts.run.steps, opts.run.eval_every)
        .into_iter()
        .map(|s| s * k)
        .collect();
    let train_src = ShardWindows {
        shards: corpus.train.clone(),
        context,
        batch: opts.run.batch,
        seed: opts.run.seed,
        mask_eot: opts.doc_mask.then_some(corpus.manifest.eot_id),
        epochs: epochs.clone(),
    };
    let run = RunConfig {
        dir: opts.run.run_dir.clone(),
        epochs: epochs.len(),
        accumulation: k,
        parts: opts.run.parts,
        resume: opts.run.resume,
        baseline: opts.run.continued_from.is_some(),
        overwrite: opts.run.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some(((opts.run.batch * context) as f64, "tokens".into())),
    };
    let last = fit(
        run,
        model,
        opts.optimizer.build(opts.run.clip),
        WarmupCosine::new(
            opts.run.lr,
            opts.run.warmup,
            opts.run.steps,
            opts.run.decay_to,
        ),
        train_src,
        eval,
        |t| {
            t.metrics((LossMetric::new(),))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let out = out.lock().expect("report").clone();
    if let (Some(base), None) = (out.baseline, out.best) {
        report.line(format!(
            "nothing beat the model this run started from ({base:.4}); the saved model is unchanged"
        ));
    }
    Ok((out, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_is_block_diagonal_by_document() {
        // eot = 0: documents [5 6 0] [7 0] [8].
        let m = document_mask(&[vec![5, 6, 0, 7, 0, 8, 9]], 6, 0);
        let at = |i: usize, j: usize| m[i * 6 + j];
        for (i, j, other) in [
            (1, 0, false),
            (2, 0, false),
            (3, 2, true),
            (4, 3, false),
            (5, 4, true),
            (5, 0, true),
        ] {
            assert_eq!(at(i, j), other, "query {i}, key {j}");
        }
    }

    #[test]
    fn bits_per_byte_converts_nats_per_token() {
        // 2 bytes a token, ln 2 nats a token: half a bit a byte.
        let b = bits_per_byte(std::f64::consts::LN_2, 10, 20);
        assert!((b - 0.5).abs() < 1e-15, "{b}");
    }
}

/// An LM run as the example starts it.
#[derive(Clone, Debug)]
pub struct LmRun {
    /// What every run shares; `continued_from` is the model to start from (its tokenizer is
    /// kept) or, with 0 steps, to write with.
    pub run: RunOptions,
    /// The fresh model: a size preset and the flags that change it (a continuation keeps its
    /// own shape and refuses them).
    pub size: String,
    pub layers: Option<usize>,
    pub heads: Option<usize>,
    pub kv_heads: Option<usize>,
    pub d_model: Option<usize>,
    pub context: Option<usize>,
    pub vocab: Option<usize>,
    /// GPT-2's architecture instead of the modern one.
    pub gpt2: bool,
    pub qk_norm: bool,
    /// Logit soft-cap (0: off).
    pub softcap: f64,
    pub doc_mask: bool,
    pub accumulation: usize,
    /// `muon` (matrices; AdamW for the rest) or `adamw`.
    pub optimizer: String,
    pub muon_lr: f64,
    pub eval_batches: usize,
    pub held_out: f64,
    /// How the model writes at the end and with 0 steps (the checkpoint samples share its
    /// temperature and top-k and are 60 tokens long).
    pub sample: SampleOptions,
    pub prompt: String,
    /// A corpus to fetch (tinystories, tinystories-valid), or a text file; else the vendored
    /// Austen.
    pub download: Option<String>,
    pub data: Option<PathBuf>,
}

impl LmRun {
    /// The fresh model's configuration for a vocabulary of `vocab` tokens: the preset's, changed
    /// by the flags, checked.
    pub fn model_config(&self, preset: LmPreset, vocab: usize) -> Result<GptConfig, TrainError> {
        let mut c = preset.config(vocab);
        if self.gpt2 {
            c = c
                .with_norm(nervus_models::norm::NormKind::LayerNorm)
                .with_positions(nervus_models::gpt::PositionKind::Learned)
                .with_mlp(nervus_models::gpt::MlpKind::Gelu)
                .with_qk_norm(false)
                .with_logit_softcap(None)
                .with_bias(true);
        } else {
            c.qk_norm = self.qk_norm;
            c.logit_softcap = (self.softcap > 0.0).then_some(self.softcap);
        }
        c.layers = self.layers.unwrap_or(c.layers);
        c.heads = self.heads.unwrap_or(c.heads);
        c.d_model = self.d_model.unwrap_or(c.d_model);
        c.context = self.context.unwrap_or(c.context);
        c.kv_heads = self.kv_heads;
        c.check()?;
        Ok(c)
    }

    fn preset(&self) -> Result<LmPreset, BadValue> {
        LmPreset::parse(&self.size).ok_or_else(|| BadValue {
            flag: "--size",
            value: self.size.clone(),
            rule: "one of tiny, small, kalia-58m",
        })
    }
}

/// What an LM run did: trained (its report), and what the model it leaves wrote.
pub type LmOutcome = crate::options::TextOutcome<LmReport>;

/// The model saved in `dir` continuing `prompt` (from an end of text where it is empty).
pub fn write<B: Backend>(
    dir: &Path,
    prompt: &str,
    sample: &SampleOptions,
    seed: u64,
    device: &B::Device,
) -> Result<String, LmError> {
    crate::checks::sample(sample).map_err(TrainError::from)?;
    let (model, bpe, _) = load_dir::<B>(dir, device)
        .map_err(|e| TrainError::read(format!("loading {}", dir.display()), e))?;
    let ids = if prompt.is_empty() {
        vec![bpe.eot_id()]
    } else {
        bpe.encode(prompt)?
    };
    let out = generate(&model, &ids, sample, &mut Rng::new(seed));
    Ok(bpe.decode(&out)?)
}

/// Runs `spec`: with 0 steps writes with the loaded model; otherwise makes the corpus (cached),
/// starts the model (fresh from the preset, or the loaded one), trains it, and has the saved
/// model write.
pub fn run<B: AutodiffBackend>(
    spec: &LmRun,
    report: &Reporter,
    device: &B::Device,
) -> Result<LmOutcome, LmError> {
    let run = &spec.run;
    if run.steps == 0 {
        let Some(dir) = &run.continued_from else {
            return Err(TrainError::NothingLoaded("write", "model").into());
        };
        let text = write::<B::InnerBackend>(dir, &spec.prompt, &spec.sample, run.seed, device)?;
        return Ok(LmOutcome {
            report: None,
            writes: Some(text),
        });
    }
    if run.continued_from.is_some() {
        TrainError::refuse_shape_with_load(&[
            ("--layers", spec.layers),
            ("--heads", spec.heads),
            ("--kv-heads", spec.kv_heads),
            ("--d-model", spec.d_model),
            ("--context", spec.context),
            ("--vocab", spec.vocab),
        ])?;
    }
    let loaded = match &run.continued_from {
        Some(dir) => Some(
            load_dir::<B>(dir, device)
                .map_err(|e| TrainError::read(format!("loading {}", dir.display()), e))?,
        ),
        None => None,
    };
    let preset = spec.preset().map_err(TrainError::from)?;
    let vocab = spec.vocab.unwrap_or(preset.vocab());
    if loaded.is_none() {
        // The shape's flags, checked before the tokenizer is trained.
        spec.model_config(preset, vocab)?;
    }
    let (name, text, source) =
        nervus_datasets::corpus::lm_corpus(spec.download.as_deref(), spec.data.as_deref())?;
    let out_dir = run
        .save
        .as_deref()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let corpus = prepare(
        &name,
        &text,
        source,
        loaded.as_ref().map(|l| l.1.clone()),
        &CorpusOptions {
            vocab,
            held_out: spec.held_out,
            contexts: vec![spec.context.unwrap_or(preset.config(2).context)],
            root: out_dir.join("corpora"),
        },
        report,
    )?;
    drop(text);
    let m = &corpus.manifest;
    report.line(format!(
        "data: {name}: {} train documents ({} tokens), {} held out ({} tokens); {:.2} bytes a token",
        m.train.documents,
        m.train.tokens,
        m.val.documents,
        m.val.tokens,
        m.train.bytes_per_token()
    ));
    for s in &m.train.long_document_share {
        report.line(format!(
            "  {:.1}% of training tokens sit in documents at least {} tokens long",
            100.0 * s.share,
            s.context
        ));
    }
    let model = match loaded {
        Some((model, _, _)) => model,
        None => {
            let c = spec.model_config(preset, corpus.bpe.vocab_size())?;
            B::seed(device, run.seed);
            c.init::<B>(device)
        }
    };
    let c = &model.config;
    report.line(format!(
        "model: {} layers, {} heads ({} key/value), d_model {}, context {}, vocab {}, {:?}, {:?}, {:?}, qk-norm {}, soft-cap {:?}: {} parameters | backend {}",
        c.layers,
        c.heads,
        c.kv_heads.unwrap_or(c.heads),
        c.d_model,
        c.context,
        c.vocab,
        c.norm,
        c.positions,
        c.mlp,
        c.qk_norm,
        c.logit_softcap,
        model.num_params(),
        crate::backend::NAME
    ));
    report.line(format!(
        "loss to beat: {:.3} knowing nothing (ln {})",
        (c.vocab as f64).ln(),
        c.vocab
    ));
    let opts = LmOptions {
        model: c.clone(),
        run: run.clone(),
        accumulation: spec.accumulation,
        optimizer: match spec.optimizer.as_str() {
            "muon" => OptimizerSpec::muon(run.lr, spec.muon_lr, run.weight_decay),
            _ => OptimizerSpec::adamw(run.weight_decay),
        },
        eval_batches: spec.eval_batches,
        doc_mask: spec.doc_mask,
        sample: SampleOptions {
            length: 60,
            ..spec.sample.clone()
        },
        prompt: spec.prompt.clone(),
    };
    let (result, _) = train(&opts, &corpus, model, report.clone())?;
    match (result.best, &run.save) {
        (Some((step, loss)), Some(save)) => report.line(format!(
            "best evaluation loss {loss:.4} at step {step}, saved in {} ({} in all, {:.0} training tokens a second)",
            save.display(),
            duration(result.seconds),
            result.tokens_per_second
        )),
        _ => report.line(format!(
            "no checkpoint improved on the starting model ({} in all)",
            duration(result.seconds)
        )),
    }
    let writes = match &run.save {
        Some(save) if save.join("config.json").exists() => Some(write::<B::InnerBackend>(
            save,
            &spec.prompt,
            &spec.sample,
            run.seed,
            device,
        )?),
        _ => None,
    };
    Ok(LmOutcome {
        report: Some(result),
        writes,
    })
}
