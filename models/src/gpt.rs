//! A GPT: token embeddings (and, GPT-2 style, position embeddings), a stack of pre-norm blocks, a
//! final norm and an output head of its own; with the modern recipe's options in one config.
//!
//! Field names follow GPT-2's checkpoint keys (`wte`, `wpe`, `h`, `ln_f`, `lm_head`) and the tensors
//! are kept in GPT-2's layouts, so [`crate::gpt2`] writes a directory transformers'
//! `GPT2LMHeadModel` loads unchanged when the configuration is GPT-2's. The head is untied and has
//! no bias (GPT-2 ties it to `wte`; the config says `tie_word_embeddings: false`).
//!
//! Initialisation is GPT-2's N(0, 0.02) for every matrix, zeros for biases, ones for gains: a fresh
//! model then predicts nearly uniformly and its first loss is within a few thousandths of ln V,
//! the loss of knowing nothing, rather than confidently wrong.

use crate::attention::CausalSelfAttentionConfig;
use crate::attention::KvCache;
use crate::block::Block;
use crate::feed_forward::FeedForwardConfig;
use crate::norm::Norm;
pub use crate::norm::NormKind;
use crate::output::{LossOutput, Objective, train_step};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use serde::{Deserialize, Serialize};

/// How positions enter the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PositionKind {
    /// A learned table `wpe [context, C]` added to the token embeddings (GPT-2).
    Learned,
    /// Rotary embeddings on queries and keys (rotate-half); no position table.
    Rope,
}

/// The blocks' feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// `C → 4C`, GELU (tanh), `4C → C` (GPT-2).
    Gelu,
    /// `SiLU(x·W1) ⊙ (x·W3) · W2`, hidden about `8C/3` (the parameters of GELU's 4C).
    SwiGlu,
}

/// Shape and options of a [`Gpt`]. The defaults are GPT-2's architecture; the options are the
/// modern recipe's (RMSNorm, rotary positions, SwiGLU, QK-norm, logit soft-capping, grouped-query
/// attention, no biases).
#[derive(Config, Debug, PartialEq)]
pub struct GptConfig {
    /// Vocabulary size `V` (for a character model, the distinct characters of its text).
    pub vocab: usize,
    /// Longest sequence `T` the model reads.
    #[config(default = 64)]
    pub context: usize,
    #[config(default = 2)]
    pub layers: usize,
    #[config(default = 4)]
    pub heads: usize,
    /// Model width `C`.
    #[config(default = 64)]
    pub d_model: usize,
    #[config(default = "NormKind::LayerNorm")]
    pub norm: NormKind,
    #[config(default = "PositionKind::Learned")]
    pub positions: PositionKind,
    #[config(default = "MlpKind::Gelu")]
    pub mlp: MlpKind,
    /// RMSNorm on each head's queries and keys.
    #[config(default = false)]
    pub qk_norm: bool,
    /// Soft-cap the output logits to `c·tanh(z/c)`.
    #[config(default = "None")]
    pub logit_softcap: Option<f64>,
    /// Key/value heads (grouped-query attention); `None` means as many as query heads.
    #[config(default = "None")]
    pub kv_heads: Option<usize>,
    /// Biases on every linear layer (GPT-2 has them; Llama-style models do not).
    #[config(default = true)]
    pub bias: bool,
    /// Biases on the query, key and value projection whatever `bias` says (Qwen2: `Some(true)`
    /// with `bias` false); `None` follows `bias`. An `Option` so that configurations saved before
    /// it existed still read.
    #[config(default = "None")]
    pub qkv_bias: Option<bool>,
    /// The feed-forward hidden width, when a checkpoint fixes it (Qwen2's `intermediate_size`);
    /// `None`: 4C for GELU, 8C/3 rounded up to 64 for SwiGLU.
    #[config(default = "None")]
    pub ffn_hidden: Option<usize>,
    #[config(default = 10000.0)]
    pub rope_base: f64,
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    #[config(default = 0.02)]
    pub init_std: f64,
}

