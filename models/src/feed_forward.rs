//! The block's position-wise MLP: GELU (GPT-2) or SwiGLU (the modern recipe).
//!
//! GELU: `c_proj(GELU(c_fc(x)))`, widening 4×, in the tanh form GPT-2 was trained with (`gelu_new`);
//! a smooth curve, which also makes numerical gradient checks tight where ReLU's kink would blur
//! them. SwiGLU: `c_proj(SiLU(c_fc(x)) ⊙ c_up(x))`, a gate multiplying a second projection; with a
//! hidden width of about 8C/3 it has the parameters of the 4C GELU MLP.

use crate::fused::linear;
use crate::gelu::gelu_tanh;
use crate::silu::silu;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    pub d_model: usize,
    /// Hidden width; GPT-2 uses `4 · d_model`.
    pub hidden: usize,
    /// SwiGLU instead of GELU.
    #[config(default = false)]
    pub swiglu: bool,
    #[config(default = true)]
    pub bias: bool,
    #[config(default = 0.02)]
    pub init_std: f64,
}

impl FeedForwardConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> FeedForward<B> {
        let linear = |i, o| {
            let mut l: Linear<B> = LinearConfig::new(i, o)
                .with_bias(self.bias)
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
            c_up: self.swiglu.then(|| linear(self.d_model, self.hidden)),
            c_proj: linear(self.hidden, self.d_model),
        }
    }
}

#[derive(Module, Debug)]
pub struct FeedForward<B: Backend> {
    /// `[C, hidden]`: GELU's input, or SwiGLU's gate (through SiLU).
    pub c_fc: Linear<B>,
    /// `[C, hidden]`: SwiGLU's second projection; `None` for GELU.
    pub c_up: Option<Linear<B>>,
    /// `[hidden, C]`.
    pub c_proj: Linear<B>,
}

impl<B: Backend> FeedForward<B> {
    /// Shapes: `[.., C]` → `[.., C]`. The DiT and GPT blocks hand it their tokens flattened to
    /// `[B·T, C]`, so that each weight's gradient is one matrix product instead of `B` of them
    /// summed (what Burn's `Linear` does with a batch axis; see [`crate::linear_rows`]).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let h = match &self.c_up {
            Some(up) => silu(linear(&self.c_fc, x.clone())) * linear(up, x),
            None => gelu_tanh(linear(&self.c_fc, x)),
        };
        linear(&self.c_proj, h)
    }
}
