//! Causal multi-head self-attention in GPT-2's layout, with the modern recipe's options.
//!
//! One fused projection `c_attn` (`[C, C + 2·KV·D]`, GPT-2's `Conv1D` layout, which is also Burn's
//! `[in, out]`) makes queries, keys and values: columns `0..C` are q, then `KV·D` of k, then `KV·D`
//! of v, and head `h` takes columns `h·D..(h+1)·D` of each (`D = C/H`). With `KV = H` (GPT-2) that is
//! `[C, 3C]` split in thirds. Each head scores every key against every query, `q·kᵀ/√D`, masks the
//! future (and, with a document mask, other documents), normalises each row with a softmax and
//! mixes the values; the heads are laid side by side again and `c_proj` mixes them.
//!
//! Options, all off for GPT-2: fewer key/value heads than query heads (grouped-query attention:
//! each group of `H/KV` query heads shares one key/value head), RMSNorm on each head's queries and
//! keys (QK-norm), and rotary positions applied to queries and keys after the norm.
//!
//! Decoding one token at a time reuses the keys and values of earlier positions: [`KvCache`] holds
//! them (rotated, and before the grouped heads are repeated), so each new token costs one row of
//! attention instead of a whole square.

use crate::norm::{Norm, NormKind};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Configuration of [`CausalSelfAttention`].
#[derive(Config, Debug)]
pub struct CausalSelfAttentionConfig {
    /// Model width `C`.
    pub d_model: usize,
    /// Query heads `H`; must divide `C`.
    pub heads: usize,
    /// Key/value heads `KV` (must divide `H`); `None` means `H` (plain multi-head attention).
    #[config(default = "None")]
    pub kv_heads: Option<usize>,
    /// Rotary positions with this base; `None` for none (positions come from `wpe`).
    #[config(default = "None")]
    pub rope_base: Option<f64>,
    /// RMSNorm on each head's queries and keys.
    #[config(default = false)]
    pub qk_norm: bool,
    #[config(default = 1e-6)]
    pub qk_norm_eps: f64,
    /// Biases on the projections (GPT-2 has them).
    #[config(default = true)]
    pub bias: bool,
    /// Biases on the query, key and value projection (Qwen2 has them there and nowhere else).
    #[config(default = true)]
    pub qkv_bias: bool,
    /// Standard deviation of the weights at initialisation (GPT-2: 0.02); biases start at zero.
    #[config(default = 0.02)]
    pub init_std: f64,
}

impl CausalSelfAttentionConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> CausalSelfAttention<B> {
        let kv = self.kv_heads.unwrap_or(self.heads);
        assert!(
            self.d_model.is_multiple_of(self.heads) && self.heads.is_multiple_of(kv),
            "d_model {} must be divisible by {} heads, and heads by {kv} key/value heads",
            self.d_model,
            self.heads
        );
        let d = self.d_model / self.heads;
        let linear = |i, o, bias| {
            let mut l: Linear<B> = LinearConfig::new(i, o)
                .with_bias(bias)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: self.init_std,
                })
                .init(device);
            crate::zero_bias(&mut l);
            l
        };
        let qk = || {
            self.qk_norm
                .then(|| Norm::new(NormKind::RmsNorm, d, self.qk_norm_eps, device))
        };
        CausalSelfAttention {
            c_attn: linear(self.d_model, self.d_model + 2 * kv * d, self.qkv_bias),
            c_proj: linear(self.d_model, self.d_model, self.bias),
            q_norm: qk(),
            k_norm: qk(),
            heads: self.heads,
            kv_heads: kv,
            rope_base: self.rope_base,
        }
    }
}

/// Causal multi-head self-attention.
#[derive(Module, Debug)]
pub struct CausalSelfAttention<B: Backend> {
    /// Fused q, k, v projection `[C, C + 2·KV·D]`.
    pub c_attn: Linear<B>,
    /// Output projection `[C, C]`.
    pub c_proj: Linear<B>,
    /// QK-norm gains `[D]`, when on.
    pub q_norm: Option<Norm<B>>,
    pub k_norm: Option<Norm<B>>,
    pub heads: usize,
    pub kv_heads: usize,
    #[module(skip)]
    pub rope_base: Option<f64>,
}