/// A GPT configuration no model can have, named by the flag (or `config.json` key) that sets it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl GptConfig {
    /// Refuses a shape no model can have: a zero size, a width that the heads do not divide,
    /// key/value heads that do not divide the heads, an odd head width under rotary positions,
    /// or a soft-cap, epsilon or scale that is not a positive number.
    pub fn check(&self) -> Result<(), ConfigError> {
        let fail = |m: String| Err(ConfigError(m));
        for (flag, v) in [
            ("--layers", self.layers),
            ("--heads", self.heads),
            ("--d-model", self.d_model),
            ("--context", self.context),
            ("the vocabulary", self.vocab),
        ] {
            if v == 0 {
                return fail(format!("{flag} 0: must be at least 1"));
            }
        }
        if self.ffn_hidden == Some(0) {
            return fail("the feed-forward width 0 must be at least 1".into());
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return fail(format!(
                "--d-model {} is not divisible by --heads {}",
                self.d_model, self.heads
            ));
        }
        if let Some(kv) = self.kv_heads
            && (kv == 0 || !self.heads.is_multiple_of(kv))
        {
            return fail(format!(
                "--kv-heads {kv} must divide --heads {}",
                self.heads
            ));
        }
        let head = self.d_model / self.heads;
        if self.positions == PositionKind::Rope && head % 2 == 1 {
            return fail(format!(
                "rotary positions need an even head width; --d-model {} / --heads {} is {head}",
                self.d_model, self.heads
            ));
        }
        if let Some(c) = self.logit_softcap
            && !(c.is_finite() && c > 0.0)
        {
            return fail(format!(
                "--softcap {c}: must be a number above 0 (or 0 for off)"
            ));
        }
        for (what, v) in [
            ("norm epsilon", self.norm_eps),
            ("rope base", self.rope_base),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return fail(format!("the {what} {v} must be a number above 0"));
            }
        }
        if !(self.init_std.is_finite() && self.init_std >= 0.0) {
            return fail(format!(
                "the initial standard deviation {} must be a number, 0 or above",
                self.init_std
            ));
        }
        Ok(())
    }

    /// Whether this configuration is GPT-2's architecture (and so exports to transformers).
    pub fn is_gpt2(&self) -> bool {
        self.norm == NormKind::LayerNorm
            && self.positions == PositionKind::Learned
            && self.mlp == MlpKind::Gelu
            && !self.qk_norm
            && self.logit_softcap.is_none()
            && self.kv_heads.is_none_or(|k| k == self.heads)
            && self.bias
            && self.qkv_bias != Some(false)
            && self.ffn_hidden.is_none_or(|h| h == 4 * self.d_model)
    }

    /// Whether the query, key and value projection has biases.
    pub fn has_qkv_bias(&self) -> bool {
        self.qkv_bias.unwrap_or(self.bias)
    }

    /// The feed-forward hidden width: [`GptConfig::ffn_hidden`] when set, else 4C for GELU and
    /// for SwiGLU 8C/3 rounded up to a multiple of 64.
    pub fn mlp_hidden(&self) -> usize {
        if let Some(h) = self.ffn_hidden {
            return h;
        }
        match self.mlp {
            MlpKind::Gelu => 4 * self.d_model,
            MlpKind::SwiGlu => (8 * self.d_model / 3).div_ceil(64) * 64,
        }
    }

    /// The modern recipe on this shape: RMSNorm, rotary positions, SwiGLU, QK-norm, soft-capped
    /// logits (at 30), no biases.
    pub fn modern(self) -> Self {
        self.with_norm(NormKind::RmsNorm)
            .with_positions(PositionKind::Rope)
            .with_mlp(MlpKind::SwiGlu)
            .with_qk_norm(true)
            .with_logit_softcap(Some(30.0))
            .with_bias(false)
    }

    pub fn init<B: Backend>(&self, device: &B::Device) -> Gpt<B> {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: self.init_std,
        };
        Gpt {
            wte: EmbeddingConfig::new(self.vocab, self.d_model)
                .with_initializer(normal.clone())
                .init(device),
            wpe: (self.positions == PositionKind::Learned).then(|| {
                EmbeddingConfig::new(self.context, self.d_model)
                    .with_initializer(normal.clone())
                    .init(device)
            }),
            h: (0..self.layers).map(|_| init_block(self, device)).collect(),
            ln_f: Norm::new(self.norm, self.d_model, self.norm_eps, device),
            lm_head: LinearConfig::new(self.d_model, self.vocab)
                .with_bias(false)
                .with_initializer(normal)
                .init(device),
            config: self.clone(),
        }
    }

    /// Parameters of a model of this shape.
    pub fn num_params(&self) -> usize {
        let (v, t, c, l) = (self.vocab, self.context, self.d_model, self.layers);
        let d = c / self.heads;
        let kv = self.kv_heads.unwrap_or(self.heads);
        let b = self.bias as usize;
        let qb = self.has_qkv_bias() as usize;
        let norm = if self.norm == NormKind::LayerNorm {
            2 * c
        } else {
            c
        };
        let qkv_out = c + 2 * kv * d;
        let attn =
            c * qkv_out + qb * qkv_out + c * c + b * c + if self.qk_norm { 2 * d } else { 0 };
        let hdn = self.mlp_hidden();
        let mlp = match self.mlp {
            MlpKind::Gelu => c * hdn + b * hdn + hdn * c + b * c,
            MlpKind::SwiGlu => 2 * (c * hdn + b * hdn) + hdn * c + b * c,
        };
        let wpe = if self.positions == PositionKind::Learned {
            t * c
        } else {
            0
        };
        v * c + wpe + l * (2 * norm + attn + mlp) + norm + c * v
    }
}

