//! The transformer block, pre-norm as in GPT-2: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
//!
//! The residual is the point. On the way back `dx = dy + branch'(dy)`: whatever a branch does to
//! the gradient, `dy` also reaches the layer below untouched, which is what lets many blocks stack.

use crate::attention::{CausalSelfAttention, KvCache};
use crate::feed_forward::FeedForward;
use crate::norm::Norm;
use burn::prelude::*;

#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    pub ln_1: Norm<B>,
    pub attn: CausalSelfAttention<B>,
    pub ln_2: Norm<B>,
    pub mlp: FeedForward<B>,
}

impl<B: Backend> Block<B> {
    /// Shapes: `[B, T, C]` → `[B, T, C]`; `doc_mask [B, T, T]` keeps attention inside documents.
    pub fn forward(&self, x: Tensor<B, 3>, doc_mask: Option<Tensor<B, 3, Bool>>) -> Tensor<B, 3> {
        let x = x.clone() + self.attn.forward(self.ln_1.forward(x), doc_mask);
        x.clone() + self.mlp_rows(x)
    }

    /// The MLP branch on the tokens as rows `[B·T, C]` (why: [`crate::linear_rows`]).
    fn mlp_rows(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, c] = x.dims();
        let h = self.ln_2.forward(x).reshape([b * t, c]);
        self.mlp.forward(h).reshape([b, t, c])
    }

    /// Shapes: `[B, T_new, C]` → `[B, T_new, C]`, continuing the sequence `cache` holds.
    pub fn forward_cached(&self, x: Tensor<B, 3>, cache: &mut KvCache<B>) -> Tensor<B, 3> {
        let x = x.clone() + self.attn.forward_cached(self.ln_1.forward(x), cache);
        x.clone() + self.mlp_rows(x)
    }
}
