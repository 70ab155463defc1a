//! The GPT's causal self-attention with the modern recipe's switches, as the Burn module
//! `CausalSelfAttention` has them: grouped key/value heads (GQA), QK-norm, RoPE (rotate-half) and
//! a document mask.
//!
//! The fused projection `c_attn [C, C + 2·KV·d]` makes `q | k | v`: `H` query heads and `KV` key
//! and value heads of width `d = C/H`; query head `h` reads key/value head `h / (H/KV)`. QK-norm
//! (RMSNorm per head vector, one gain per side, [`super::qk_norm`]) comes first, then RoPE
//! ([`super::rope`]) rotates each head vector by its position; then the scores
//! `S = Q·Kᵀ/√d`, masked where a key lies in the query's future or (with documents) in another
//! document, `P = softmax(S)`, `O = P·V`, and `c_proj [C, C]`.
//!
//! Going back, the core is attention's (`dV = Pᵀ·dO`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`,
//! `dQ = dS·K/√d`, `dK = dSᵀ·Q/√d`), with one new rule: a key/value head shared by a group of query
//! heads is blamed by all of them, so its `dK` and `dV` are the sums over the group (added, not
//! assigned). RoPE's backward is the rotation by minus the angle (a rotation's transpose is its
//! inverse), applied before QK-norm's. Unlike plain attention, the key bias now gets a gradient:
//! adding one vector to every key before a rotation that differs by position, and a norm that
//! rescales each key, no longer adds a constant to each row of scores.

use super::attention::{block, put_block, softmax_backward};
use super::rms_norm::RmsNormCache;
use super::rope::{self, Pairing};
use super::{Mat, linear, qk_norm, softmax_xent};

/// Weights, Burn's `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct ModernAttentionParams {
    /// `[C, C + 2·KV·d]`: q in columns `0..C`, k in `C..C + KV·d`, v after.
    pub c_attn_w: Mat,
    /// `[C + 2·KV·d]`.
    pub c_attn_b: Vec<f64>,
    /// `[C, C]`.
    pub c_proj_w: Mat,
    /// `[C]`.
    pub c_proj_b: Vec<f64>,
    /// QK-norm gains `[d]` for queries and keys, when on.
    pub q_gain: Option<Vec<f64>>,
    pub k_gain: Option<Vec<f64>>,
}

/// The switches and sizes.
#[derive(Clone, Debug)]
pub struct ModernAttentionShape {
    pub batch: usize,
    pub seq: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `KV`, dividing `H`.
    pub kv_heads: usize,
    /// RoPE base, or no rotation.
    pub rope_base: Option<f64>,
    /// QK-norm's epsilon (used when the params carry gains).
    pub qk_eps: f64,
    /// A document id per token, `[B·T]`: a query sees only keys of its own document.
    pub docs: Option<Vec<usize>>,
}

/// What the backward pass needs.
#[derive(Clone, Debug)]
pub struct ModernAttentionCache {
    pub x: Mat,
    /// Queries `[B·T, C]` and keys `[B·T, KV·d]` as the scores saw them (normed and rotated).
    pub q: Mat,
    pub k: Mat,
    /// Values `[B·T, KV·d]`.
    pub v: Mat,
    pub q_norm: Option<RmsNormCache>,
    pub k_norm: Option<RmsNormCache>,
    /// Attention weights `[T, T]` at index `b·H + h`.
    pub probs: Vec<Mat>,
    /// The heads' outputs `[B·T, C]`, `c_proj`'s input.
    pub att: Mat,
}

/// Gradients of [`ModernAttentionParams`], plus `dx`.
#[derive(Clone, Debug)]
pub struct ModernAttentionGrads {
    pub dx: Mat,
    pub c_attn_w: Mat,
    pub c_attn_b: Vec<f64>,
    pub c_proj_w: Mat,
    pub c_proj_b: Vec<f64>,
    pub q_gain: Option<Vec<f64>>,
    pub k_gain: Option<Vec<f64>>,
}

/// Columns `from..from + width` of every row.
fn columns(m: &Mat, from: usize, width: usize) -> Mat {
    let mut out = Mat::zeros(m.rows, width);
    for r in 0..m.rows {
        out.data[r * width..(r + 1) * width]
            .copy_from_slice(&m.data[r * m.cols + from..r * m.cols + from + width]);
    }
    out
}

