//! The timestep embedder: a fixed sinusoid of the noise level, then a small MLP.
//!
//! diffusers' `Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)`: frequencies
//! `exp(−ln(10000)·k / (half − 1))`, cosines first. Facebook's DiT divides by `half` instead, a 7%
//! difference in the slowest wave that no round trip through our own files could reveal; diffusers'
//! formula is used because diffusers' checkpoints are the contract. Timesteps arrive on diffusers'
//! 0..1000 scale.

use crate::fused::linear;
use crate::silu::silu;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

/// Channels of the sinusoid.
pub const FREQUENCY_CHANNELS: usize = 256;

/// Shapes: `t [B]` (0..1000) → `[B, channels]`, `[cos(t·f_k)…, sin(t·f_k)…]`.
pub fn sinusoid<B: Backend>(t: Tensor<B, 1>, channels: usize, freq_shift: f64) -> Tensor<B, 2> {
    let half = channels / 2;
    let freqs: Vec<f64> = (0..half)
        .map(|k| (-(10_000f64.ln()) * k as f64 / (half as f64 - freq_shift)).exp())
        .collect();
    let freqs = Tensor::<B, 1>::from_data(
        TensorData::new(freqs, [half]).convert::<B::FloatElem>(),
        &t.device(),
    )
    .unsqueeze::<2>(); // [1, half]
    let args = t.unsqueeze_dim::<2>(1) * freqs; // [B, half]
    Tensor::cat(vec![args.clone().cos(), args.sin()], 1)
}

#[derive(Config, Debug)]
pub struct TimestepEmbeddingConfig {
    pub d_model: usize,
}

impl TimestepEmbeddingConfig {
    /// Weights N(0, 0.02) as DiT initialises its timestep MLP; biases zero.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TimestepEmbedding<B> {
        let linear = |i, o| {
            let mut l: Linear<B> = LinearConfig::new(i, o)
                .with_initializer(burn::nn::Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device);
            crate::zero_bias(&mut l);
            l
        };
        TimestepEmbedding {
            linear_1: linear(FREQUENCY_CHANNELS, self.d_model),
            linear_2: linear(self.d_model, self.d_model),
        }
    }
}

/// diffusers' `TimestepEmbedding`: `linear_2(SiLU(linear_1(sinusoid(t))))`.
#[derive(Module, Debug)]
pub struct TimestepEmbedding<B: Backend> {
    pub linear_1: Linear<B>,
    pub linear_2: Linear<B>,
}

impl<B: Backend> TimestepEmbedding<B> {
    /// Shapes: `t [B]` (0..1000) → `[B, D]`.
    pub fn forward(&self, t: Tensor<B, 1>) -> Tensor<B, 2> {
        let s = sinusoid(t, FREQUENCY_CHANNELS, 1.0);
        linear(&self.linear_2, silu(linear(&self.linear_1, s)))
    }
}
