//! The engine: a model directory (this project's own character GPT, OpenAI's GPT-2 or a Qwen2 in
//! transformers' layout) loaded with its tokenizer, and text generated from a prompt, streamed.
//!
//! GPT-2-architecture models generate through the CPU decoder ([`nervus_models::decode`]) on the
//! CPU backends, f32 or int8 ([`quant`]); anything else, and every model on the GPU backends, goes
//! through Burn's [`Gpt`] (int8 there means the dequantised weights: same numbers, no speed).
//! Named models and where they live: [`store`]; fetching from the Hugging Face hub: [`hub`].

pub mod hub;
pub mod quant;
pub mod store;

use crate::generate::{BurnDecoder, Decoder, SampleOptions, TextStream, stream};
use burn::prelude::*;
use nervus_datasets::rng::Rng;
use nervus_datasets::text::{CharTokenizer, parse_tokenizer};
use nervus_models::checkpoint::{CheckpointError, read_json};
use nervus_models::decode::{CpuCache, CpuGpt};
use nervus_models::gpt::Gpt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What went wrong, naming the file, the setting or the input.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{}: {detail}", path.display())]
    Tokenizer { path: PathBuf, detail: String },
    #[error(
        "{}: the tokenizer has {tokens} tokens but the model only {rows} rows of embeddings",
        path.display()
    )]
    Vocabulary {
        path: PathBuf,
        tokens: usize,
        rows: usize,
    },
    #[error(transparent)]
    UnknownChar(#[from] nervus_datasets::text::UnknownChar),
    #[error("the prompt is empty: give at least one character")]
    EmptyPrompt,
    #[error(
        "the prompt is {tokens} tokens but the model reads at most {context}: shorten it to {} \
         tokens or fewer (the engine does not cut a prompt silently)",
        context - 1
    )]
    PromptTooLong { tokens: usize, context: usize },
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Hub(#[from] hub::HubError),
    #[error("{0}")]
    Unsupported(String),
}

/// Weights: as saved, or int8 with a scale per output row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    F32,
    Q8,
}

impl std::str::FromStr for Quant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Quant::F32),
            "q8" => Ok(Quant::Q8),
            _ => Err(format!("--quant {s}: f32 or q8")),
        }
    }
}

/// How text becomes ids and back.
pub enum Codec {
    /// This project's character models: an unknown character is refused by line and column.
    Chars(CharTokenizer),
    /// Byte-level BPE and the like (GPT-2's, Qwen2's), through the `tokenizers` crate.
    Hf(Box<tokenizers::Tokenizer>),
}

impl Codec {
    /// Reads a model directory's tokenizer: `tokenizer.json` (a character tokenizer where the
    /// directory has this project's `training.json`), else GPT-2's `vocab.json` + `merges.txt`.
    pub fn load(dir: &Path) -> Result<Self, EngineError> {
        let json = dir.join("tokenizer.json");
        let bad = |path: &Path, detail: String| EngineError::Tokenizer {
            path: path.to_path_buf(),
            detail,
        };
        if dir.join("training.json").is_file() {
            let chars = CharTokenizer::load(&json).map_err(|e| {
                let text = e.to_string();
                let own = format!("{}: ", json.display());
                bad(&json, text.strip_prefix(&own).unwrap_or(&text).to_string())
            })?;
            return Ok(Codec::Chars(chars));
        }
        if json.is_file() {
            let bytes = std::fs::read(&json).map_err(|e| bad(&json, e.to_string()))?;
            let tok = parse_tokenizer(&bytes, &json).map_err(|e| {
                let text = e.to_string();
                let own = format!("{}: ", json.display());
                bad(&json, text.strip_prefix(&own).unwrap_or(&text).to_string())
            })?;
            return Ok(Codec::Hf(Box::new(tok)));
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.is_file() && merges.is_file() {
            return Ok(Codec::Hf(Box::new(gpt2_bpe(&vocab, &merges)?)));
        }
        Err(bad(
            &json,
            "missing (and no vocab.json + merges.txt beside it): the model has no tokenizer".into(),
        ))
    }

    /// Tokens in the vocabulary (added tokens included).
    pub fn vocab_size(&self) -> usize {
        match self {
            Codec::Chars(c) => c.vocab_size(),
            Codec::Hf(t) => t.get_vocab_size(true),
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        match self {
            Codec::Chars(c) => Ok(c.encode(text, "the prompt")?),
            Codec::Hf(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| EngineError::Unsupported(format!("the tokenizer failed: {e}"))),
        }
    }

    /// Text of `ids`; bytes that do not yet make a whole character come out as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Codec::Chars(c) => c.decode(ids),
            Codec::Hf(t) => t.decode(ids, false).unwrap_or_default(),
        }
    }
}

