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

use crate::loader::{BatchSource, epoch_lengths};
use crate::optim::OptimizerSpec;
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
use nervus_datasets::DataError;
use nervus_datasets::bpe::{self, Bpe};
use nervus_datasets::documents::Source;
use nervus_datasets::download::sha256_hex;
use nervus_datasets::rng::Rng;
use nervus_datasets::shards::{self, CorpusManifest, Shards, Split};
use nervus_inference::generate::{SampleOptions, generate};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::gpt::{Gpt, GptConfig, LmBatch};
use nervus_models::native;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The stream evaluation windows are drawn from (independent of any run's seed).
const EVAL_SEED: u64 = 0xB1_75_BE_7E;

/// Ids per shard file.
const SHARD_TOKENS: usize = 1 << 20;

/// Why the language model cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LmError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(
        "{corpus}: the {split} split holds {tokens} tokens, too few for a window of {need} \
         (context + 1); use a longer text, a smaller --context or a larger held-out share"
    )]
    TooShort {
        corpus: String,
        split: &'static str,
        tokens: usize,
        need: usize,
    },
    #[error("{0}")]
    Train(#[from] TrainError),
}

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

/// A tokenized corpus ready to train on.
pub struct Corpus {
    pub name: String,
    /// The sha256 of the text it was made from.
    pub text_sha256: String,
    pub dir: PathBuf,
    pub manifest: CorpusManifest,
    pub bpe: Arc<Bpe>,
    pub train: Arc<Shards>,
    pub val: Arc<Shards>,
    /// UTF-8 bytes each id stands for (0 for the end-of-text id): bits per byte are counted with it.
    pub token_bytes: Arc<Vec<u32>>,
}

/// Bytes of text each id of a byte-level BPE stands for: its token string has one character per
/// byte (GPT-2's byte alphabet); the end-of-text token stands for none.
fn token_bytes(bpe: &Bpe) -> Vec<u32> {
    (0..bpe.vocab_size() as u32)
        .map(|id| {
            if id == bpe.eot_id() {
                0
            } else {
                bpe.tokenizer()
                    .id_to_token(id)
                    .map_or(0, |t| t.chars().count() as u32)
            }
        })
        .collect()
}

/// How a corpus is made.
#[derive(Clone, Debug)]
pub struct CorpusOptions {
    /// BPE vocabulary (ignored when a tokenizer is given).
    pub vocab: usize,
    /// Share of the documents held out (from the end) for evaluation.
    pub held_out: f64,
    /// Contexts to report the long-document share for.
    pub contexts: Vec<usize>,
    /// Where corpora are cached: one directory per text, tokenizer and split.
    pub root: PathBuf,
}