/// Whether query `i` may not read key `j` of sequence `b`.
fn hidden(s: &ModernAttentionShape, b: usize, i: usize, j: usize) -> bool {
    j > i
        || s.docs
            .as_ref()
            .is_some_and(|d| d[b * s.seq + i] != d[b * s.seq + j])
}

/// `x [B·T, C]` → `y [B·T, C]`.
pub fn forward(
    x: &Mat,
    p: &ModernAttentionParams,
    s: &ModernAttentionShape,
) -> (Mat, ModernAttentionCache) {
    let c = x.cols;
    assert_eq!(
        x.rows,
        s.batch * s.seq,
        "modern_attention: x must have B·T rows"
    );
    assert!(
        s.kv_heads > 0 && s.heads.is_multiple_of(s.kv_heads) && c.is_multiple_of(s.heads),
        "modern_attention: KV must divide H, and H must divide C"
    );
    let d = c / s.heads;
    let kvd = s.kv_heads * d;
    assert_eq!(
        (p.c_attn_w.rows, p.c_attn_w.cols),
        (c, c + 2 * kvd),
        "modern_attention: c_attn_w must be [C, C + 2·KV·d]"
    );
    let qkv = linear::forward(x, &p.c_attn_w, &p.c_attn_b);
    let (mut q, mut k, v) = (
        columns(&qkv, 0, c),
        columns(&qkv, c, kvd),
        columns(&qkv, c + kvd, kvd),
    );
    let (mut q_norm, mut k_norm) = (None, None);
    if let (Some(qg), Some(kg)) = (&p.q_gain, &p.k_gain) {
        let (qn, qc) = qk_norm::forward(&q, s.heads, qg, s.qk_eps);
        let (kn, kc) = qk_norm::forward(&k, s.kv_heads, kg, s.qk_eps);
        (q, k, q_norm, k_norm) = (qn, kn, Some(qc), Some(kc));
    }
    if let Some(base) = s.rope_base {
        q = rope::apply_seq(&q, s.seq, s.heads, base, Pairing::Halves, false);
        k = rope::apply_seq(&k, s.seq, s.kv_heads, base, Pairing::Halves, false);
    }
    let group = s.heads / s.kv_heads;
    let scale = 1.0 / (d as f64).sqrt();
    let mut att = Mat::zeros(x.rows, c);
    let mut probs = Vec::with_capacity(s.batch * s.heads);
    for b in 0..s.batch {
        for h in 0..s.heads {
            let g = h / group;
            let qh = block(&q, b, s.seq, h * d, d);
            let kh = block(&k, b, s.seq, g * d, d);
            let vh = block(&v, b, s.seq, g * d, d);
            let mut sc = qh.matmul_a_bt(&kh);
            for i in 0..s.seq {
                for j in 0..s.seq {
                    let e = sc.at_mut(i, j);
                    // A query always sees itself, so every row keeps a finite maximum.
                    *e = if hidden(s, b, i, j) {
                        f64::NEG_INFINITY
                    } else {
                        *e * scale
                    };
                }
            }
            let pm = softmax_xent::softmax(&sc);
            put_block(&mut att, b, s.seq, h * d, &pm.matmul(&vh));
            probs.push(pm);
        }
    }
    let y = linear::forward(&att, &p.c_proj_w, &p.c_proj_b);
    let cache = ModernAttentionCache {
        x: x.clone(),
        q,
        k,
        v,
        q_norm,
        k_norm,
        probs,
        att,
    };
    (y, cache)
}

