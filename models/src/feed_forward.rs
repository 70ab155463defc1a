//! The block's position-wise MLP: widen 4×, GELU, narrow back (GPT-2's `mlp.c_fc`, `mlp.c_proj`).
//!
//! GELU is the tanh approximation GPT-2 was trained with (`gelu_new` in transformers): a smooth
//! curve, which also makes numerical gradient checks tight where ReLU's kink would blur them.

use crate::gelu::gelu_tanh;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    pub d_model: usize,
    /// Hidden width; GPT-2 uses `4 · d_model`.
    pub hidden: usize,
    #[config(default = 0.02)]
    pub init_std: f64,
}

impl FeedForwardConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> FeedForward<B> {
        let linear = |i, o| {
            let mut l: Linear<B> = LinearConfig::new(i, o)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: self.init_std,
                })
                .init(device);
            crate::zero_bias(&mut l);
            l
        };
        FeedForward {
            c_fc: linear(self.d_model, self.hidden),
            c_proj: linear(self.hidden, self.d_model),
        }
    }
}

#[derive(Module, Debug)]
pub struct FeedForward<B: Backend> {
    /// `[C, 4C]`.
    pub c_fc: Linear<B>,
    /// `[4C, C]`.
    pub c_proj: Linear<B>,
}

impl<B: Backend> FeedForward<B> {
    /// Shapes: `[B, T, C]` → `[B, T, C]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.c_proj.forward(gelu_tanh(self.c_fc.forward(x)))
    }
}
