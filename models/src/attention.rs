//! Causal multi-head self-attention in GPT-2's layout.
//!
//! One fused projection `c_attn` (`[C, 3C]`, GPT-2's `Conv1D` layout, which is also Burn's `[in,
//! out]`) makes queries, keys and values: columns `0..C` are q, `C..2C` k, `2C..3C` v, and head `h`
//! takes columns `h·D..(h+1)·D` of each (`D = C/H`). Each head scores every key against every
//! query, `q·kᵀ/√D`, masks the future, normalises each row with a softmax and mixes the values;
//! the heads are laid side by side again and `c_proj` mixes them.
//!
//! Decoding one token at a time reuses the keys and values of earlier positions: [`KvCache`]
//! holds them, so each new token costs one row of attention instead of a whole square.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Configuration of [`CausalSelfAttention`].
#[derive(Config, Debug)]
pub struct CausalSelfAttentionConfig {
    /// Model width `C`.
    pub d_model: usize,
    /// Heads `H`; must divide `C`.
    pub heads: usize,
    /// Standard deviation of the weights at initialisation (GPT-2: 0.02); biases start at zero.
    #[config(default = 0.02)]
    pub init_std: f64,
}

impl CausalSelfAttentionConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> CausalSelfAttention<B> {
        assert!(
            self.d_model % self.heads == 0,
            "d_model {} is not divisible by {} heads",
            self.d_model,
            self.heads
        );
        let linear = |i, o| {
            LinearConfig::new(i, o)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: self.init_std,
                })
                .init(device)
        };
        let mut c_attn: Linear<B> = linear(self.d_model, 3 * self.d_model);
        let mut c_proj: Linear<B> = linear(self.d_model, self.d_model);
        for l in [&mut c_attn, &mut c_proj] {
            crate::zero_bias(l);
        }
        CausalSelfAttention {
            c_attn,
            c_proj,
            heads: self.heads,
        }
    }
}

/// Causal multi-head self-attention.
#[derive(Module, Debug)]
pub struct CausalSelfAttention<B: Backend> {
    /// Fused q, k, v projection `[C, 3C]`.
    pub c_attn: Linear<B>,
    /// Output projection `[C, C]`.
    pub c_proj: Linear<B>,
    pub heads: usize,
}

/// Keys and values of the positions seen so far, one layer's worth: `[B, H, T_seen, D]` each.
#[derive(Clone, Debug)]
pub struct KvCache<B: Backend> {
    pub keys: Option<Tensor<B, 4>>,
    pub values: Option<Tensor<B, 4>>,
}

impl<B: Backend> Default for KvCache<B> {
    fn default() -> Self {
        Self {
            keys: None,
            values: None,
        }
    }
}

impl<B: Backend> KvCache<B> {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dims()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: Backend> CausalSelfAttention<B> {
    /// `[B, T, C]` → `[B, H, T, D]`.
    fn split_heads(&self, x: Tensor<B, 3>) -> Tensor<B, 4> {
        let [b, t, c] = x.dims();
        x.reshape([b, t, self.heads, c / self.heads])
            .swap_dims(1, 2)
    }

    /// Shapes: `x [B, T, C]` → `[B, T, C]`; position `i` sees positions `0..=i`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let (q, k, v) = self.qkv(x);
        self.attend(q, k, v, 0)
    }

    /// Shapes: `x [B, T_new, C]` → `[B, T_new, C]`, where `x` continues the sequence whose keys and
    /// values `cache` holds; the new keys and values are appended to it.
    pub fn forward_cached(&self, x: Tensor<B, 3>, cache: &mut KvCache<B>) -> Tensor<B, 3> {
        let offset = cache.len();
        let (q, k, v) = self.qkv(x);
        let k = match cache.keys.take() {
            Some(old) => Tensor::cat(vec![old, k], 2),
            None => k,
        };
        let v = match cache.values.take() {
            Some(old) => Tensor::cat(vec![old, v], 2),
            None => v,
        };
        cache.keys = Some(k.clone());
        cache.values = Some(v.clone());
        self.attend(q, k, v, offset)
    }

    /// Queries, keys and values, each `[B, H, T, D]`.
    fn qkv(&self, x: Tensor<B, 3>) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [_, _, c] = x.dims();
        let qkv = self.c_attn.forward(x); // [B, T, 3C]
        let mut parts = qkv.split(c, 2).into_iter(); // 3 × [B, T, C]
        let mut next = || self.split_heads(parts.next().expect("three parts"));
        (next(), next(), next())
    }

    /// Attention of queries at positions `offset..offset+Tq` over keys at `0..Tk`.
    fn attend(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        offset: usize,
    ) -> Tensor<B, 3> {
        let [b, h, tq, d] = q.dims();
        let tk = k.dims()[2];
        let scores = q.matmul(k.swap_dims(2, 3)) / (d as f64).sqrt(); // [B, H, Tq, Tk]
        // Key j is in the future of query i when j > offset + i.
        let future = Tensor::<B, 2, Bool>::tril_mask([tq, tk], offset as i64, &scores.device())
            .unsqueeze::<4>()
            .expand([b, h, tq, tk]);
        let weights = softmax(scores.mask_fill(future, f32::NEG_INFINITY), 3);
        let y = weights.matmul(v); // [B, H, Tq, D]
        let y = y.swap_dims(1, 2).reshape([b, tq, h * d]); // [B, Tq, C]
        self.c_proj.forward(y)
    }
}
