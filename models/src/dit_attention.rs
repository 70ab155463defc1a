//! Multi-head self-attention without a mask, in diffusers' `Attention` layout: separate `to_q`,
//! `to_k`, `to_v` projections and an output projection `to_out.0` (called `to_out` here; the
//! checkpoint contract adds the `.0`). No patch comes "after" another, so every token reads every
//! other; the video model restricts that by regrouping tokens ([`crate::regroup`]), not by masks.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;

#[derive(Config, Debug)]
pub struct DitAttentionConfig {
    pub d_model: usize,
    pub heads: usize,
}

impl DitAttentionConfig {
    /// Xavier-uniform weights and zero biases, as DiT initialises every linear layer.
    pub fn init<B: Backend>(&self, device: &B::Device) -> DitAttention<B> {
        assert!(
            self.d_model.is_multiple_of(self.heads),
            "d_model {} is not divisible by {} heads",
            self.d_model,
            self.heads
        );
        let linear = || {
            let mut l: Linear<B> = LinearConfig::new(self.d_model, self.d_model)
                .with_initializer(Initializer::XavierUniform { gain: 1.0 })
                .init(device);
            crate::zero_bias(&mut l);
            l
        };
        DitAttention {
            to_q: linear(),
            to_k: linear(),
            to_v: linear(),
            to_out: linear(),
            heads: self.heads,
        }
    }
}

#[derive(Module, Debug)]
pub struct DitAttention<B: Backend> {
    pub to_q: Linear<B>,
    pub to_k: Linear<B>,
    pub to_v: Linear<B>,
    pub to_out: Linear<B>,
    pub heads: usize,
}

impl<B: Backend> DitAttention<B> {
    /// Shapes: `x [G, L, C]` → `[G, L, C]`; each of the `G` sequences attends only to itself.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [g, l, c] = x.dims();
        let (h, d) = (self.heads, c / self.heads);
        let split = |t: Tensor<B, 3>| t.reshape([g, l, h, d]).swap_dims(1, 2); // [G, H, L, D]
        let q = split(self.to_q.forward(x.clone()));
        let k = split(self.to_k.forward(x.clone()));
        let v = split(self.to_v.forward(x));
        // Times 1/√d, not divided by √d: see `attention.rs` (Burn 0.21 takes the gradient of a
        // division by a scalar in f32).
        let weights = softmax(q.matmul(k.swap_dims(2, 3)) * (1.0 / (d as f64).sqrt()), 3); // [G, H, L, L]
        let y = weights.matmul(v).swap_dims(1, 2).reshape([g, l, c]);
        self.to_out.forward(y)
    }
}
