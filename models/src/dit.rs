//! The DiT that draws digits: patches in, blocks conditioned on the noise level and the label,
//! patches out; laid out as diffusers' `DiTTransformer2DModel` (`norm_type = "ada_norm_zero"`), so
//! [`crate::diffusers`] writes a pipeline diffusers loads.
//!
//! Initialisation follows the DiT paper: Xavier-uniform linear layers with zero biases, N(0, 0.02)
//! for the label table and the timestep MLP, and zeros for every adaLN modulation map and for the
//! output layer, so a fresh model is the identity in every block and predicts zero velocity.

use crate::dit_block::{ADA_NORM_EPS, DitBlock, DitBlockConfig};
use crate::flow::{FlowBatch, Velocity, mse, noised};
use crate::modulate::{layer_norm_plain, modulate};
use crate::output::{LossOutput, Objective, train_step};
use crate::patch_embed::{PatchEmbed, PatchEmbedConfig, unpatchify};
use crate::silu::silu;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{InferenceStep, TrainOutput, TrainStep};

/// Shape of a [`Dit`]; field names follow diffusers' config where there is one.
#[derive(Config, Debug, PartialEq)]
pub struct DitConfig {
    /// Image side in pixels.
    #[config(default = 28)]
    pub sample_size: usize,
    #[config(default = 4)]
    pub patch_size: usize,
    #[config(default = 1)]
    pub in_channels: usize,
    #[config(default = 4)]
    pub num_layers: usize,
    #[config(default = 4)]
    pub num_attention_heads: usize,
    #[config(default = 32)]
    pub attention_head_dim: usize,
    /// Real classes (diffusers' `num_embeds_ada_norm`).
    #[config(default = 10)]
    pub classes: usize,
    #[config(default = 1e-5)]
    pub norm_eps: f64,
}

impl DitConfig {
    /// The digits preset: 28×28 in 4×4 patches (49 tokens), 4 blocks 128 wide, 4 heads: about
    /// 1.43M parameters in diffusers' layout, which gives every block its own timestep and label
    /// embedder (the reference crate shared one and had 1.28M).
    pub fn digits() -> Self {
        Self::new()
    }

    pub fn d_model(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    /// What the patch embedding's conv kernel shape needs.
    pub fn patch_shape(&self) -> crate::patch_embed::PatchShape {
        crate::patch_embed::PatchShape {
            channels: self.in_channels,
            patch: self.patch_size,
        }
    }

    pub fn tokens(&self) -> usize {
        (self.sample_size / self.patch_size).pow(2)
    }

    pub fn init<B: Backend>(&self, device: &B::Device) -> Dit<B> {
        let d = self.d_model();
        let zeros = |i, o| {
            LinearConfig::new(i, o)
                .with_initializer(Initializer::Zeros)
                .init(device)
        };
        Dit {
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
            config: self.clone(),
        }
    }
}

#[derive(Module, Debug)]
pub struct Dit<B: Backend> {
    pub pos_embed: PatchEmbed<B>,
    pub transformer_blocks: Vec<DitBlock<B>>,
    /// Shift and scale of the final norm, from the conditioning.
    pub proj_out_1: Linear<B>,
    /// Tokens to patches of velocity.
    pub proj_out_2: Linear<B>,
    #[module(skip)]
    pub config: DitConfig,
}

impl<B: Backend> Dit<B> {
    /// Shapes: `x [B, C, H, W]`, `t [B]` on diffusers' 0..1000 scale, `labels [B, 1]` (the null
    /// class `classes` for "no label") → velocity `[B, C, H, W]`.
    pub fn forward(
        &self,
        x: Tensor<B, 4>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
    ) -> Tensor<B, 4> {
        let [_, c, h, w] = x.dims();
        let mut tokens = self.pos_embed.forward(x); // [B, N, D]
        for block in &self.transformer_blocks {
            tokens = block.forward(tokens, t.clone(), labels.clone(), None);
        }
        // diffusers conditions the output layer on the first block's embedder.
        let cond = self.transformer_blocks[0].norm1.emb.forward(t, labels); // [B, D]
        unpatchify(self.head(tokens, cond), self.config.patch_size, c, h, w)
    }

    /// The output layer (see [`head`]). Shapes: `tokens [B, N, D]`, `cond [B, D]` →
    /// `[B, N, p·p·C]`.
    pub fn head(&self, tokens: Tensor<B, 3>, cond: Tensor<B, 2>) -> Tensor<B, 3> {
        head(&self.proj_out_1, &self.proj_out_2, tokens, cond)
    }

    /// The flow-matching loss of a batch.
    pub fn flow_loss(&self, batch: FlowBatch<B, 4>) -> Tensor<B, 1> {
        let (xt, target) = noised(batch.x, batch.noise, batch.t.clone());
        mse(self.forward(xt, batch.t * 1000.0, batch.labels), target)
    }
}

/// The output layer of the image and the video DiT: norm, shift and scale from the conditioning
/// (shift first, as diffusers chunks it), then tokens to patch values. Shapes: `tokens [B, N, D]`,
/// `cond [B, D]` → `[B, N, p·p·C]`.
pub fn head<B: Backend>(
    proj_out_1: &Linear<B>,
    proj_out_2: &Linear<B>,
    tokens: Tensor<B, 3>,
    cond: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let d = cond.dims()[1];
    let mut ss = crate::fused::linear(proj_out_1, silu(cond))
        .split(d, 1)
        .into_iter();
    let (shift, scale) = (ss.next().expect("shift"), ss.next().expect("scale"));
    let tokens = modulate(layer_norm_plain(tokens, ADA_NORM_EPS), shift, scale);
    crate::fused::linear(proj_out_2, tokens)
}

impl<B: AutodiffBackend> Objective<B> for Dit<B> {
    /// The flow-matching loss, reported as it is.
    fn objective(&self, batch: FlowBatch<B, 4>) -> (Tensor<B, 1>, LossOutput<B::InnerBackend>) {
        let count = batch.x.dims().iter().product();
        let loss = self.flow_loss(batch);
        let output = LossOutput {
            loss: loss.clone().inner(),
            count,
        };
        (loss, output)
    }
}

impl<B: AutodiffBackend> TrainStep for Dit<B> {
    type Input = FlowBatch<B, 4>;
    type Output = LossOutput<B::InnerBackend>;

    fn step(&self, batch: FlowBatch<B, 4>) -> TrainOutput<LossOutput<B::InnerBackend>> {
        train_step(self, batch)
    }
}

impl<B: Backend> InferenceStep for Dit<B> {
    type Input = FlowBatch<B, 4>;
    type Output = LossOutput<B>;

    fn step(&self, batch: FlowBatch<B, 4>) -> LossOutput<B> {
        let count = batch.x.dims().iter().product();
        LossOutput {
            loss: self.flow_loss(batch),
            count,
        }
    }
}

impl<B: Backend> Velocity<B, 4> for Dit<B> {
    fn velocity(
        &self,
        x: Tensor<B, 4>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
    ) -> Tensor<B, 4> {
        self.forward(x, t * 1000.0, labels)
    }

    fn null_label(&self) -> i64 {
        self.config.classes as i64
    }
}