/// Given `dy [B·T, C]`, the gradients with respect to `x` and every weight.
pub fn backward(
    cache: &ModernAttentionCache,
    p: &ModernAttentionParams,
    s: &ModernAttentionShape,
    dy: &Mat,
) -> ModernAttentionGrads {
    let c = cache.x.cols;
    let d = c / s.heads;
    let kvd = s.kv_heads * d;
    let group = s.heads / s.kv_heads;
    let scale = 1.0 / (d as f64).sqrt();
    let proj = linear::backward(&cache.att, &p.c_proj_w, dy);
    let mut dq = Mat::zeros(cache.x.rows, c);
    let mut dk = Mat::zeros(cache.x.rows, kvd);
    let mut dv = Mat::zeros(cache.x.rows, kvd);
    for b in 0..s.batch {
        for h in 0..s.heads {
            let g = h / group;
            let qh = block(&cache.q, b, s.seq, h * d, d);
            let kh = block(&cache.k, b, s.seq, g * d, d);
            let vh = block(&cache.v, b, s.seq, g * d, d);
            let pm = &cache.probs[b * s.heads + h];
            let d_o = block(&proj.dx, b, s.seq, h * d, d);
            let mut ds = softmax_backward(pm, &d_o.matmul_a_bt(&vh));
            ds.data.iter_mut().for_each(|e| *e *= scale);
            put_block(&mut dq, b, s.seq, h * d, &ds.matmul(&kh));
            // Every query head of the group blames the shared key and value head: sum.
            let add = |m: &mut Mat, blk: &Mat| {
                let mut sum = block(m, b, s.seq, g * d, d);
                sum.data
                    .iter_mut()
                    .zip(&blk.data)
                    .for_each(|(a, v)| *a += v);
                put_block(m, b, s.seq, g * d, &sum);
            };
            add(&mut dk, &ds.matmul_at_b(&qh));
            add(&mut dv, &pm.matmul_at_b(&d_o));
        }
    }
    if let Some(base) = s.rope_base {
        dq = rope::apply_seq(&dq, s.seq, s.heads, base, Pairing::Halves, true);
        dk = rope::apply_seq(&dk, s.seq, s.kv_heads, base, Pairing::Halves, true);
    }
    let (mut q_gain, mut k_gain) = (None, None);
    if let (Some(qc), Some(kc), Some(qg), Some(kg)) =
        (&cache.q_norm, &cache.k_norm, &p.q_gain, &p.k_gain)
    {
        let gq = qk_norm::backward(qc, qg, &dq, s.heads);
        let gk = qk_norm::backward(kc, kg, &dk, s.kv_heads);
        (dq, dk, q_gain, k_gain) = (gq.dx, gk.dx, Some(gq.dgamma), Some(gk.dgamma));
    }
    let mut dqkv = Mat::zeros(cache.x.rows, c + 2 * kvd);
    for r in 0..cache.x.rows {
        let row = &mut dqkv.data[r * (c + 2 * kvd)..(r + 1) * (c + 2 * kvd)];
        row[..c].copy_from_slice(dq.row(r));
        row[c..c + kvd].copy_from_slice(dk.row(r));
        row[c + kvd..].copy_from_slice(dv.row(r));
    }
    let inp = linear::backward(&cache.x, &p.c_attn_w, &dqkv);
    ModernAttentionGrads {
        dx: inp.dx,
        c_attn_w: inp.dw,
        c_attn_b: inp.db,
        c_proj_w: proj.dw,
        c_proj_b: proj.db,
        q_gain,
        k_gain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, f32_exact, numerical_grad, randn};

    const B: usize = 2;
    const T: usize = 5;
    // Head width d = 6: even (RoPE pairs coordinates), √6 not exact in f32 (Burn's f32 step in
    // the gradient of a division by a scalar shows), and KV·d = 12 is not KV + d = 8 (so a `*`
    // mistaken for `+` in the key/value width cannot pass, as it would at KV = d = 2).
    const C: usize = 24;
    const H: usize = 4;
    const KV: usize = 2;
    const KVD: usize = KV * C / H;
    const EPS: f64 = 1e-6;

    /// A telling point: inputs of std 3, weights of std 0.5, gains 1 ± 0.5, biases of std 0.5
    /// (the key bias matters here), RoPE at a small base so positions 0–4 turn through whole
    /// radians, and two documents in the second sequence. Every value f32-exact, for the Burn
    /// parity test.
    pub(crate) fn point(docs: bool) -> (Mat, ModernAttentionParams, ModernAttentionShape) {
        let gain = |seed| f32_exact(randn(seed, C / H, 0.5).iter().map(|v| 1.0 + v).collect());
        let p = ModernAttentionParams {
            c_attn_w: Mat::new(
                C,
                C + 2 * KVD,
                f32_exact(randn(601, C * (C + 2 * KVD), 0.5)),
            ),
            c_attn_b: f32_exact(randn(602, C + 2 * KVD, 0.5)),
            c_proj_w: Mat::new(C, C, f32_exact(randn(603, C * C, 0.5))),
            c_proj_b: f32_exact(randn(604, C, 0.5)),
            q_gain: Some(gain(605)),
            k_gain: Some(gain(606)),
        };
        let x = Mat::new(B * T, C, f32_exact(randn(607, B * T * C, 3.0)));
        let s = ModernAttentionShape {
            batch: B,
            seq: T,
            heads: H,
            kv_heads: KV,
            rope_base: Some(100.0),
            qk_eps: EPS,
            docs: docs.then(|| vec![0, 0, 0, 0, 0, 0, 0, 1, 1, 1]),
        };
        (x, p, s)
    }

    fn loss(x: &Mat, p: &ModernAttentionParams, s: &ModernAttentionShape, dy: &Mat) -> f64 {
        let (y, _) = forward(x, p, s);
        y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
    }

    /// Every gradient against a centred difference, for the point with the given switches.
    fn check(x: &Mat, p: &ModernAttentionParams, s: &ModernAttentionShape, h: f64) {
        let dy = Mat::new(B * T, C, randn(608, B * T * C, 1.0));
        let (_, cache) = forward(x, p, s);
        let g = backward(&cache, p, s, &dy);
        let num = |field: &dyn Fn(&mut ModernAttentionParams) -> &mut Vec<f64>| {
            let mut q = p.clone();
            let start = field(&mut q).clone();
            numerical_grad(&start, h, |v| {
                field(&mut q).copy_from_slice(v);
                loss(x, &q, s, &dy)
            })
        };
        let nx = numerical_grad(&x.data, h, |v| {
            loss(&Mat::new(x.rows, x.cols, v.to_vec()), p, s, &dy)
        });
        assert_close("dx", &g.dx.data, &nx, 1e-6);
        assert_close(
            "c_attn_w",
            &g.c_attn_w.data,
            &num(&|p| &mut p.c_attn_w.data),
            1e-6,
        );
        assert_close("c_attn_b", &g.c_attn_b, &num(&|p| &mut p.c_attn_b), 1e-6);
        assert_close(
            "c_proj_w",
            &g.c_proj_w.data,
            &num(&|p| &mut p.c_proj_w.data),
            1e-6,
        );
        assert_close("c_proj_b", &g.c_proj_b, &num(&|p| &mut p.c_proj_b), 1e-6);
        if p.q_gain.is_some() {
            let gq = g.q_gain.as_ref().expect("a q gain gradient");
            let gk = g.k_gain.as_ref().expect("a k gain gradient");
            assert_close(
                "q_gain",
                gq,
                &num(&|p| p.q_gain.as_mut().expect("gain")),
                1e-6,
            );
            assert_close(
                "k_gain",
                gk,
                &num(&|p| p.k_gain.as_mut().expect("gain")),
                1e-6,
            );
        }
    }

    #[test]
    fn modern_attention_backward_matches_numerical_all_switches_on() {
        let (x, p, s) = point(true);
        // The softmax and the norms are smooth, but q and k pass through both: at h = 1e-3 the
        // O(h²) truncation reached ~1e-6 of the gradient on the attention weights, so h = 1e-4
        // (measured at this point: 2.0e-8 at worst; rounding ~1e-16·|L|/h is about 1e-11).
        check(&x, &p, &s, 1e-4);
    }

    #[test]
    fn modern_attention_backward_matches_numerical_plain_gqa() {
        // No norm, no rotation, no documents: grouped heads alone (the sum over the group).
        let (x, mut p, mut s) = point(false);
        (p.q_gain, p.k_gain, s.rope_base) = (None, None, None);
        // Without QK-norm the scores are as large as the inputs make them and the softmax is
        // sharp: at a narrower point (C = 8) h = 1e-4 truncated at 9.8e-7 of c_attn_w's
        // gradient, the tolerance's edge. h = 1e-5 cuts truncation a hundredfold (measured at
        // this point: 7.7e-8 at worst); rounding stays near 1e-10.
        check(&x, &p, &s, 1e-5);
    }

    #[test]
    fn the_key_bias_matters_once_keys_are_rotated_or_normed() {
        // Plain attention's key bias gets exactly no gradient (attention.rs); here it must get one.
        let (x, p, s) = point(false);
        let dy = Mat::new(B * T, C, randn(609, B * T * C, 1.0));
        let (_, cache) = forward(&x, &p, &s);
        let g = backward(&cache, &p, &s, &dy);
        let key_bias = &g.c_attn_b[C..C + KVD];
        let size = key_bias.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(size > 1e-3, "key bias gradient {key_bias:?}");
    }

    #[test]
    fn a_token_cannot_see_across_a_document_boundary() {
        // Changing the first document of sequence 1 (tokens 0–1 of it) leaves the second
        // document's outputs (tokens 2–4) unchanged, to the bit.
        let (x, p, s) = point(true);
        let (y, _) = forward(&x, &p, &s);
        let mut x2 = x.clone();
        for r in T..T + 2 {
            for c in 0..C {
                *x2.at_mut(r, c) += 1.0;
            }
        }
        let (y2, _) = forward(&x2, &p, &s);
        for r in T + 2..2 * T {
            assert_eq!(y.row(r), y2.row(r), "row {r}");
        }
        assert_ne!(y.row(T + 1), y2.row(T + 1));
    }
}