/// Tokenizes `text` once and caches the result under `opts.root`: trains a BPE on the training
/// documents (or uses `tokenizer`, a continuation's), then writes the shards. A cached corpus is
/// reused when its text, tokenizer and split match; the report says which happened.
pub fn prepare(
    name: &str,
    text: &str,
    source: Source,
    tokenizer: Option<Bpe>,
    opts: &CorpusOptions,
    report: &Reporter,
) -> Result<Corpus, LmError> {
    let text_sha256 = sha256_hex(text.as_bytes());
    let documents = source.split(text);
    let n = documents.len();
    let n_val = ((opts.held_out * n as f64).round() as usize).max(1);
    let key = match &tokenizer {
        Some(bpe) => format!("tok-{}", &bpe.sha256()?[..12]),
        None => format!("bpe{}", opts.vocab),
    };
    let dir = opts.root.join(format!(
        "{}-{}-{key}-held{}",
        slug(name),
        &text_sha256[..12],
        (opts.held_out * 1000.0).round() as u64
    ));
    let tok_path = dir.join("tokenizer.json");
    let cached = CorpusManifest::load(&dir).ok().and_then(|m| {
        let bpe = Bpe::load(&tok_path).ok()?;
        m.check_tokenizer(&bpe, &dir).ok()?;
        Some((m, bpe))
    });
    let (manifest, bpe) = match cached {
        Some(hit) => {
            report.line(format!("corpus: cached in {}", dir.display()));
            hit
        }
        None => {
            if n < 2 {
                return Err(DataError::invalid(
                    name,
                    format!(
                        "{n} document(s): training and evaluation need at least two \
                         (end documents with a line `<|endoftext|>`)"
                    ),
                )
                .into());
            }
            let t0 = std::time::Instant::now();
            let bpe = match tokenizer {
                Some(bpe) => bpe,
                None => {
                    let train_docs = &documents[..n - n_val.min(n - 1)];
                    bpe::train(train_docs.iter().copied(), opts.vocab, 2)?
                }
            };
            // Built beside its final place and renamed into it, so that a killed run leaves no
            // half corpus and two processes preparing the same one do not write into each other.
            let staging = dir.with_extension(format!("partial-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging).map_err(|e| DataError::io(&staging, e))?;
            bpe.save(&staging.join("tokenizer.json"))?;
            let m = shards::write_corpus(
                &staging,
                &bpe,
                documents.iter().copied(),
                opts.held_out,
                SHARD_TOKENS,
                &opts.contexts,
            )?;
            let (m, bpe) = if std::fs::rename(&staging, &dir).is_ok() {
                (m, bpe)
            } else {
                // Another process got there first, or something else is in the way: use that
                // corpus if it is a whole one for this text.
                let _ = std::fs::remove_dir_all(&staging);
                let theirs = CorpusManifest::load(&dir).and_then(|m| {
                    let bpe = Bpe::load(&tok_path)?;
                    m.check_tokenizer(&bpe, &dir)?;
                    Ok((m, bpe))
                });
                match theirs {
                    Ok(hit) => hit,
                    Err(e) => {
                        return Err(DataError::invalid(
                            dir.display().to_string(),
                            format!("could not put the corpus in place ({e}): remove the directory and run again"),
                        )
                        .into());
                    }
                }
            };
            report.line(format!(
                "corpus: {} documents tokenized with a {}-token BPE in {} into {}",
                n,
                bpe.vocab_size(),
                duration(t0.elapsed().as_secs_f64()),
                dir.display()
            ));
            (m, bpe)
        }
    };
    let train = Shards::open_split(&dir, &manifest, Split::Train)?;
    let val = Shards::open_split(&dir, &manifest, Split::Val)?;
    Ok(Corpus {
        name: name.to_string(),
        text_sha256,
        dir,
        token_bytes: Arc::new(token_bytes(&bpe)),
        manifest,
        bpe: Arc::new(bpe),
        train: Arc::new(train),
        val: Arc::new(val),
    })
}

fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.trim_matches('-').chars().take(40).collect()
}

impl Corpus {
    fn check_context(&self, context: usize) -> Result<(), LmError> {
        for (split, shards) in [("train", &self.train), ("val", &self.val)] {
            if shards.len() < context + 1 {
                return Err(LmError::TooShort {
                    corpus: self.name.clone(),
                    split,
                    tokens: shards.len(),
                    need: context + 1,
                });
            }
        }
        Ok(())
    }
}

/// The block-diagonal document mask of `windows` (each `t` input ids): true where key `j` lies in
/// another document than query `i`. An end-of-text id belongs to the document it ends.
pub fn document_mask(windows: &[Vec<u32>], t: usize, eot: u32) -> Vec<bool> {
    let mut mask = Vec::with_capacity(windows.len() * t * t);
    let mut doc = vec![0usize; t];
    for w in windows {
        let mut d = 0;
        for (i, &id) in w[..t].iter().enumerate() {
            doc[i] = d;
            if id == eot {
                d += 1;
            }
        }
        for i in 0..t {
            for j in 0..t {
                mask.push(doc[i] != doc[j]);
            }
        }
    }
    mask
}

/// Builds a batch from windows of `t + 1` ids (inputs are the first `t`, targets the last `t`).
fn batch_of<B: Backend>(
    windows: &[Vec<u32>],
    t: usize,
    eot: Option<u32>,
    device: &B::Device,
) -> LmBatch<B> {
    let b = windows.len();
    let mut x = Vec::with_capacity(b * t);
    let mut y = Vec::with_capacity(b * t);
    for w in windows {
        x.extend(w[..t].iter().map(|&v| v as i64));
        y.extend(w[1..=t].iter().map(|&v| v as i64));
    }
    LmBatch {
        inputs: Tensor::from_data(TensorData::new(x, [b, t]), device),
        targets: Tensor::from_data(TensorData::new(y, [b, t]), device),
        doc_mask: eot.map(|e| {
            Tensor::from_data(
                TensorData::new(document_mask(windows, t, e), [b, t, t]),
                device,
            )
        }),
    }
}

/// Random training windows from the train shards: batch `n` is drawn by `Rng::stream(seed, n)`.
pub struct ShardWindows {
    shards: Arc<Shards>,
    context: usize,
    batch: usize,
    seed: u64,
    /// The end-of-text id when the document mask is on.
    mask_eot: Option<u32>,
    /// Micro-batches in each epoch.
    epochs: Vec<usize>,
}

impl ShardWindows {
    /// The windows (of `context + 1` ids) of micro-batch `n` of the run.
    pub fn windows(&self, n: usize) -> Vec<Vec<u32>> {
        let mut rng = Rng::stream(self.seed, n as u64);
        let last = self.shards.len() - self.context - 1;
        (0..self.batch)
            .map(|_| self.shards.window(rng.below(last + 1), self.context + 1))
            .collect()
    }
}

impl<B: Backend> BatchSource<B> for ShardWindows {
    type Batch = LmBatch<B>;

    fn batches(&self, epoch: usize) -> usize {
        crate::loader::batches_in(&self.epochs, epoch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> LmBatch<B> {
        let n = crate::loader::run_index(&self.epochs, epoch, index);
        batch_of(&self.windows(n), self.context, self.mask_eot, device)
    }
}

/// The deterministic evaluation: `batches × batch` windows drawn once from the held-out shards
/// by the evaluation stream, forwards or reversed at the token level.
#[derive(Clone)]
pub struct EvalWindows {
    windows: Arc<Vec<Vec<u32>>>,
    context: usize,
    batch: usize,
    mask_eot: Option<u32>,
    reversed: bool,
}

impl EvalWindows {
    pub fn new(corpus: &Corpus, context: usize, batches: usize, batch: usize, mask: bool) -> Self {
        let mut rng = Rng::new(EVAL_SEED);
        let last = corpus.val.len() - context - 1;
        let windows = (0..batches * batch)
            .map(|_| corpus.val.window(rng.below(last + 1), context + 1))
            .collect();
        Self {
            windows: Arc::new(windows),
            context,
            batch: batch.max(1),
            mask_eot: mask.then_some(corpus.manifest.eot_id),
            reversed: false,
        }
    }

    /// The same windows, each read backwards.
    pub fn reversed(&self) -> Self {
        Self {
            windows: Arc::new(
                self.windows
                    .iter()
                    .map(|w| w.iter().rev().copied().collect())
                    .collect(),
            ),
            reversed: true,
            ..self.clone()
        }
    }

    /// Predicted tokens, and the text bytes they stand for: loss in nats per token × tokens /
    /// (bytes × ln 2) is bits per byte.
    pub fn tokens_and_bytes(&self, token_bytes: &[u32]) -> (u64, u64) {
        let t = self.context;
        let tokens = (self.windows.len() * t) as u64;
        let bytes = self
            .windows
            .iter()
            .flat_map(|w| &w[1..=t])
            .map(|&id| token_bytes[id as usize] as u64)
            .sum();
        (tokens, bytes)
    }

    /// Mean loss (nats per token) of `model` on these windows.
    pub fn mean_loss<B: Backend>(&self, model: &Gpt<B>) -> f64 {
        let device = model.wte.weight.device();
        let (mut sum, mut count) = (0.0, 0usize);
        for chunk in self.windows.chunks(self.batch) {
            let b = batch_of::<B>(chunk, self.context, self.mask_eot, &device);
            let n = chunk.len() * self.context;
            let loss: f64 = model
                .loss_masked(b.inputs, b.targets, b.doc_mask)
                .into_scalar()
                .elem();
            sum += loss * n as f64;
            count += n;
        }
        sum / count as f64
    }

    pub fn is_reversed(&self) -> bool {
        self.reversed
    }
}

impl<B: Backend> BatchSource<B> for EvalWindows {
    type Batch = LmBatch<B>;

    fn batches(&self, _epoch: usize) -> usize {
        self.windows.len().div_ceil(self.batch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, _epoch: usize, index: usize, device: &B::Device) -> LmBatch<B> {
        let end = ((index + 1) * self.batch).min(self.windows.len());
        batch_of(
            &self.windows[index * self.batch..end],
            self.context,
            self.mask_eot,
            device,
        )
    }
}

/// Nats per token → bits per byte.
pub fn bits_per_byte(loss: f64, tokens: u64, bytes: u64) -> f64 {
    loss * tokens as f64 / (bytes as f64 * std::f64::consts::LN_2)
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
    /// Optimizer steps.
    pub steps: usize,
    /// Windows per micro-batch.
    pub batch: usize,
    /// Micro-batches per optimizer step (their gradients are averaged).
    pub accumulation: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub optimizer: OptimizerSpec,
    pub seed: u64,
    pub eval_every: usize,
    /// Evaluation batches (of `batch` windows each).
    pub eval_batches: usize,
    /// Block-diagonal attention inside each document, in training and evaluation.
    pub doc_mask: bool,
    pub sample: SampleOptions,
    pub prompt: String,
    pub save: Option<PathBuf>,
    /// Burn's working directory (resume checkpoints) and `metrics.jsonl`.
    pub run_dir: PathBuf,
    /// Continue a killed run from its newest checkpoint in `run_dir`.
    pub resume: bool,
    /// End the run cleanly at the first evaluation at or after this many steps (the schedule
    /// still spans `steps`), to be continued later with `resume`: training in sessions.
    pub stop_after: Option<usize>,
    pub continued_from: Option<PathBuf>,
    /// Start afresh over a model already at `save` and another run's checkpoints.
    pub overwrite: bool,
}

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
    settings: LmSettings,
    reversed: EvalWindows,
    tokens: u64,
    bytes: u64,
    best: f64,
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
        let path = self.opts.run_dir.join("metrics.jsonl");
        let mut text: String = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<LmCheckpoint>(l).is_ok_and(|r| r.step < c.step))
            .map(|l| format!("{l}\n"))
            .collect();
        text += &serde_json::to_string(c).map_err(|e| e.to_string())?;
        text.push('\n');
        crate::run::write_atomically(&path, text.as_bytes()).map_err(|e| e.to_string())
    }
}

impl<B: Backend> EpochHook<Gpt<B>> for LmHook {
    fn baseline(&mut self, valid: Score, _model: &Gpt<B>) -> Result<(), String> {
        self.best = self.best.min(valid.loss());
        self.out.lock().expect("report").baseline = Some(valid.loss());
        self.report.line(format!(
            "the starting model scores {:.4} on the evaluation windows: a checkpoint must beat that to be saved",
            valid.loss()
        ));
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        self.opts
            .stop_after
            .is_some_and(|s| self.last_step >= s && self.last_step < self.opts.steps)
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &Gpt<B>) -> Result<(), String> {
        self.last_step = info.step;
        let valid = info.valid.loss();
        let bpb = bits_per_byte(valid, self.tokens, self.bytes);
        let reversed = self.reversed.mean_loss(model);
        let mut rng = Rng::stream(self.opts.seed ^ 0xA5A5, info.step as u64);
        let ids = generate(model, &self.prompt, &self.opts.sample, &mut rng);
        let sample = self.bpe.decode(&ids).map_err(|e| e.to_string())?;
        let mut note = String::new();
        if valid < self.best {
            self.best = valid;
            self.out.lock().expect("report").best = Some((info.step, valid));
            if let Some(dir) = &self.opts.save {
                self.settings.step = info.step;
                self.settings.valid_loss = Some(valid);
                self.settings.bits_per_byte = Some(bpb);
                self.settings.reversed_gap = Some(reversed - valid);
                save_dir(model, &self.bpe, &self.settings, dir).map_err(|e| e.to_string())?;
                note = format!("  saved to {}", dir.display());
            }
        }
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
    crate::checks::schedule(
        opts.steps,
        opts.batch,
        1,
        opts.lr,
        opts.decay_to,
        opts.clip,
        0.0,
        opts.eval_every,
    )
    .and_then(|()| crate::checks::at_least_one("--accumulate", opts.accumulation))
    .and_then(|()| crate::checks::at_least_one("--eval-batches", opts.eval_batches))
    .and_then(|()| crate::checks::sample(&opts.sample))
    .map_err(TrainError::from)?;
    corpus.check_context(context)?;
    let best = crate::checkpoint::claim_save(
        opts.save.as_deref(),
        opts.continued_from.as_deref(),
        opts.resume,
        opts.overwrite,
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
        opts.batch,
        opts.doc_mask,
    );
    let (tokens, bytes) = eval.tokens_and_bytes(&corpus.token_bytes);
    let settings = LmSettings {
        data: corpus.name.clone(),
        data_sha256: corpus.text_sha256.clone(),
        tokenizer_sha256: corpus.manifest.tokenizer_sha256.clone(),
        steps: opts.steps,
        batch: opts.batch,
        accumulation: k,
        lr: opts.lr,
        warmup: opts.warmup,
        decay_to: opts.decay_to,
        clip: opts.clip,
        optimizer: opts.optimizer.clone(),
        seed: opts.seed,
        eval_every: opts.eval_every,
        eval_batches: opts.eval_batches,
        doc_mask: opts.doc_mask,
        backend: crate::backend::NAME.to_string(),
        continued_from: opts
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
        settings,
        reversed: eval.reversed(),
        tokens,
        bytes,
        best,
        out: out.clone(),
        tokens_per_step: opts.batch * k * context,
        epoch_steps: epoch_lengths(opts.steps, opts.eval_every),
        trained_steps: 0,
        last_step: 0,
    };
    let epochs: Vec<usize> = epoch_lengths(opts.steps, opts.eval_every)
        .into_iter()
        .map(|s| s * k)
        .collect();
    let train_src = ShardWindows {
        shards: corpus.train.clone(),
        context,
        batch: opts.batch,
        seed: opts.seed,
        mask_eot: opts.doc_mask.then_some(corpus.manifest.eot_id),
        epochs: epochs.clone(),
    };
    let run = RunConfig {
        dir: opts.run_dir.clone(),
        epochs: epochs.len(),
        accumulation: k,
        parts: 1,
        resume: opts.resume,
        baseline: opts.continued_from.is_some(),
        overwrite: opts.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some(((opts.batch * context) as f64, "tokens".into())),
    };
    let last = fit(
        run,
        model,
        opts.optimizer.build(opts.clip),
        WarmupCosine::new(opts.lr, opts.warmup, opts.steps, opts.decay_to),
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
