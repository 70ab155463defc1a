//! The DiT's trunk, shared by the image model ([`crate::dit::Dit`]) and the video model
//! ([`crate::video_dit::VideoDit`]): the patch embedding, the conditioned blocks and the output
//! layer, with the field names diffusers gives them. The two models are this one struct with their
//! own config beside it; each adds only what it does differently (the video model's frame wave
//! and its attention groups).
//!
//! Initialisation follows the DiT paper: Xavier-uniform linear layers with zero biases, N(0, 0.02)
//! for the label table and the timestep MLP, and zeros for every adaLN modulation map and for the
//! output layer, so a fresh model is the identity in every block and predicts zero velocity.

use crate::dit_block::{ADA_NORM_EPS, DitBlock, DitBlockConfig};
use crate::modulate::{layer_norm_plain, modulate};
use crate::patch_embed::{PatchEmbed, PatchEmbedConfig};
use crate::regroup::Grouping;
use crate::silu::silu;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

/// The sizes a trunk is built from, read off a model's config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrunkShape {
    pub in_channels: usize,
    pub patch_size: usize,
    pub num_layers: usize,
    pub num_attention_heads: usize,
    pub attention_head_dim: usize,
    /// Real classes; the null class ("no label") is one more.
    pub classes: usize,
    pub norm_eps: f64,
}

/// The trunk and the config of the model it serves (`C`: [`crate::dit::DitConfig`] or
/// [`crate::video_dit::VideoDitConfig`]), which is not a parameter and is not saved with the
/// weights.
#[derive(Module, Debug)]
pub struct DitTrunk<B: Backend, C> {
    pub pos_embed: PatchEmbed<B>,
    pub transformer_blocks: Vec<DitBlock<B>>,
    /// Shift and scale of the final norm, from the conditioning.
    pub proj_out_1: Linear<B>,
    /// Tokens to patches of velocity.
    pub proj_out_2: Linear<B>,
    #[module(skip)]
    pub config: C,
}

impl TrunkShape {
    pub fn d_model(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    /// A fresh trunk of this shape serving a model whose config is `config`.
    pub fn init<B: Backend, C>(&self, config: C, device: &B::Device) -> DitTrunk<B, C> {
        let d = self.d_model();
        let zeros = |i, o| {
            LinearConfig::new(i, o)
                .with_initializer(Initializer::Zeros)
                .init(device)
        };
        DitTrunk {
            pos_embed: PatchEmbedConfig::new(self.in_channels, self.patch_size, d).init(device),
            transformer_blocks: (0..self.num_layers)
                .map(|_| {
                    DitBlockConfig::new(d, self.num_attention_heads, self.classes)
                        .with_norm_eps(self.norm_eps)
                        .init(device)
                })
                .collect(),
            proj_out_1: zeros(d, 2 * d),
            proj_out_2: zeros(d, self.patch_size * self.patch_size * self.in_channels),
            config,
        }
    }
}

impl<B: Backend, C> DitTrunk<B, C> {
    /// Every block, then the output layer, conditioned on the noise level and the labels; block
    /// `i` attends within `grouping(i)` (`None`: over all tokens). Shapes: `tokens [B, N, D]`,
    /// `t [B]` on the 0..1000 scale, `labels [B, L]` → patches of velocity `[B, N, p·p·C]`.
    pub fn blocks_and_head(
        &self,
        mut tokens: Tensor<B, 3>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
        grouping: impl Fn(usize) -> Option<Grouping>,
    ) -> Tensor<B, 3> {
        for (i, block) in self.transformer_blocks.iter().enumerate() {
            tokens = block.forward(tokens, t.clone(), labels.clone(), grouping(i));
        }
        // diffusers conditions the output layer on the first block's embedder.
        let cond = self.transformer_blocks[0].norm1.emb.forward(t, labels); // [B, D]
        self.head(tokens, cond)
    }

    /// The output layer: norm, shift and scale from the conditioning (shift first, as diffusers
    /// chunks it), then tokens to patch values. Shapes: `tokens [B, N, D]`, `cond [B, D]` →
    /// `[B, N, p·p·C]`.
    pub fn head(&self, tokens: Tensor<B, 3>, cond: Tensor<B, 2>) -> Tensor<B, 3> {
        let d = cond.dims()[1];
        let mut ss = crate::fused::linear(&self.proj_out_1, silu(cond))
            .split(d, 1)
            .into_iter();
        let (shift, scale) = (ss.next().expect("shift"), ss.next().expect("scale"));
        let tokens = modulate(layer_norm_plain(tokens, ADA_NORM_EPS), shift, scale);
        crate::fused::linear(&self.proj_out_2, tokens)
    }
}
