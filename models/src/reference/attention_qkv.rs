//! Non-causal multi-head self-attention with separate projections, as diffusers' `Attention`
//! (`attn1` of a `BasicTransformerBlock`) holds them: `to_q`, `to_k`, `to_v` each `[D, D]` + bias,
//! and `to_out.0` `[D, D]` + bias. Head `h` owns columns `h·d..(h+1)·d` of q, k and v
//! (`d = D/H`), scores are scaled by `1/√d`.
//!
//! The core is the same as in `attention.rs` (GPT-2's fused layout): per sequence and head,
//! `S = Q·Kᵀ/√d`, `P = softmax(S)`, `O = P·V`, and going back `dV = Pᵀ·dO`, `dP = dO·Vᵀ`,
//! `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = dS·K/√d`, `dK = dSᵀ·Q/√d`. Only the bookkeeping
//! differs: three Linears instead of one fused `[D, 3D]` one, and no mask, so every query sees
//! every key of its own sequence and none of another. As there, the key bias gets no gradient: it
//! adds one constant to each row of scores, which a softmax cannot see.

use super::attention::{block, put_block, softmax_backward};
use super::{Mat, linear, softmax_xent};

/// diffusers' `attn1.*` weights, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct AttentionQkvParams {
    /// `[D, D]`.
    pub to_q_w: Mat,
    /// `[D]`.
    pub to_q_b: Vec<f64>,
    pub to_k_w: Mat,
    pub to_k_b: Vec<f64>,
    pub to_v_w: Mat,
    pub to_v_b: Vec<f64>,
    /// `to_out.0`, `[D, D]`.
    pub to_out_w: Mat,
    pub to_out_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct AttentionQkvCache {
    /// The input `[B·L, D]`.
    pub x: Mat,
    /// Projections `[B·L, D]` each.
    pub q: Mat,
    pub k: Mat,
    pub v: Mat,
    /// Attention weights `[L, L]`, one per (sequence, head), at index `b·H + h`.
    pub probs: Vec<Mat>,
    /// The heads' outputs, concatenated: `[B·L, D]`, the input of `to_out`.
    pub att: Mat,
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
}

/// Gradients of [`AttentionQkvParams`], plus `dx`.
#[derive(Clone, Debug)]
pub struct AttentionQkvGrads {
    pub dx: Mat,
    pub to_q_w: Mat,
    pub to_q_b: Vec<f64>,
    pub to_k_w: Mat,
    pub to_k_b: Vec<f64>,
    pub to_v_w: Mat,
    pub to_v_b: Vec<f64>,
    pub to_out_w: Mat,
    pub to_out_b: Vec<f64>,
}

/// `x [B·L, D]` → `y [B·L, D]`: `batch` sequences of `seq` tokens, each attending only within
/// itself, all keys visible.
pub fn forward(
    x: &Mat,
    p: &AttentionQkvParams,
    batch: usize,
    seq: usize,
    heads: usize,
) -> (Mat, AttentionQkvCache) {
    let dim = x.cols;
    assert_eq!(x.rows, batch * seq, "attention_qkv: x must have B·L rows");
    assert!(
        heads > 0 && dim.is_multiple_of(heads),
        "attention_qkv: {heads} heads do not divide {dim}"
    );
    for w in [&p.to_q_w, &p.to_k_w, &p.to_v_w, &p.to_out_w] {
        assert_eq!(
            (w.rows, w.cols),
            (dim, dim),
            "attention_qkv: weights are [D, D]"
        );
    }
    let d = dim / heads;
    let scale = 1.0 / (d as f64).sqrt();
    let q = linear::forward(x, &p.to_q_w, &p.to_q_b);
    let k = linear::forward(x, &p.to_k_w, &p.to_k_b);
    let v = linear::forward(x, &p.to_v_w, &p.to_v_b);
    let mut att = Mat::zeros(x.rows, dim);
    let mut probs = Vec::with_capacity(batch * heads);
    for b in 0..batch {
        for h in 0..heads {
            let qh = block(&q, b, seq, h * d, d);
            let kh = block(&k, b, seq, h * d, d);
            let vh = block(&v, b, seq, h * d, d);
            let mut s = qh.matmul_a_bt(&kh);
            s.data.iter_mut().for_each(|e| *e *= scale);
            let pm = softmax_xent::softmax(&s);
            put_block(&mut att, b, seq, h * d, &pm.matmul(&vh));
            probs.push(pm);
        }
    }
    let y = linear::forward(&att, &p.to_out_w, &p.to_out_b);
    let cache = AttentionQkvCache {
        x: x.clone(),
        q,
        k,
        v,
        probs,
        att,
        batch,
        seq,
        heads,
    };
    (y, cache)
}

