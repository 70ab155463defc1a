//! Multi-head self-attention without a mask, in diffusers' `Attention` layout: separate `to_q`,
//! `to_k`, `to_v` projections and an output projection `to_out.0` (called `to_out` here; the
//! checkpoint contract adds the `.0`). No patch comes "after" another, so every token reads every
//! other; the video model restricts that by regrouping tokens ([`crate::regroup`]), not by masks.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

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
    ///
    /// Computed one head at a time, from the columns of `to_q`, `to_k`, `to_v` that belong to the
    /// head and the rows of `to_out` that read it, with the heads' outputs summed: the same
    /// arithmetic as splitting `[G, L, H, D]` into `[G, H, L, D]` and merging it back, without the
    /// two reorderings. On flex a 4-D reordering is copied one element at a time, once forward and
    /// three times backward, and that cost as much as the attention itself.
    ///
    /// Where the fused path serves the backend, the three projections are instead one product with
    /// their weights side by side (`[C, 3C]`, GPT-2's packed layout), read by the packed attention
    /// kernel without any reordering.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let biases = [&self.to_q, &self.to_k, &self.to_v].map(|p| p.bias.is_some());
        if crate::fused::serves::<B>() && (biases == [true; 3] || biases == [false; 3]) {
            return self.forward_packed(x);
        }
        let [g, l, c] = x.dims();
        let (h, d) = (self.heads, c / self.heads);
        let x = x.reshape([g * l, c]);
        // Times 1/√d, not divided by √d: see `attention.rs` (Burn 0.21 takes the gradient of a
        // division by a scalar in f32).
        let scale = 1.0 / (d as f64).sqrt();
        let mut out: Option<Tensor<B, 2>> = None;
        for head in 0..h {
            let cols = head * d..(head + 1) * d;
            // `[G·L, C]` → `[G, L, D]`: this head's slice of one projection.
            let project = |linear: &Linear<B>| {
                let mut y = x
                    .clone()
                    .matmul(linear.weight.val().slice([0..c, cols.clone()]));
                if let Some(bias) = &linear.bias {
                    y = y + bias.val().slice([cols.clone()]).unsqueeze_dim::<2>(0);
                }
                y.reshape([g, l, d])
            };
            let (q, k, v) = (
                project(&self.to_q),
                project(&self.to_k),
                project(&self.to_v),
            );
            // softmax(q·kᵀ·scale)·v, one fused op where the backend has it.
            let y = crate::fused::attention(q, k, v, scale, None).reshape([g * l, d]);
            let read = y.matmul(self.to_out.weight.val().slice([cols, 0..c]));
            out = Some(match out {
                Some(sum) => sum + read,
                None => read,
            });
        }
        let mut out = out.expect("at least one head");
        if let Some(bias) = &self.to_out.bias {
            out = out + bias.val().unsqueeze_dim::<2>(0);
        }
        out.reshape([g, l, c])
    }

    /// Shapes: `x [G, L, C]` → `[G, L, C]`, through one `[C, 3C]` projection and the packed
    /// attention kernel.
    fn forward_packed(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let c = x.dims()[2];
        let scale = 1.0 / ((c / self.heads) as f64).sqrt();
        let projections = [&self.to_q, &self.to_k, &self.to_v];
        let weight = Tensor::cat(projections.iter().map(|p| p.weight.val()).collect(), 1);
        // All three have a bias or none has (the caller checks).
        let bias = projections
            .iter()
            .map(|p| p.bias.as_ref().map(|b| b.val()))
            .collect::<Option<Vec<_>>>()
            .map(|b| Tensor::cat(b, 0));
        let qkv = crate::fused::linear_parts(x, weight, bias); // [G, L, 3C]
        let y = crate::fused::packed_attention(qkv, self.heads, scale, false); // [G, L, C]
        crate::fused::linear(&self.to_out, y)
    }
}
