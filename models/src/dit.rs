//! The DiT that draws digits: patches in, blocks conditioned on the noise level and the label,
//! patches out; laid out as diffusers' `DiTTransformer2DModel` (`norm_type = "ada_norm_zero"`), so
//! [`crate::diffusers`] writes a pipeline diffusers loads. The model is the DiT trunk
//! ([`crate::dit_trunk`]) with this config beside it.

use crate::dit_trunk::{DitTrunk, TrunkShape};
use crate::flow::{FlowBatch, Velocity, mse, noised};
use crate::output::{LossOutput, Objective, train_step};
use crate::patch_embed::unpatchify;
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

    /// The sizes of its trunk.
    pub fn shape(&self) -> TrunkShape {
        TrunkShape {
            in_channels: self.in_channels,
            patch_size: self.patch_size,
            num_layers: self.num_layers,
            num_attention_heads: self.num_attention_heads,
            attention_head_dim: self.attention_head_dim,
            classes: self.classes,
            norm_eps: self.norm_eps,
        }
    }

    pub fn init<B: Backend>(&self, device: &B::Device) -> Dit<B> {
        self.shape().init(self.clone(), device)
    }
}

/// The image DiT: the trunk and its [`DitConfig`].
pub type Dit<B> = DitTrunk<B, DitConfig>;

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
        let tokens = self.pos_embed.forward(x); // [B, N, D]
        let out = self.blocks_and_head(tokens, t, labels, |_| None);
        unpatchify(out, self.config.patch_size, c, h, w)
    }

    /// The flow-matching loss of a batch.
    pub fn flow_loss(&self, batch: FlowBatch<B, 4>) -> Tensor<B, 1> {
        let (xt, target) = noised(batch.x, batch.noise, batch.t.clone());
        mse(self.forward(xt, batch.t * 1000.0, batch.labels), target)
    }
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