/// GPT-2's byte-level BPE from its two files (what its `tokenizer.json` says: no prefix space,
/// GPT-2's split pattern, byte-level decoding).
pub fn gpt2_bpe(vocab: &Path, merges: &Path) -> Result<tokenizers::Tokenizer, EngineError> {
    use tokenizers::decoders::byte_level::ByteLevel;
    let bpe = tokenizers::models::bpe::BPE::from_file(
        &vocab.to_string_lossy(),
        &merges.to_string_lossy(),
    )
    .build()
    .map_err(|e| EngineError::Tokenizer {
        path: vocab.to_path_buf(),
        detail: format!("with {}: not GPT-2's BPE files: {e}", merges.display()),
    })?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tok.with_decoder(Some(ByteLevel::default()));
    Ok(tok)
}

/// The network that generates.
pub enum Runner<B: Backend> {
    Cpu(Box<CpuGpt>),
    Burn(Box<Gpt<B>>),
}

/// A model ready to write.
pub struct Engine<B: Backend> {
    pub dir: PathBuf,
    pub codec: Codec,
    pub runner: Runner<B>,
    pub quant: Quant,
    /// The end-of-text token, when the model has one (generation does not stop at it unless
    /// asked: [`RunOptions::stop_at_eos`]).
    pub eos: Option<u32>,
    /// One line on what was loaded and how it runs.
    pub summary: String,
}

/// A prompt and how to continue it.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub sample: SampleOptions,
    pub seed: u64,
    pub stop_at_eos: bool,
}

/// What a run wrote and how fast.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub text: String,
    pub prompt_tokens: usize,
    pub tokens: Vec<u32>,
    pub first_token: Duration,
    pub total: Duration,
}

impl RunReport {
    /// Tokens a second after the first (the first pays for the prompt).
    pub fn tokens_per_sec(&self) -> f64 {
        let n = self.tokens.len().saturating_sub(1);
        let t = self.total.saturating_sub(self.first_token).as_secs_f64();
        if n == 0 || t <= 0.0 {
            0.0
        } else {
            n as f64 / t
        }
    }

    /// "128 tokens; first after 65 ms; 97.1 tokens/s".
    pub fn timing(&self) -> String {
        format!(
            "{} prompt tokens, {} new; first after {:.0} ms; {:.1} tokens/s after it",
            self.prompt_tokens,
            self.tokens.len(),
            self.first_token.as_secs_f64() * 1e3,
            self.tokens_per_sec()
        )
    }
}

/// The CPU decoder and its KV cache, as a [`Decoder`].
pub struct CpuDecoder<'a> {
    model: &'a CpuGpt,
    cache: CpuCache,
}

impl<'a> CpuDecoder<'a> {
    pub fn new(model: &'a CpuGpt) -> Self {
        Self {
            model,
            cache: model.cache(),
        }
    }
}

impl Decoder for CpuDecoder<'_> {
    fn context(&self) -> usize {
        self.model.config.context
    }
    fn held(&self) -> usize {
        self.cache.len()
    }
    fn clear(&mut self) {
        self.cache.clear();
    }
    fn feed(&mut self, ids: &[u32]) -> Vec<f32> {
        self.model.forward(ids, &mut self.cache)
    }
}

/// Resolves `spec` (a directory, a name trained here, a hub repo id; `None`: the default model),
/// fetching a hub repo first when `download` is set and it is not here, and loads it; the CPU
/// decoder runs where the fused CPU kernels do ([`nervus_models::fused::serves`]).
pub fn open<B: Backend>(
    store: &store::Store,
    spec: Option<&str>,
    download: bool,
    quant: Quant,
    device: &B::Device,
    progress: &mut dyn FnMut(&str, u64, Option<u64>),
) -> Result<(store::Found, Engine<B>), EngineError> {
    let found = match store.resolve(spec) {
        Err(store::StoreError::NotDownloaded { repo, .. }) if download => {
            let dir = hub::download(store, &repo, progress)?;
            store::Found::Hub { repo, dir }
        }
        other => other?,
    };
    let engine = Engine::load(
        found.dir(),
        quant,
        nervus_models::fused::serves::<B>(),
        device,
    )?;
    Ok((found, engine))
}

