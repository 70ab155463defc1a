//! adaLN-Zero (diffusers' `AdaLayerNormZero`): the block's own conditioning embedder (timestep
//! MLP + label table, summed) and one linear map from `SiLU(conditioning)` to the six per-channel
//! vectors the block uses: shift, scale and gate for attention, then for the MLP.
//!
//! The linear map starts at zero, so every gate starts at zero and the block starts as the identity.

use crate::label_embed::{LabelEmbedding, LabelEmbeddingConfig};
use crate::silu::silu;
use crate::timestep::{TimestepEmbedding, TimestepEmbeddingConfig};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

/// diffusers' `CombinedTimestepLabelEmbeddings`.
#[derive(Module, Debug)]
pub struct CombinedEmbedding<B: Backend> {
    pub timestep_embedder: TimestepEmbedding<B>,
    pub class_embedder: LabelEmbedding<B>,
}

impl<B: Backend> CombinedEmbedding<B> {
    pub fn new(classes: usize, d_model: usize, device: &B::Device) -> Self {
        Self {
            timestep_embedder: TimestepEmbeddingConfig::new(d_model).init(device),
            class_embedder: LabelEmbeddingConfig::new(classes, d_model).init(device),
        }
    }

    /// Shapes: `t [B]` (0..1000), `labels [B, L]` → conditioning `[B, D]`.
    pub fn forward(&self, t: Tensor<B, 1>, labels: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        self.timestep_embedder.forward(t) + self.class_embedder.forward(labels)
    }
}

/// The six modulation vectors of a block, each `[B, D]`.
#[derive(Clone, Debug)]
pub struct Modulation<B: Backend> {
    pub shift_msa: Tensor<B, 2>,
    pub scale_msa: Tensor<B, 2>,
    pub gate_msa: Tensor<B, 2>,
    pub shift_mlp: Tensor<B, 2>,
    pub scale_mlp: Tensor<B, 2>,
    pub gate_mlp: Tensor<B, 2>,
}

#[derive(Module, Debug)]
pub struct AdaLayerNormZero<B: Backend> {
    pub emb: CombinedEmbedding<B>,
    /// `[D, 6D]`, zero at initialisation.
    pub linear: Linear<B>,
}

impl<B: Backend> AdaLayerNormZero<B> {
    pub fn new(classes: usize, d_model: usize, device: &B::Device) -> Self {
        Self {
            emb: CombinedEmbedding::new(classes, d_model, device),
            linear: LinearConfig::new(d_model, 6 * d_model)
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }

    /// Shapes: conditioning `[B, D]` → six `[B, D]` vectors, in diffusers' chunk order.
    pub fn modulation(&self, conditioning: Tensor<B, 2>) -> Modulation<B> {
        let d = conditioning.dims()[1];
        let mut parts = crate::fused::linear(&self.linear, silu(conditioning))
            .split(d, 1)
            .into_iter();
        let mut next = || parts.next().expect("six chunks");
        Modulation {
            shift_msa: next(),
            scale_msa: next(),
            gate_msa: next(),
            shift_mlp: next(),
            scale_mlp: next(),
            gate_mlp: next(),
        }
    }
}
