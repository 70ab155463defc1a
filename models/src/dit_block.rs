//! The DiT block: diffusers' `BasicTransformerBlock` with `norm_type = "ada_norm_zero"`.
//!
//! The GPT block with three changes. The norms have no learned gain or bias; their scale and shift
//! are computed from the timestep and the label (adaLN). Each branch's output is multiplied by a
//! gate computed the same way, starting at zero (adaLN-Zero), so the block starts as the identity.
//! And attention has no mask. Three lines:
//!
//! ```text
//! m = modulation(conditioning)
//! x = x + gate_msa · attn(modulate(norm(x), shift_msa, scale_msa))
//! x = x + gate_mlp · mlp(modulate(norm(x), shift_mlp, scale_mlp))
//! ```

use crate::ada_norm::AdaLayerNormZero;
use crate::dit_attention::{DitAttention, DitAttentionConfig};
use crate::feed_forward::FeedForward;
use crate::modulate::{gated, layer_norm_plain, modulate};
use crate::regroup::{Grouping, group, ungroup};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

/// diffusers' AdaLayerNormZero normalises with this epsilon, whatever the config says.
pub const ADA_NORM_EPS: f64 = 1e-6;

#[derive(Config, Debug)]
pub struct DitBlockConfig {
    pub d_model: usize,
    pub heads: usize,
    /// Real classes (the label table has one more row for "no label").
    pub classes: usize,
    /// Epsilon of the second norm (diffusers' `norm_eps`).
    #[config(default = 1e-5)]
    pub norm_eps: f64,
}

impl DitBlockConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> DitBlock<B> {
        let linear = |i, o| {
            let mut l: Linear<B> = LinearConfig::new(i, o)
                .with_initializer(Initializer::XavierUniform { gain: 1.0 })
                .init(device);
            crate::zero_bias(&mut l);
            l
        };
        DitBlock {
            norm1: AdaLayerNormZero::new(self.classes, self.d_model, device),
            attn1: DitAttentionConfig::new(self.d_model, self.heads).init(device),
            ff: FeedForward {
                c_fc: linear(self.d_model, 4 * self.d_model),
                c_up: None,
                c_proj: linear(4 * self.d_model, self.d_model),
            },
            norm_eps: self.norm_eps,
        }
    }
}

#[derive(Module, Debug)]
pub struct DitBlock<B: Backend> {
    /// The block's own conditioning embedder and its modulation map.
    pub norm1: AdaLayerNormZero<B>,
    pub attn1: DitAttention<B>,
    /// `ff.net.0.proj` and `ff.net.2` in diffusers' names.
    pub ff: FeedForward<B>,
    pub norm_eps: f64,
}

impl<B: Backend> DitBlock<B> {
    /// Shapes: `x [B, N, D]`, `t [B]` (0..1000), `labels [B, L]` → `[B, N, D]`. With `grouping`,
    /// attention runs within the groups it describes (a video block); without, over all tokens.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
        grouping: Option<Grouping>,
    ) -> Tensor<B, 3> {
        self.forward_conditioned(x, self.norm1.emb.forward(t, labels), grouping)
    }

    /// The block given its conditioning vector directly. Shapes: `x [B, N, D]`,
    /// `conditioning [B, D]` → `[B, N, D]`.
    pub fn forward_conditioned(
        &self,
        x: Tensor<B, 3>,
        conditioning: Tensor<B, 2>,
        grouping: Option<Grouping>,
    ) -> Tensor<B, 3> {
        let m = self.norm1.modulation(conditioning);
        let h = modulate(
            layer_norm_plain(x.clone(), ADA_NORM_EPS),
            m.shift_msa,
            m.scale_msa,
        );
        let a = match grouping {
            Some(g) => ungroup(self.attn1.forward(group(h, g)), g),
            None => self.attn1.forward(h),
        };
        let x = gated(x, m.gate_msa, a);
        let h = modulate(
            layer_norm_plain(x.clone(), self.norm_eps),
            m.shift_mlp,
            m.scale_mlp,
        );
        let [b, n, c] = h.dims();
        let f = self.ff.forward(h.reshape([b * n, c])).reshape([b, n, c]);
        gated(x, m.gate_mlp, f)
    }
}