impl<B: Backend> Engine<B> {
    /// Loads a model directory. `cpu_kernels`: whether the backend is one the CPU decoder serves
    /// (the CPU backends); elsewhere the model runs through Burn.
    pub fn load(
        dir: &Path,
        quant: Quant,
        cpu_kernels: bool,
        device: &B::Device,
    ) -> Result<Self, EngineError> {
        let config_path = dir.join("config.json");
        let raw: serde_json::Value = read_json(&config_path)?;
        let kind = raw
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or("gpt2");
        let (model, eos, what) = match kind {
            "gpt2" => {
                let model = nervus_models::gpt2::load::<B>(dir, device)?;
                let own = dir.join("training.json").is_file();
                let eos = raw
                    .get("eos_token_id")
                    .and_then(|v| v.as_u64())
                    .map(|v| v as u32)
                    .filter(|_| !own);
                let what = if own { "character GPT" } else { "GPT-2" };
                (model, eos, what)
            }
            "qwen2" => {
                let (model, hf) = nervus_models::qwen2::load::<B>(dir, device)?;
                let eos = hf.eos_ids().first().copied();
                (model, eos, "Qwen2")
            }
            other => {
                return Err(EngineError::Unsupported(format!(
                    "{}: model_type `{other}` is not one the engine runs (gpt2, qwen2)",
                    config_path.display()
                )));
            }
        };
        let codec = Codec::load(dir)?;
        if codec.vocab_size() > model.config.vocab {
            let json = dir.join("tokenizer.json");
            return Err(EngineError::Vocabulary {
                path: if json.is_file() {
                    json
                } else {
                    dir.join("vocab.json")
                },
                tokens: codec.vocab_size(),
                rows: model.config.vocab,
            });
        }
        // A tied head (transformers' default) is loaded as a copy of the embedding: counted once.
        let tied = raw
            .get("tie_word_embeddings")
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        let params: usize = nervus_models::named::shapes(&model)
            .iter()
            .filter(|(name, _)| !(tied && name == "lm_head.weight"))
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        let c = &model.config;
        let mut summary = format!(
            "{what}: {} layers, {} heads, width {}, context {}, vocabulary {}, {:.1}M parameters",
            c.layers,
            c.heads,
            c.d_model,
            c.context,
            c.vocab,
            params as f64 / 1e6
        );
        let q8 = match quant {
            Quant::F32 => None,
            Quant::Q8 => {
                let (q8, how) = quant::load_or_make(dir, &model)?;
                summary.push_str(&format!("; int8 weights ({how})"));
                Some(q8)
            }
        };
        let runner = match CpuGpt::supports(&model.config) {
            Ok(()) if cpu_kernels => {
                summary.push_str("; CPU decoder");
                Runner::Cpu(Box::new(
                    CpuGpt::from_model(&model, q8.as_ref()).map_err(EngineError::Unsupported)?,
                ))
            }
            _ => {
                summary.push_str("; Burn");
                Runner::Burn(Box::new(match &q8 {
                    Some(q) => nervus_models::decode::dequantized(model, q)?,
                    None => model,
                }))
            }
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            codec,
            runner,
            quant,
            eos,
            summary,
        })
    }

    /// Longest sequence the model reads.
    pub fn context(&self) -> usize {
        match &self.runner {
            Runner::Cpu(m) => m.config.context,
            Runner::Burn(m) => m.context(),
        }
    }

    /// The prompt's ids, refused when empty, when a character is outside a character model's
    /// vocabulary, or when it leaves no room in the context for a token.
    pub fn prompt_ids(&self, prompt: &str) -> Result<Vec<u32>, EngineError> {
        let ids = self.codec.encode(prompt)?;
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if ids.len() >= self.context() {
            return Err(EngineError::PromptTooLong {
                tokens: ids.len(),
                context: self.context(),
            });
        }
        Ok(ids)
    }

    /// Continues `prompt`, handing the text to `on_text` as whole characters arrive.
    pub fn run(
        &self,
        prompt: &str,
        opts: &RunOptions,
        mut on_text: impl FnMut(&str),
    ) -> Result<RunReport, EngineError> {
        let start = Instant::now();
        let ids = self.prompt_ids(prompt)?;
        let mut rng = Rng::new(opts.seed);
        let mut first_token = None;
        let mut shown = TextStream::default();
        let eos = self.eos.filter(|_| opts.stop_at_eos);
        let decode = |ids: &[u32]| self.codec.decode(ids);
        let on_token = |id: u32| {
            first_token.get_or_insert_with(|| start.elapsed());
            if Some(id) == eos {
                return false;
            }
            shown.push(id, decode, &mut on_text);
            true
        };
        let tokens = match &self.runner {
            Runner::Cpu(m) => stream(
                &mut CpuDecoder::new(m),
                &ids,
                &opts.sample,
                &mut rng,
                on_token,
            ),
            Runner::Burn(m) => stream(
                &mut BurnDecoder::new(m),
                &ids,
                &opts.sample,
                &mut rng,
                on_token,
            ),
        };
        let text = shown.finish(decode, &mut on_text);
        Ok(RunReport {
            text,
            prompt_tokens: ids.len(),
            tokens,
            first_token: first_token.unwrap_or_default(),
            total: start.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests;
