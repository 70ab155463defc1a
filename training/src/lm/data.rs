//! The language model's data: a text made into a byte-level BPE corpus of u16 shards
//! ([`prepare`]), training windows by position ([`ShardWindows`]), the fixed evaluation windows
//! and their reversed twins ([`EvalWindows`]), the document mask, and bits per byte.

use crate::loader::BatchSource;
use crate::report::{Reporter, duration};
use crate::run::TrainError;
use burn::prelude::*;
use nervus_datasets::DataError;
use nervus_datasets::bpe::{self, Bpe};
use nervus_datasets::documents::Source;
use nervus_datasets::download::sha256_hex;
use nervus_datasets::rng::Rng;
use nervus_datasets::shards::{self, CorpusManifest, Shards, Split};
use nervus_models::checkpoint::CheckpointError;
use nervus_models::gpt::{Gpt, LmBatch};
use std::path::PathBuf;
use std::sync::Arc;

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
    pub(crate) fn check_context(&self, context: usize) -> Result<(), LmError> {
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
    pub(crate) shards: Arc<Shards>,
    pub(crate) context: usize,
    pub(crate) batch: usize,
    pub(crate) seed: u64,
    /// The end-of-text id when the document mask is on.
    pub(crate) mask_eot: Option<u32>,
    /// Micro-batches in each epoch.
    pub(crate) epochs: Vec<usize>,
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
