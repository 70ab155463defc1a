//! The transformer block, pre-norm as in GPT-2: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
//!
//! The residual is the point. On the way back `dx = dy + branch'(dy)`: whatever a branch does to
//! the gradient, `dy` also reaches the layer below untouched, which is what lets many blocks stack.

use crate::attention::{CausalSelfAttention, CausalSelfAttentionConfig, KvCache};
use crate::feed_forward::{FeedForward, FeedForwardConfig};
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::prelude::*;

#[derive(Config, Debug)]
pub struct BlockConfig {
    pub d_model: usize,
    pub heads: usize,
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    #[config(default = 0.02)]
    pub init_std: f64,
}

impl BlockConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Block<B> {
        let ln = || {
            LayerNormConfig::new(self.d_model)
                .with_epsilon(self.norm_eps)
                .init(device)
        };
        Block {
            ln_1: ln(),
            attn: CausalSelfAttentionConfig::new(self.d_model, self.heads)
                .with_init_std(self.init_std)
                .init(device),
            ln_2: ln(),
            mlp: FeedForwardConfig::new(self.d_model, 4 * self.d_model)
                .with_init_std(self.init_std)
                .init(device),
        }
    }
}

#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    pub ln_1: LayerNorm<B>,
    pub attn: CausalSelfAttention<B>,
    pub ln_2: LayerNorm<B>,
    pub mlp: FeedForward<B>,
}

impl<B: Backend> Block<B> {
    /// Shapes: `[B, T, C]` → `[B, T, C]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let x = x.clone() + self.attn.forward(self.ln_1.forward(x));
        x.clone() + self.mlp.forward(self.ln_2.forward(x))
    }

    /// Shapes: `[B, T_new, C]` → `[B, T_new, C]`, continuing the sequence `cache` holds.
    pub fn forward_cached(&self, x: Tensor<B, 3>, cache: &mut KvCache<B>) -> Tensor<B, 3> {
        let x = x.clone() + self.attn.forward_cached(self.ln_1.forward(x), cache);
        x.clone() + self.mlp.forward(self.ln_2.forward(x))
    }
}