/// The size presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GptSize {
    /// 2 layers, 4 heads, d 64, context 64: the reference crate's default, ~113K parameters on a
    /// 65-character text; trains in well under a minute on two cores.
    Small,
    /// 4 layers, 4 heads, d 128, context 128: ~0.8M parameters.
    Medium,
    /// 6 layers, 8 heads, d 256, context 256: ~4.8M parameters; a long CPU run.
    Large,
}

impl GptSize {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "small" => Some(Self::Small),
            "medium" => Some(Self::Medium),
            "large" => Some(Self::Large),
            _ => None,
        }
    }

    /// `(layers, heads, d_model, context)`.
    pub fn shape(self) -> (usize, usize, usize, usize) {
        match self {
            Self::Small => (2, 4, 64, 64),
            Self::Medium => (4, 4, 128, 128),
            Self::Large => (6, 8, 256, 256),
        }
    }

    pub fn config(self, vocab: usize) -> GptConfig {
        let (layers, heads, d_model, context) = self.shape();
        GptConfig::new(vocab)
            .with_layers(layers)
            .with_heads(heads)
            .with_d_model(d_model)
            .with_context(context)
    }
}

/// The model.
#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    /// Token embedding `[V, C]`.
    pub wte: Embedding<B>,
    /// Position embedding `[context, C]` (GPT-2 positions only).
    pub wpe: Option<Embedding<B>>,
    /// The blocks.
    pub h: Vec<Block<B>>,
    pub ln_f: Norm<B>,
    /// Output head, `[C, V]` in memory (Burn's `[in, out]`), no bias.
    pub lm_head: Linear<B>,
    /// The configuration this model was built from.
    #[module(skip)]
    pub config: GptConfig,
}

/// One cache per block, for incremental decoding.
pub type GptCache<B> = Vec<KvCache<B>>;

/// Token ids and the ids that follow them.
#[derive(Clone, Debug)]
pub struct LmBatch<B: Backend> {
    /// `[B, T]`.
    pub inputs: Tensor<B, 2, Int>,
    /// `[B, T]`: `targets[b, t]` is the token after `inputs[b, t]`.
    pub targets: Tensor<B, 2, Int>,
    /// `[B, T, T]`, true where key `j` is in another document than query `i` (document masking);
    /// `None` lets every position see every earlier one.
    pub doc_mask: Option<Tensor<B, 3, Bool>>,
}

impl<B: Backend> Gpt<B> {
    /// Longest sequence the model reads.
    pub fn context(&self) -> usize {
        self.config.context
    }

    fn embed(&self, ids: Tensor<B, 2, Int>, offset: usize) -> Tensor<B, 3> {
        let [b, t] = ids.dims();
        assert!(
            offset + t <= self.context(),
            "sequence of {} positions exceeds the context of {}",
            offset + t,
            self.context()
        );
        let device = ids.device();
        let tokens = self.wte.forward(ids); // [B, T, C]
        match &self.wpe {
            Some(wpe) => {
                // Looked up for every sequence, `[B, T]`, not broadcast from `[1, T]`: the sum is
                // then of two contiguous `[B, T, C]` tensors, which flex adds in one pass (a
                // broadcast sum takes its element-by-element path, 4% of a small GPT's step).
                let pos = Tensor::<B, 1, Int>::arange(offset as i64..(offset + t) as i64, &device)
                    .unsqueeze::<2>()
                    .repeat_dim(0, b); // [B, T]
                tokens + wpe.forward(pos)
            }
            None => tokens,
        }
    }

