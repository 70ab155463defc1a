//! A GPT-2 decoder on the CPU, for generation: the same model as [`Gpt`], its weights copied out
//! of Burn into plain buffers, f32 or int8 ([`matrix`]).
//!
//! Generation reads one token at a time, and one token's forward pass is a chain of
//! matrix-vector products, each a pass over a weight matrix read from memory. Through Burn that
//! is some thirty tensor operations a layer, each allocating, on one thread at these sizes
//! (measured: a 124M GPT-2 at 28 tokens/s on flex with one of two cores busy). Here a layer is
//! seven loops over buffers that stay allocated, and the products are split across the threads;
//! int8 weights move a quarter of the bytes. A prompt of many tokens goes through `gemm`.
//!
//! It takes GPT-2's architecture only (LayerNorm, learned positions, GELU MLP, as many key/value
//! heads as query heads, no soft-capping): [`CpuGpt::supports`] says what else it refuses, and
//! such models generate through Burn. Its witness is [`Gpt::forward`] itself (the tests below):
//! the same logits, prompt and step by step.

pub mod matrix;

use crate::checkpoint::NamedTensor;
use crate::gpt::{Gpt, GptConfig, MlpKind, PositionKind};
use crate::norm::NormKind;
use burn::prelude::*;
use matrix::{Matrix, Q8Matrix, dot_f32};
use rayon::prelude::*;
use std::collections::HashMap;

/// A linear layer: `y = x · Wᵀ + b`.
#[derive(Clone, Debug)]
struct Linear {
    w: Matrix,
    b: Option<Vec<f32>>,
}