#[cfg(test)]
pub(crate) mod burn_parity {
    use super::tests::point;
    use super::*;
    use crate::attention::CausalSelfAttentionConfig;
    use crate::testing::{AB, assert_close, grads_by_path, load, randn, tensor, to_vec};
    use burn::prelude::*;

    /// The Burn document mask `[B, T, T]` (true where the key is in another document) for one
    /// document id per token, `[B·T]`.
    pub(crate) fn doc_mask(docs: &[usize], b: usize, t: usize) -> Tensor<AB, 3, Bool> {
        let hide: Vec<bool> = (0..b * t * t)
            .map(|e| {
                let (bi, i, j) = (e / (t * t), e / t % t, e % t);
                docs[bi * t + i] != docs[bi * t + j]
            })
            .collect();
        Tensor::from_data(TensorData::new(hide, [b, t, t]), &Default::default())
    }

    /// The Burn module with the point's switches, loaded with the reference's weights: output and
    /// every gradient, f64 on both sides.
    fn parity(x: &Mat, p: &ModernAttentionParams, s: &ModernAttentionShape, tol: f64) {
        let (b, t, c) = (s.batch, s.seq, x.cols);
        let kvd = s.kv_heads * c / s.heads;
        let d = c / s.heads;
        let (attn_shape, bias_shape, proj_shape, gain_shape) =
            ([c, c + 2 * kvd], [c + 2 * kvd], [c, c], [d]);
        let mut weights: Vec<(&str, &[usize], &[f64])> = vec![
            ("c_attn.weight", &attn_shape, &p.c_attn_w.data),
            ("c_attn.bias", &bias_shape, &p.c_attn_b),
            ("c_proj.weight", &proj_shape, &p.c_proj_w.data),
            ("c_proj.bias", &proj_shape[..1], &p.c_proj_b),
        ];
        if let (Some(qg), Some(kg)) = (&p.q_gain, &p.k_gain) {
            weights.push(("q_norm.gamma", &gain_shape, qg));
            weights.push(("k_norm.gamma", &gain_shape, kg));
        }
        let m = load(
            CausalSelfAttentionConfig::new(c, s.heads)
                .with_kv_heads(Some(s.kv_heads))
                .with_rope_base(s.rope_base)
                .with_qk_norm(p.q_gain.is_some())
                .with_qk_norm_eps(s.qk_eps)
                .init::<AB>(&Default::default()),
            &weights,
        );
        let mask = s.docs.as_ref().map(|docs| doc_mask(docs, b, t));
        let xt = tensor::<AB, 3>(x.data.clone(), [b, t, c]).require_grad();
        let y = m.forward(xt.clone(), mask);
        let (want, cache) = forward(x, p, s);
        assert_close("y", &to_vec(y.clone()), &want.data, tol);
        let dy = Mat::new(b * t, c, randn(610, b * t * c, 1.0));
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, t, c]))
            .sum()
            .backward();
        let g = backward(&cache, p, s, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, tol);
        let got = grads_by_path(&m, &grads);
        let mut want = vec![
            ("c_attn.weight", &g.c_attn_w.data),
            ("c_attn.bias", &g.c_attn_b),
            ("c_proj.weight", &g.c_proj_w.data),
            ("c_proj.bias", &g.c_proj_b),
        ];
        if let (Some(qg), Some(kg)) = (&g.q_gain, &g.k_gain) {
            want.push(("q_norm.gamma", qg));
            want.push(("k_norm.gamma", kg));
        }
        assert_eq!(got.len(), want.len(), "parameters: {:?}", got.keys());
        for (name, w) in want {
            assert_close(name, &got[name], w, tol);
        }
    }

    #[test]
    fn modern_attention_matches_burn_autodiff() {
        let (x, p, s) = point(true);
        parity(&x, &p, &s, 1e-11);
    }
}