/// Keys and values of the positions seen so far, one layer's worth: `[B, KV, T_seen, D]` each.
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
    /// Shapes: `x [B, T, C]` → `[B, T, C]`; position `i` sees positions `0..=i`, and with
    /// `doc_mask [B, T, T]` (true where a key is in another document) only those of its document.
    pub fn forward(&self, x: Tensor<B, 3>, doc_mask: Option<Tensor<B, 3, Bool>>) -> Tensor<B, 3> {
        let plain =
            self.q_norm.is_none() && self.rope_base.is_none() && self.kv_heads == self.heads;
        if plain && doc_mask.is_none() {
            // GPT-2's attention: one fused op from the packed projection to the merged heads.
            let c = x.dims()[2];
            let qkv = crate::linear_rows(&self.c_attn, x); // [B, T, 3C]
            let scale = 1.0 / ((c / self.heads) as f64).sqrt();
            let y = crate::fused::packed_attention(qkv, self.heads, scale, true);
            return crate::linear_rows(&self.c_proj, y);
        }
        let (q, k, v) = self.qkv(x, 0);
        self.attend(q, k, v, 0, doc_mask)
    }

    /// Shapes: `x [B, T_new, C]` → `[B, T_new, C]`, where `x` continues the sequence whose keys and
    /// values `cache` holds; the new keys and values are appended to it.
    pub fn forward_cached(&self, x: Tensor<B, 3>, cache: &mut KvCache<B>) -> Tensor<B, 3> {
        let offset = cache.len();
        let (q, k, v) = self.qkv(x, offset);
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
        self.attend(q, k, v, offset, None)
    }

    /// Queries `[B, H, T, D]`, keys and values `[B, KV, T, D]`, normed and rotated as configured.
    fn qkv(&self, x: Tensor<B, 3>, offset: usize) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [b, t, c] = x.dims();
        let d = c / self.heads;
        let kvd = self.kv_heads * d;
        let qkv = crate::linear_rows(&self.c_attn, x); // [B, T, C + 2·KV·D]
        let mut parts = qkv.split_with_sizes(vec![c, kvd, kvd], 2).into_iter();
        let mut heads = |n: usize| {
            parts
                .next()
                .expect("three parts")
                .reshape([b, t, n, d])
                .swap_dims(1, 2) // [B, n, T, D]
        };
        let (mut q, mut k, v) = (
            heads(self.heads),
            heads(self.kv_heads),
            heads(self.kv_heads),
        );
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(q);
            k = kn.forward(k);
        }
        if let Some(base) = self.rope_base {
            q = crate::rope::apply(q, offset, base);
            k = crate::rope::apply(k, offset, base);
        }
        (q, k, v)
    }

    /// `[B, KV, T, D]` → `[B, H, T, D]`, each key/value head repeated for its group of query heads.
    fn repeat_kv(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let g = self.heads / self.kv_heads;
        if g == 1 {
            return x;
        }
        let [b, kv, t, d] = x.dims();
        x.unsqueeze_dim::<5>(2)
            .expand([b, kv, g, t, d])
            .reshape([b, kv * g, t, d])
    }

    /// Attention of queries at positions `offset..offset+Tq` over keys at `0..Tk`.
    fn attend(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        offset: usize,
        doc_mask: Option<Tensor<B, 3, Bool>>,
    ) -> Tensor<B, 3> {
        let [b, h, tq, d] = q.dims();
        let (k, v) = (self.repeat_kv(k), self.repeat_kv(v));
        let tk = k.dims()[2];
        let scale = 1.0 / (d as f64).sqrt();
        let y = match doc_mask {
            // One fused op over the `B·H` (sequence, head) pairs.
            None => crate::fused::attention(
                q.reshape([b * h, tq, d]),
                k.reshape([b * h, tk, d]),
                v.reshape([b * h, tk, d]),
                scale,
                Some(offset),
            )
            .reshape([b, h, tq, d]),
            Some(doc) => Self::attend_masked(q, k, v, offset, doc),
        };
        let y = y.swap_dims(1, 2).reshape([b, tq, h * d]); // [B, Tq, C]
        crate::linear_rows(&self.c_proj, y)
    }

    /// The composed attention with a document mask besides the causal one. Shapes: `q`, `k`, `v`
    /// `[B, H, T, D]` → `[B, H, Tq, D]`.
    fn attend_masked(
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        offset: usize,
        doc: Tensor<B, 3, Bool>,
    ) -> Tensor<B, 4> {
        let [b, h, tq, d] = q.dims();
        let tk = k.dims()[2];
        // Times 1/√d rather than divided by √d: Burn 0.21's autodiff forms the gradient of a
        // division by a scalar in f32 (`1.0 / s.elem::<f32>()`), ~3e-8 off on an f64 backend,
        // while a product keeps the backend's precision (found by the parity test in
        // reference/modern_attention.rs, at d = 2).
        let scores = q.matmul(k.swap_dims(2, 3)) * (1.0 / (d as f64).sqrt()); // [B, H, Tq, Tk]
        // Key j is in the future of query i when j > offset + i.
        let masked = Tensor::<B, 2, Bool>::tril_mask([tq, tk], offset as i64, &scores.device())
            .unsqueeze::<4>()
            .expand([b, h, tq, tk])
            .bool_or(doc.unsqueeze_dim::<4>(1).expand([b, h, tq, tk]));
        let weights = softmax(scores.mask_fill(masked, f32::NEG_INFINITY), 3);
        weights.matmul(v) // [B, H, Tq, D]
    }
}