/// Given `dy [B·L, D]`, the gradients with respect to `x` and every weight.
pub fn backward(cache: &AttentionQkvCache, p: &AttentionQkvParams, dy: &Mat) -> AttentionQkvGrads {
    let (seq, heads) = (cache.seq, cache.heads);
    let dim = cache.x.cols;
    let d = dim / heads;
    let scale = 1.0 / (d as f64).sqrt();
    let out = linear::backward(&cache.att, &p.to_out_w, dy);
    let mut dq = Mat::zeros(cache.x.rows, dim);
    let mut dk = Mat::zeros(cache.x.rows, dim);
    let mut dv = Mat::zeros(cache.x.rows, dim);
    for b in 0..cache.batch {
        for h in 0..heads {
            let qh = block(&cache.q, b, seq, h * d, d);
            let kh = block(&cache.k, b, seq, h * d, d);
            let vh = block(&cache.v, b, seq, h * d, d);
            let pm = &cache.probs[b * heads + h];
            let d_o = block(&out.dx, b, seq, h * d, d);
            let mut ds = softmax_backward(pm, &d_o.matmul_a_bt(&vh));
            // The forward pass scaled the scores, so their blame is scaled the same way.
            ds.data.iter_mut().for_each(|e| *e *= scale);
            put_block(&mut dq, b, seq, h * d, &ds.matmul(&kh));
            put_block(&mut dk, b, seq, h * d, &ds.matmul_at_b(&qh));
            put_block(&mut dv, b, seq, h * d, &pm.matmul_at_b(&d_o));
        }
    }
    let gq = linear::backward(&cache.x, &p.to_q_w, &dq);
    let gk = linear::backward(&cache.x, &p.to_k_w, &dk);
    let gv = linear::backward(&cache.x, &p.to_v_w, &dv);
    // x fed all three projections, so its blame is the sum of theirs.
    let dx = Mat::new(
        gq.dx.rows,
        gq.dx.cols,
        gq.dx
            .data
            .iter()
            .zip(&gk.dx.data)
            .zip(&gv.dx.data)
            .map(|((a, b), c)| a + b + c)
            .collect(),
    );
    AttentionQkvGrads {
        dx,
        to_q_w: gq.dw,
        to_q_b: gq.db,
        to_k_w: gk.dw,
        to_k_b: gk.db,
        to_v_w: gv.dw,
        to_v_b: gv.db,
        to_out_w: out.dw,
        to_out_b: out.db,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    const B: usize = 2;
    const L: usize = 5;
    const D: usize = 8;
    const H: usize = 2;

    /// As in `attention.rs`: a projection weight enters each score multiplied by an input of
    /// size ~3 and a query or key of size ~3, so L''' is large in the weights. At h = 1e-4 the
    /// O(h²) truncation measured up to 8.2e-7 of the gradient (grouped_attention.rs, Space,
    /// to_k.w), too near the tolerance; h = 5e-5 cuts it fourfold (measured 2.1e-7 there, 2.3e-8
    /// here), while rounding (1e-16·|L|/h) stays near 1e-11.
    pub(crate) const STEP: f64 = 5e-5;
    /// 1e-6 sits above the worst measured figure and is a millionth of a lost `1/√d` (a factor
    /// √4 = 2 here).
    pub(crate) const TOL: f64 = 1e-6;

    /// Weights of std 0.3–0.5 and non-zero biases, `dim × dim`.
    pub(crate) fn params(dim: usize, seed: u64) -> AttentionQkvParams {
        let w = |s: u64, std: f64| Mat::new(dim, dim, randn(s, dim * dim, std));
        AttentionQkvParams {
            to_q_w: w(seed, 0.3),
            to_q_b: randn(seed + 1, dim, 0.5),
            to_k_w: w(seed + 2, 0.3),
            to_k_b: randn(seed + 3, dim, 0.5),
            to_v_w: w(seed + 4, 0.5),
            to_v_b: randn(seed + 5, dim, 0.5),
            to_out_w: w(seed + 6, 0.5),
            to_out_b: randn(seed + 7, dim, 0.5),
        }
    }

    /// The centred difference of `loss` along the field `field` picks out, with step `h`.
    pub(crate) fn numeric<P: Clone>(
        p: &P,
        h: f64,
        field: impl Fn(&mut P) -> &mut [f64],
        loss: impl Fn(&P) -> f64,
    ) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, h, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    pub(crate) type Field = fn(&mut AttentionQkvParams) -> &mut [f64];

    /// Every weight tensor, by name, with its analytic gradient. The key bias is left out: its
    /// gradient is zero in theory and rounding noise in practice (checked separately).
    pub(crate) fn weight_checks(g: &AttentionQkvGrads) -> Vec<(&'static str, Vec<f64>, Field)> {
        vec![
            ("to_q.w", g.to_q_w.data.clone(), |p| &mut p.to_q_w.data[..]),
            ("to_q.b", g.to_q_b.clone(), |p| &mut p.to_q_b[..]),
            ("to_k.w", g.to_k_w.data.clone(), |p| &mut p.to_k_w.data[..]),
            ("to_v.w", g.to_v_w.data.clone(), |p| &mut p.to_v_w.data[..]),
            ("to_v.b", g.to_v_b.clone(), |p| &mut p.to_v_b[..]),
            ("to_out.w", g.to_out_w.data.clone(), |p| {
                &mut p.to_out_w.data[..]
            }),
            ("to_out.b", g.to_out_b.clone(), |p| &mut p.to_out_b[..]),
        ]
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn attention_qkv_backward_matches_numerical() {
        let p = params(D, 251);
        let x = Mat::new(B * L, D, randn(259, B * L * D, 3.0));
        let dy = Mat::new(B * L, D, randn(260, B * L * D, 1.0));
        let loss = |x: &Mat, p: &AttentionQkvParams| dot(&forward(x, p, B, L, H).0, &dy);
        let (_, cache) = forward(&x, &p, B, L, H);
        let g = backward(&cache, &p, &dy);
        let nx = numeric(&x, STEP, |x| &mut x.data[..], |x| loss(x, &p));
        let r = worst_rel(&g.dx.data, &nx);
        println!("attention_qkv dx: worst relative difference {r:.2e}");
        assert!(r <= TOL, "dx: {r:.3e}");
        for (name, a, field) in weight_checks(&g) {
            let n = numeric(&p, STEP, field, |p| loss(&x, p));
            let r = worst_rel(&a, &n);
            println!("attention_qkv {name}: worst relative difference {r:.2e}");
            assert!(r <= TOL, "{name}: {r:.3e}");
        }
        let scale = g.to_q_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let kb = g.to_k_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        println!("attention_qkv to_k.b: max |g| {kb:.1e} of scale {scale:.1e}");
        assert!(kb < 1e-12 * scale, "key bias gradient {:?}", g.to_k_b);
    }

    #[test]
    fn sequences_do_not_see_each_other() {
        // Changing sequence 1 leaves sequence 0's outputs bit-identical; every row of sequence 1
        // changes (no mask: even its first token sees the changed later ones).
        let p = params(D, 251);
        let x = Mat::new(B * L, D, randn(261, B * L * D, 3.0));
        let mut x2 = x.clone();
        *x2.at_mut(L + L - 1, 0) += 1.0;
        let (y, _) = forward(&x, &p, B, L, H);
        let (y2, _) = forward(&x2, &p, B, L, H);
        for r in 0..B * L {
            if r < L {
                assert_eq!(y.row(r), y2.row(r));
            } else {
                assert_ne!(y.row(r), y2.row(r));
            }
        }
    }
}
