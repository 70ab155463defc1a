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

#[cfg(test)]
pub(crate) mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, randn};

    pub(crate) fn exact_params(d: usize, seed: u64) -> AttentionQkvParams {
        let m = |s: u64| Mat::new(d, d, f32_exact(randn(s, d * d, 0.5)));
        let v = |s: u64| f32_exact(randn(s, d, 0.5));
        AttentionQkvParams {
            to_q_w: m(seed),
            to_q_b: v(seed + 1),
            to_k_w: m(seed + 2),
            to_k_b: v(seed + 3),
            to_v_w: m(seed + 4),
            to_v_b: v(seed + 5),
            to_out_w: m(seed + 6),
            to_out_b: v(seed + 7),
        }
    }

    /// The parameters under their Burn paths, with `prefix`.
    pub(crate) fn named(
        p: &AttentionQkvParams,
        prefix: &str,
    ) -> Vec<(String, Vec<usize>, Vec<f64>)> {
        let d = p.to_q_b.len();
        let mut out = Vec::new();
        for (name, w, b) in [
            ("to_q", &p.to_q_w, &p.to_q_b),
            ("to_k", &p.to_k_w, &p.to_k_b),
            ("to_v", &p.to_v_w, &p.to_v_b),
            ("to_out", &p.to_out_w, &p.to_out_b),
        ] {
            out.push((format!("{prefix}{name}.weight"), vec![d, d], w.data.clone()));
            out.push((format!("{prefix}{name}.bias"), vec![d], b.clone()));
        }
        out
    }

    /// The reference gradients under the same paths.
    pub(crate) fn named_grads(g: &AttentionQkvGrads, prefix: &str) -> Vec<(String, Vec<f64>)> {
        vec![
            (format!("{prefix}to_q.weight"), g.to_q_w.data.clone()),
            (format!("{prefix}to_q.bias"), g.to_q_b.clone()),
            (format!("{prefix}to_k.weight"), g.to_k_w.data.clone()),
            (format!("{prefix}to_k.bias"), g.to_k_b.clone()),
            (format!("{prefix}to_v.weight"), g.to_v_w.data.clone()),
            (format!("{prefix}to_v.bias"), g.to_v_b.clone()),
            (format!("{prefix}to_out.weight"), g.to_out_w.data.clone()),
            (format!("{prefix}to_out.bias"), g.to_out_b.clone()),
        ]
    }

    /// Compares named gradients; the key bias's true gradient is exactly zero, so it is checked
    /// to be negligible rather than compared relatively.
    pub(crate) fn compare(
        got: &std::collections::HashMap<String, Vec<f64>>,
        want: &[(String, Vec<f64>)],
        tol: f64,
    ) {
        for (name, w) in want {
            let g = &got[name];
            if name.ends_with("to_k.bias") {
                let q = &got[&name.replace("to_k.bias", "to_q.bias")];
                let scale = q.iter().fold(0f64, |m, v| m.max(v.abs())).max(1.0);
                assert!(
                    g.iter().chain(w).all(|v| v.abs() < 1e-11 * scale),
                    "{name}: key bias gradient"
                );
            } else {
                assert_close(name, g, w, tol);
            }
        }
    }

    pub(crate) fn refs(named: &[(String, Vec<usize>, Vec<f64>)]) -> Vec<(&str, &[usize], &[f64])> {
        named
            .iter()
            .map(|(n, s, d)| (n.as_str(), &s[..], &d[..]))
            .collect()
    }

    #[test]
    fn attention_qkv_matches_burn_autodiff() {
        use crate::testing::{grads_by_path, load, tensor, to_vec};
        let (b, l, d, h) = (2, 5, 8, 2);
        let p = exact_params(d, 431);
        let x = Mat::new(b * l, d, f32_exact(randn(439, b * l * d, 3.0)));
        let dy = Mat::new(b * l, d, randn(440, b * l * d, 1.0));
        let named = named(&p, "");
        let m = load(
            crate::dit_attention::DitAttentionConfig::new(d, h).init::<AB>(&Default::default()),
            &refs(&named),
        );
        let xt = tensor::<AB, 3>(x.data.clone(), [b, l, d]).require_grad();
        let y = m.forward(xt.clone());
        let (want, cache) = forward(&x, &p, b, l, h);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, l, d]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        compare(&grads_by_path(&m, &grads), &named_grads(&g, ""), 1e-11);
    }
}
