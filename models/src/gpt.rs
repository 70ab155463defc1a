//! A GPT: token and position embeddings, a stack of pre-norm blocks, a final LayerNorm and an
//! output head of its own.
//!
//! Field names follow GPT-2's checkpoint keys (`wte`, `wpe`, `h`, `ln_f`, `lm_head`) and the tensors
//! are kept in GPT-2's layouts, so [`crate::gpt2`] writes a directory transformers'
//! `GPT2LMHeadModel` loads unchanged. The head is untied and has no bias (GPT-2 ties it to `wte`;
//! the config says `tie_word_embeddings: false`).
//!
//! Initialisation is GPT-2's N(0, 0.02) for every matrix, zeros for biases, ones for gains: a fresh
//! model then predicts nearly uniformly and its first loss is within a few thousandths of ln V,
//! the loss of knowing nothing, rather than confidently wrong.

use crate::attention::KvCache;
use crate::block::{Block, BlockConfig};
use crate::output::LossOutput;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{
    Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use serde::{Deserialize, Serialize};

/// Normalisation layer of the blocks and the final norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormKind {
    /// Subtract the mean, divide by the standard deviation, scale and shift (GPT-2).
    LayerNorm,
}

/// How positions enter the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PositionKind {
    /// A learned table `wpe [context, C]` added to the token embeddings (GPT-2).
    Learned,
}

/// The blocks' feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// `C → 4C`, GELU (tanh), `4C → C` (GPT-2).
    Gelu,
}

/// Shape and options of a [`Gpt`].
#[derive(Config, Debug, PartialEq)]
pub struct GptConfig {
    /// Vocabulary size `V` (for a character model, the distinct characters of its text).
    pub vocab: usize,
    /// Longest sequence `T` the model reads (rows of `wpe`).
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
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    #[config(default = 0.02)]
    pub init_std: f64,
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

impl GptConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Gpt<B> {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: self.init_std,
        };
        Gpt {
            wte: EmbeddingConfig::new(self.vocab, self.d_model)
                .with_initializer(normal.clone())
                .init(device),
            wpe: EmbeddingConfig::new(self.context, self.d_model)
                .with_initializer(normal.clone())
                .init(device),
            h: (0..self.layers)
                .map(|_| {
                    BlockConfig::new(self.d_model, self.heads)
                        .with_norm_eps(self.norm_eps)
                        .with_init_std(self.init_std)
                        .init(device)
                })
                .collect(),
            ln_f: LayerNormConfig::new(self.d_model)
                .with_epsilon(self.norm_eps)
                .init(device),
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
        let block =
            2 * 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
        v * c + t * c + l * block + 2 * c + c * v
    }
}

/// The model.
#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    /// Token embedding `[V, C]`.
    pub wte: Embedding<B>,
    /// Position embedding `[context, C]`.
    pub wpe: Embedding<B>,
    /// The blocks.
    pub h: Vec<Block<B>>,
    pub ln_f: LayerNorm<B>,
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
}

impl<B: Backend> Gpt<B> {
    /// Longest sequence the model reads.
    pub fn context(&self) -> usize {
        self.config.context
    }

    fn embed(&self, ids: Tensor<B, 2, Int>, offset: usize) -> Tensor<B, 3> {
        let [_, t] = ids.dims();
        assert!(
            offset + t <= self.context(),
            "sequence of {} positions exceeds the context of {}",
            offset + t,
            self.context()
        );
        let device = ids.device();
        let pos = Tensor::<B, 1, Int>::arange(offset as i64..(offset + t) as i64, &device)
            .unsqueeze::<2>(); // [1, T]
        self.wte.forward(ids) + self.wpe.forward(pos) // [B, T, C]
    }

    /// Shapes: `ids [B, T]` (T ≤ context) → logits `[B, T, V]`.
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let mut x = self.embed(ids, 0);
        for block in &self.h {
            x = block.forward(x);
        }
        self.lm_head.forward(self.ln_f.forward(x))
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
        self.lm_head.forward(self.ln_f.forward(x))
    }

    /// Mean cross-entropy of the next-token predictions.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let [b, t] = inputs.dims();
        let logits = self.forward(inputs); // [B, T, V]
        let v = logits.dims()[2];
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.reshape([b * t, v]), targets.reshape([b * t]))
    }

    /// Parameters, counted.
    pub fn num_params(&self) -> usize {
        burn::module::Module::num_params(self)
    }
}

impl<B: AutodiffBackend> TrainStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LossOutput<B::InnerBackend>;

    fn step(&self, batch: LmBatch<B>) -> TrainOutput<LossOutput<B::InnerBackend>> {
        let [b, t] = batch.inputs.dims();
        let loss = self.loss(batch.inputs, batch.targets);
        let grads = loss.backward();
        TrainOutput::new(
            self,
            grads,
            LossOutput {
                loss: loss.inner(),
                count: b * t,
            },
        )
    }
}

impl<B: Backend> InferenceStep for Gpt<B> {
    type Input = LmBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: LmBatch<B>) -> LossOutput<B> {
        let [b, t] = batch.inputs.dims();
        LossOutput {
            loss: self.loss(batch.inputs, batch.targets),
            count: b * t,
        }
    }
}