impl Linear {
    /// `x [T, in]` → `[T, out]`.
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let (rows, cols) = self.w.dims();
        let mut out = vec![0.0; x.len() / cols * rows];
        self.w.product(x, &mut out);
        if let Some(b) = &self.b {
            for row in out.chunks_mut(rows) {
                for (o, b) in row.iter_mut().zip(b) {
                    *o += b;
                }
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    /// `x [T, C]` → `[T, C]`, each row to mean 0 and variance 1, then scaled and shifted.
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let c = self.gamma.len();
        let mut out = vec![0.0; x.len()];
        for (row, o) in x.chunks(c).zip(out.chunks_mut(c)) {
            let mean = row.iter().sum::<f32>() / c as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / c as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            for i in 0..c {
                o[i] = (row[i] - mean) * inv * self.gamma[i] + self.beta[i];
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
struct Block {
    ln_1: LayerNorm,
    c_attn: Linear,
    attn_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    mlp_proj: Linear,
}

/// The keys and values of the positions read so far, per layer: `[H, context, D]` each.
#[derive(Clone, Debug)]
pub struct CpuCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    len: usize,
}

impl CpuCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position (the buffers stay allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// [`Gpt`]'s GPT-2 architecture as plain buffers (see the module's documentation).
#[derive(Clone, Debug)]
pub struct CpuGpt {
    pub config: GptConfig,
    wte: Vec<f32>,
    wpe: Vec<f32>,
    h: Vec<Block>,
    ln_f: LayerNorm,
    lm_head: Linear,
}

impl CpuGpt {
    /// Whether this decoder implements `config`; otherwise what it lacks.
    pub fn supports(config: &GptConfig) -> Result<(), String> {
        let lacks = |what: &str| Err(format!("the CPU decoder has no {what}"));
        if config.norm != NormKind::LayerNorm {
            return lacks("RMSNorm");
        }
        if config.positions != PositionKind::Learned {
            return lacks("rotary positions");
        }
        if config.mlp != MlpKind::Gelu {
            return lacks("SwiGLU");
        }
        if config.qk_norm {
            return lacks("QK-norm");
        }
        if config.logit_softcap.is_some() {
            return lacks("logit soft-capping");
        }
        if config.kv_heads.is_some_and(|k| k != config.heads) {
            return lacks("grouped-query attention");
        }
        Ok(())
    }

    /// Copies `model`'s weights out. `q8` holds int8 versions of some of its linear layers'
    /// weights, by the weight's path in the model (`h.0.attn.c_attn.weight`, as
    /// [`quantize`] names them); those replace the f32 ones.
    pub fn from_model<B: Backend>(
        model: &Gpt<B>,
        q8: Option<&HashMap<String, Q8Matrix>>,
    ) -> Result<Self, String> {
        let config = model.config.clone();
        Self::supports(&config)?;
        let mut t: HashMap<String, NamedTensor> = crate::named::export(model)
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        let mut take = |name: &str| -> Result<NamedTensor, String> {
            t.remove(name)
                .ok_or_else(|| format!("the model has no parameter `{name}`"))
        };
        let eps = config.norm_eps as f32;
        let mut norm = |p: &str| -> Result<LayerNorm, String> {
            let gamma = take(&format!("{p}.gamma"))?.data;
            let beta = match take(&format!("{p}.beta")) {
                Ok(b) => b.data,
                Err(_) => vec![0.0; gamma.len()],
            };
            Ok(LayerNorm { gamma, beta, eps })
        };
        let ln_f = norm("ln_f")?;
        let h = (0..config.layers)
            .map(|i| -> Result<_, String> {
                Ok((norm(&format!("h.{i}.ln_1"))?, norm(&format!("h.{i}.ln_2"))?))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut linear = |p: &str| -> Result<Linear, String> {
            let name = format!("{p}.weight");
            let w = take(&name)?;
            let (inputs, outputs) = (w.shape[0], w.shape[1]);
            let w = match q8.and_then(|q| q.get(&name)) {
                Some(q) if (q.rows, q.cols) == (outputs, inputs) => Matrix::Q8(q.clone()),
                Some(q) => {
                    return Err(format!(
                        "int8 `{name}` is {}×{}, the model's is {outputs}×{inputs}",
                        q.rows, q.cols
                    ));
                }
                None => Matrix::from_in_out(&w.data, inputs, outputs),
            };
            let b = take(&format!("{p}.bias")).ok().map(|b| b.data);
            Ok(Linear { w, b })
        };
        let mut blocks = Vec::with_capacity(config.layers);
        for (i, (ln_1, ln_2)) in h.into_iter().enumerate() {
            blocks.push(Block {
                ln_1,
                c_attn: linear(&format!("h.{i}.attn.c_attn"))?,
                attn_proj: linear(&format!("h.{i}.attn.c_proj"))?,
                ln_2,
                c_fc: linear(&format!("h.{i}.mlp.c_fc"))?,
                mlp_proj: linear(&format!("h.{i}.mlp.c_proj"))?,
            });
        }
        let lm_head = linear("lm_head")?;
        Ok(Self {
            wte: take("wte.weight")?.data,
            wpe: take("wpe.weight")?.data,
            h: blocks,
            ln_f,
            lm_head,
            config,
        })
    }

    /// An empty cache for this model.
    pub fn cache(&self) -> CpuCache {
        let c = &self.config;
        let size = c.context * c.d_model;
        CpuCache {
            keys: vec![vec![0.0; size]; c.layers],
            values: vec![vec![0.0; size]; c.layers],
            len: 0,
        }
    }

    /// Reads `ids` after the positions `cache` holds, appends their keys and values to it, and
    /// returns the logits of the last of them `[V]`.
    ///
    /// # Panics
    /// When `ids` is empty, or the sequence would outgrow the context.
    pub fn forward(&self, ids: &[u32], cache: &mut CpuCache) -> Vec<f32> {
        let c = &self.config;
        let (t, d_model, offset) = (ids.len(), c.d_model, cache.len);
        assert!(
            t > 0 && offset + t <= c.context,
            "{t} new positions after {offset} in a context of {}",
            c.context
        );
        let mut x = vec![0.0f32; t * d_model];
        for (i, (&id, row)) in ids.iter().zip(x.chunks_mut(d_model)).enumerate() {
            let tok = &self.wte[id as usize * d_model..(id as usize + 1) * d_model];
            let pos = &self.wpe[(offset + i) * d_model..(offset + i + 1) * d_model];
            for j in 0..d_model {
                row[j] = tok[j] + pos[j];
            }
        }
        for (l, block) in self.h.iter().enumerate() {
            let qkv = block.c_attn.forward(&block.ln_1.forward(&x)); // [T, 3C]
            let y = self.attend(&qkv, t, offset, &mut cache.keys[l], &mut cache.values[l]);
            add(&mut x, &block.attn_proj.forward(&y));
            let mut hidden = block.c_fc.forward(&block.ln_2.forward(&x)); // [T, 4C]
            hidden
                .par_chunks_mut(1024)
                .for_each(|h| h.iter_mut().for_each(gelu_tanh));
            add(&mut x, &block.mlp_proj.forward(&hidden));
        }
        cache.len = offset + t;
        let last = self.ln_f.forward(&x[(t - 1) * d_model..]);
        self.lm_head.forward(&last)
    }

    /// Causal attention of `T` new positions: `qkv [T, 3C]` → `[T, C]`, storing the new keys and
    /// values at positions `offset..offset + T` of the layer's `[H, context, D]` buffers.
    fn attend(
        &self,
        qkv: &[f32],
        t: usize,
        offset: usize,
        keys: &mut [f32],
        values: &mut [f32],
    ) -> Vec<f32> {
        let c = &self.config;
        let (cw, heads) = (c.d_model, c.heads);
        let d = cw / heads;
        let per_head = c.context * d;
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = vec![0.0f32; t * cw];
        let mut by_head: Vec<Vec<f32>> = vec![Vec::new(); heads];
        keys.par_chunks_mut(per_head)
            .zip(values.par_chunks_mut(per_head))
            .zip(by_head.par_iter_mut())
            .enumerate()
            .for_each(|(h, ((k, v), y))| {
                for i in 0..t {
                    let row = &qkv[i * 3 * cw..(i + 1) * 3 * cw];
                    let p = offset + i;
                    k[p * d..(p + 1) * d].copy_from_slice(&row[cw + h * d..cw + (h + 1) * d]);
                    v[p * d..(p + 1) * d]
                        .copy_from_slice(&row[2 * cw + h * d..2 * cw + (h + 1) * d]);
                }
                *y = vec![0.0f32; t * d];
                let mut scores = vec![0.0f32; offset + t];
                for i in 0..t {
                    let q = &qkv[i * 3 * cw + h * d..i * 3 * cw + (h + 1) * d];
                    let n = offset + i + 1; // keys up to and including this position
                    let s = &mut scores[..n];
                    for (j, s) in s.iter_mut().enumerate() {
                        *s = dot_f32(q, &k[j * d..(j + 1) * d]) * scale;
                    }
                    let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let mut total = 0.0;
                    for s in s.iter_mut() {
                        *s = (*s - max).exp();
                        total += *s;
                    }
                    let yi = &mut y[i * d..(i + 1) * d];
                    for (j, &w) in s.iter().enumerate() {
                        let w = w / total;
                        for (o, v) in yi.iter_mut().zip(&v[j * d..(j + 1) * d]) {
                            *o += w * v;
                        }
                    }
                }
            });
        for (h, y) in by_head.iter().enumerate() {
            for i in 0..t {
                out[i * cw + h * d..i * cw + (h + 1) * d].copy_from_slice(&y[i * d..(i + 1) * d]);
            }
        }
        out
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// GPT-2's GELU, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, in place.
fn gelu_tanh(x: &mut f32) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let v = *x;
    *x = 0.5 * v * (1.0 + (SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)).tanh());
}

/// The model's linear layers' weights quantised to int8 (`group` inputs a scale; `None`: one
/// scale a row), by the weight's path in the model. Embeddings and norms stay f32.
pub fn quantize<B: Backend>(model: &Gpt<B>, group: Option<usize>) -> HashMap<String, Q8Matrix> {
    let mut out = HashMap::new();
    for t in crate::named::export(model) {
        let embedding = matches!(t.name.as_str(), "wte.weight" | "wpe.weight");
        if !t.name.ends_with(".weight") || t.shape.len() != 2 || embedding {
            continue;
        }
        let (inputs, outputs) = (t.shape[0], t.shape[1]);
        let group = group
            .filter(|g| inputs.is_multiple_of(*g))
            .unwrap_or(inputs);
        let name = t.name.clone();
        let data = t.transposed().data; // [out, in]
        out.insert(name, Q8Matrix::quantize(&data, outputs, inputs, group));
    }
    out
}

/// `model` with the weights `q8` names replaced by their dequantised values: what int8 weights
/// compute on a backend without int8 kernels.
pub fn dequantized<B: Backend>(
    model: Gpt<B>,
    q8: &HashMap<String, Q8Matrix>,
) -> Result<Gpt<B>, crate::checkpoint::CheckpointError> {
    let mut tensors: HashMap<String, NamedTensor> = crate::named::export(&model)
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    for (name, q) in q8 {
        let Some(t) = tensors.get_mut(name) else {
            continue;
        };
        if t.shape != [q.cols, q.rows] {
            return Err(crate::checkpoint::CheckpointError::Shape {
                file: "(int8 weights)".into(),
                name: name.clone(),
                expected: t.shape.clone(),
                got: vec![q.cols, q.rows],
            });
        }
        // [out, in] back to Burn's [in, out].
        t.data = NamedTensor::new(name.clone(), vec![q.rows, q.cols], q.dequantize())
            .transposed()
            .data;
    }
    crate::named::import(model, tensors, std::path::Path::new("(int8 weights)"))
}

#[cfg(test)]
mod tests;