    /// Shapes: `ids [B, T]` (T ≤ context) → logits `[B, T, V]`.
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.forward_masked(ids, None)
    }

    /// [`Gpt::forward`] with a document mask `[B, T, T]` (true where attention is not allowed).
    pub fn forward_masked(
        &self,
        ids: Tensor<B, 2, Int>,
        doc_mask: Option<Tensor<B, 3, Bool>>,
    ) -> Tensor<B, 3> {
        let mut x = self.embed(ids, 0);
        for block in &self.h {
            x = block.forward(x, doc_mask.clone());
        }
        self.head(x)
    }

    /// Final norm, output head and (when configured) logit soft-capping `c·tanh(z/c)`, which
    /// bounds every logit by `c` while leaving small ones almost unchanged.
    fn head(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let logits = crate::linear_rows(&self.lm_head, self.ln_f.forward(x));
        match self.config.logit_softcap {
            Some(c) => crate::softcap::softcap(logits, c),
            None => logits,
        }
    }

    /// Shapes: `ids [B, T_new]` → logits `[B, T_new, V]`, continuing the sequence whose keys and
    /// values `cache` holds (an empty cache starts one). Same logits as [`Gpt::forward`] on the
    /// whole sequence, at the cost of the new positions only.
    pub fn forward_cached(&self, ids: Tensor<B, 2, Int>, cache: &mut GptCache<B>) -> Tensor<B, 3> {
        if cache.len() != self.h.len() {
            *cache = (0..self.h.len()).map(|_| KvCache::default()).collect();
        }
        let mut x = self.embed(ids, cache[0].len());
        for (block, c) in self.h.iter().zip(cache.iter_mut()) {
            x = block.forward_cached(x, c);
        }
        self.head(x)
    }

    /// Mean cross-entropy of the next-token predictions.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        self.loss_masked(inputs, targets, None)
    }

    /// [`Gpt::loss`] with a document mask.
    pub fn loss_masked(
        &self,
        inputs: Tensor<B, 2, Int>,
        targets: Tensor<B, 2, Int>,
        doc_mask: Option<Tensor<B, 3, Bool>>,
    ) -> Tensor<B, 1> {
        let [b, t] = inputs.dims();
        let logits = self.forward_masked(inputs, doc_mask); // [B, T, V]
        let v = logits.dims()[2];
        crate::fused::cross_entropy(logits.reshape([b * t, v]), targets.reshape([b * t]))
    }

    /// Parameters, counted.
    pub fn num_params(&self) -> usize {
        burn::module::Module::num_params(self)
    }
}

impl<B: AutodiffBackend> Objective<B> for Gpt<B> {
    /// The mean next-token cross-entropy, reported as it is.
    fn objective(&self, batch: LmBatch<B>) -> (Tensor<B, 1>, LossOutput<B::InnerBackend>) {
        let [b, t] = batch.inputs.dims();
        let loss = self.loss_masked(batch.inputs, batch.targets, batch.doc_mask);
        let output = LossOutput {
            loss: loss.clone().inner(),
            count: b * t,
        };
        (loss, output)
    }
}

impl<B: AutodiffBackend> TrainStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LossOutput<B::InnerBackend>;

    fn step(&self, batch: LmBatch<B>) -> TrainOutput<LossOutput<B::InnerBackend>> {
        train_step(self, batch)
    }
}

impl<B: Backend> InferenceStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: LmBatch<B>) -> LossOutput<B> {
        let [b, t] = batch.inputs.dims();
        LossOutput {
            loss: self.loss_masked(batch.inputs, batch.targets, batch.doc_mask),
            count: b * t,
        }
    }
}

/// The block of a GPT of configuration `c`.
pub fn init_block<B: Backend>(c: &GptConfig, device: &B::Device) -> Block<B> {
    let ln = || Norm::new(c.norm, c.d_model, c.norm_eps, device);
    Block {
        ln_1: ln(),
        attn: CausalSelfAttentionConfig::new(c.d_model, c.heads)
            .with_kv_heads(c.kv_heads)
            .with_rope_base((c.positions == PositionKind::Rope).then_some(c.rope_base))
            .with_qk_norm(c.qk_norm)
            .with_bias(c.bias)
            .with_qkv_bias(c.has_qkv_bias())
            .with_init_std(c.init_std)
            .init(device),
        ln_2: ln(),
        mlp: FeedForwardConfig::new(c.d_model, c.mlp_hidden())
            .with_swiglu(c.mlp == MlpKind::SwiGlu)
            .with_bias(c.bias)
            .with_init_std(c.init_std)
            .init(device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_no_model_can_have_is_refused_naming_the_flag() {
        let ok = GptConfig::new(10);
        assert_eq!(ok.check(), Ok(()));
        assert_eq!(ok.clone().modern().check(), Ok(()));
        let refused = |c: GptConfig, says: &str| {
            let e = c.check().expect_err(says);
            assert!(e.0.contains(says), "{e} should say {says}");
        };
        refused(ok.clone().with_layers(0), "--layers 0");
        refused(ok.clone().with_heads(0), "--heads 0");
        refused(ok.clone().with_d_model(0), "--d-model 0");
        refused(ok.clone().with_context(0), "--context 0");
        refused(GptConfig::new(0), "vocabulary 0");
        refused(ok.clone().with_heads(3), "not divisible by --heads 3");
        refused(ok.clone().with_kv_heads(Some(3)), "--kv-heads 3");
        refused(ok.clone().with_kv_heads(Some(0)), "--kv-heads 0");
        // 4 heads of width 5: fine with learned positions, not with rotary ones.
        let odd = ok.clone().with_d_model(20).with_heads(4);
        assert_eq!(odd.clone().check(), Ok(()));
        refused(odd.modern(), "even head width");
        refused(ok.clone().with_logit_softcap(Some(f64::NAN)), "--softcap");
        refused(ok.clone().with_norm_eps(0.0), "epsilon");
        refused(ok.with_init_std(f64::NAN), "standard deviation");
    }
}
