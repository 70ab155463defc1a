//! Multi-head self-attention in GPT-2's layout: one fused projection `c_attn [C, 3C]` makes
//! `q | k | v`, head `h` owns columns `h·D..(h+1)·D` of each (`D = C/H`), and `c_proj [C, C]`
//! mixes the concatenated heads.
//!
//! Per sequence and head, `S = Q·Kᵀ/√D`, `P = softmax(S)` by rows (key positions after the query
//! set to −∞ when causal), `O = P·V`. Going back, each product passes blame to each factor through
//! the other: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, and, the score being `Q·Kᵀ` scaled, `dQ = dS·K/√D`,
//! `dK = dSᵀ·Q/√D` (a key is blamed by every query that looked at it, hence the transpose). A
//! softmax cannot see a shift of its row, so its backward pass removes the row's p-weighted mean
//! blame: `dS = P ⊙ (dP − rowsum(P ⊙ dP))`. Masked entries have `p = 0` and get no blame, so no
//! gradient flows from a position to an earlier one's future. For the same reason the key bias
//! gets none at all: adding one vector to every key adds a constant to each row of scores.

use super::{Mat, linear, softmax_xent};

/// The weights of one attention layer, in Burn's `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct AttentionParams {
    /// `[C, 3C]`: columns `0..C` make q, `C..2C` k, `2C..3C` v.
    pub c_attn_w: Mat,
    /// `[3C]`.
    pub c_attn_b: Vec<f64>,
    /// `[C, C]`.
    pub c_proj_w: Mat,
    /// `[C]`.
    pub c_proj_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct AttentionCache {
    /// The input `[B·T, C]`.
    pub x: Mat,
    /// `x·c_attn_w + c_attn_b`, `[B·T, 3C]`.
    pub qkv: Mat,
    /// Attention weights `[T, T]`, one per (sequence, head), at index `b·H + h`.
    pub probs: Vec<Mat>,
    /// The heads' outputs, concatenated: `[B·T, C]`, the input of `c_proj`.
    pub att: Mat,
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
}

/// Gradients of an attention layer.
#[derive(Clone, Debug)]
pub struct AttentionGrads {
    pub dx: Mat,
    pub c_attn_w: Mat,
    pub c_attn_b: Vec<f64>,
    pub c_proj_w: Mat,
    pub c_proj_b: Vec<f64>,
}

/// The rows of sequence `b` and columns `col..col + width` of `m`, as a `[seq, width]` matrix.
pub fn block(m: &Mat, b: usize, seq: usize, col: usize, width: usize) -> Mat {
    let mut out = Mat::zeros(seq, width);
    for t in 0..seq {
        let r = b * seq + t;
        out.data[t * width..(t + 1) * width]
            .copy_from_slice(&m.data[r * m.cols + col..r * m.cols + col + width]);
    }
    out
}

/// Writes `blk [seq, width]` into the rows of sequence `b` and columns `col..col + width` of `m`.
pub fn put_block(m: &mut Mat, b: usize, seq: usize, col: usize, blk: &Mat) {
    let w = blk.cols;
    for t in 0..seq {
        let r = b * seq + t;
        m.data[r * m.cols + col..r * m.cols + col + w].copy_from_slice(blk.row(t));
    }
}

/// `x [B·T, C]` → `y [B·T, C]`; `causal` hides every key position after the query's.
pub fn forward(
    x: &Mat,
    p: &AttentionParams,
    batch: usize,
    seq: usize,
    heads: usize,
    causal: bool,
) -> (Mat, AttentionCache) {
    let c = x.cols;
    assert_eq!(x.rows, batch * seq, "attention: x must have B·T rows");
    assert!(
        heads > 0 && c.is_multiple_of(heads),
        "attention: {heads} heads do not divide {c}"
    );
    assert_eq!(
        (p.c_attn_w.rows, p.c_attn_w.cols),
        (c, 3 * c),
        "attention: c_attn_w must be [C, 3C]"
    );
    let d = c / heads;
    let scale = 1.0 / (d as f64).sqrt();
    let qkv = linear::forward(x, &p.c_attn_w, &p.c_attn_b);
    let mut att = Mat::zeros(x.rows, c);
    let mut probs = Vec::with_capacity(batch * heads);
    for b in 0..batch {
        for h in 0..heads {
            let q = block(&qkv, b, seq, h * d, d);
            let k = block(&qkv, b, seq, c + h * d, d);
            let v = block(&qkv, b, seq, 2 * c + h * d, d);
            let mut s = q.matmul_a_bt(&k);
            for i in 0..seq {
                for j in 0..seq {
                    let e = s.at_mut(i, j);
                    // The diagonal is never masked, so every row keeps a finite maximum.
                    *e = if causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        *e * scale
                    };
                }
            }
            let pm = softmax_xent::softmax(&s);
            put_block(&mut att, b, seq, h * d, &pm.matmul(&v));
            probs.push(pm);
        }
    }
    let y = linear::forward(&att, &p.c_proj_w, &p.c_proj_b);
    let cache = AttentionCache {
        x: x.clone(),
        qkv,
        probs,
        att,
        batch,
        seq,
        heads,
    };
    (y, cache)
}

/// The softmax's backward pass, row by row: `dS = P ⊙ (dP − rowsum(P ⊙ dP))`.
pub fn softmax_backward(p: &Mat, dp: &Mat) -> Mat {
    let mut ds = Mat::zeros(p.rows, p.cols);
    for i in 0..p.rows {
        let mean: f64 = p.row(i).iter().zip(dp.row(i)).map(|(a, b)| a * b).sum();
        for j in 0..p.cols {
            *ds.at_mut(i, j) = p.at(i, j) * (dp.at(i, j) - mean);
        }
    }
    ds
}

/// Given `dy [B·T, C]`, the gradients with respect to `x` and every weight.
pub fn backward(cache: &AttentionCache, p: &AttentionParams, dy: &Mat) -> AttentionGrads {
    let (seq, heads) = (cache.seq, cache.heads);
    let c = cache.x.cols;
    let d = c / heads;
    let scale = 1.0 / (d as f64).sqrt();
    let proj = linear::backward(&cache.att, &p.c_proj_w, dy);
    let mut dqkv = Mat::zeros(cache.qkv.rows, 3 * c);
    for b in 0..cache.batch {
        for h in 0..heads {
            let q = block(&cache.qkv, b, seq, h * d, d);
            let k = block(&cache.qkv, b, seq, c + h * d, d);
            let v = block(&cache.qkv, b, seq, 2 * c + h * d, d);
            let pm = &cache.probs[b * heads + h];
            let d_o = block(&proj.dx, b, seq, h * d, d);
            let dv = pm.matmul_at_b(&d_o);
            let mut ds = softmax_backward(pm, &d_o.matmul_a_bt(&v));
            // The forward pass scaled the scores, so their blame is scaled the same way.
            ds.data.iter_mut().for_each(|e| *e *= scale);
            put_block(&mut dqkv, b, seq, h * d, &ds.matmul(&k));
            put_block(&mut dqkv, b, seq, c + h * d, &ds.matmul_at_b(&q));
            put_block(&mut dqkv, b, seq, 2 * c + h * d, &dv);
        }
    }
    let inp = linear::backward(&cache.x, &p.c_attn_w, &dqkv);
    AttentionGrads {
        dx: inp.dx,
        c_attn_w: inp.dw,
        c_attn_b: inp.db,
        c_proj_w: proj.dw,
        c_proj_b: proj.db,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    pub(crate) const B: usize = 2;
    pub(crate) const T: usize = 5;
    pub(crate) const C: usize = 8;
    pub(crate) const H: usize = 2;

    /// The centred difference's step. A weight of `c_attn` enters each score multiplied by an
    /// input of size ~3 and a key or query of size ~3, so the third derivative of L in that weight
    /// is ~27 times its size in the scores; at h = 1e-3 the O(h²) truncation measured 1.1e-5 of
    /// the gradient. h = 1e-4 cuts that a hundredfold, while rounding stays negligible:
    /// 1e-16·|L|/h ≈ 1e-11 absolute on gradients of size ~10.
    pub(crate) const STEP: f64 = 1e-4;

    /// With that step the worst element (c_attn.w, causal) measured 1.1e-7 (printed), a hundredth
    /// of its figure at h = 1e-3, as an O(h²) truncation should be; every other tensor is below
    /// 2e-9. 1e-6 leaves room and is still 1e-6 of a lost 1/√D (a factor 2 here).
    pub(crate) const TOL: f64 = 1e-6;

    /// A telling point: inputs of std 3, weights of std 0.3–0.5, biases non-zero.
    pub(crate) fn point() -> (Mat, AttentionParams, Mat) {
        let p = AttentionParams {
            c_attn_w: Mat::new(C, 3 * C, randn(61, C * 3 * C, 0.3)),
            c_attn_b: randn(62, 3 * C, 0.5),
            c_proj_w: Mat::new(C, C, randn(63, C * C, 0.5)),
            c_proj_b: randn(64, C, 0.5),
        };
        let x = Mat::new(B * T, C, randn(65, B * T * C, 3.0));
        let dy = Mat::new(B * T, C, randn(66, B * T * C, 1.0));
        (x, p, dy)
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    /// The centred difference of `loss` along every element of the field `field` picks out.
    fn numeric<P: Clone>(
        p: &P,
        field: impl Fn(&mut P) -> &mut [f64],
        loss: impl Fn(&P) -> f64,
    ) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, STEP, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    /// Every bias column but the keys', whose gradient is zero in theory (see the module comment)
    /// and rounding noise in practice: a relative measure of noise against noise says nothing.
    fn without_key_bias(b: &[f64]) -> Vec<f64> {
        b[..C].iter().chain(&b[2 * C..]).copied().collect()
    }

    /// The worst relative difference, over dx and every weight, between `backward` and a centred
    /// difference of `L = Σ y ⊙ dy`.
    pub(crate) fn worst(
        causal: bool,
        backward: impl Fn(&AttentionCache, &AttentionParams, &Mat) -> AttentionGrads,
    ) -> f64 {
        let (x, p, dy) = point();
        let loss = |x: &Mat, p: &AttentionParams| dot(&forward(x, p, B, T, H, causal).0, &dy);
        let (_, cache) = forward(&x, &p, B, T, H, causal);
        let g = backward(&cache, &p, &dy);
        let nx = numeric(&x, |x| &mut x.data[..], |x| loss(x, &p));
        let nwa = numeric(&p, |p| &mut p.c_attn_w.data[..], |p| loss(&x, p));
        let nba = numeric(&p, |p| &mut p.c_attn_b[..], |p| loss(&x, p));
        let nwp = numeric(&p, |p| &mut p.c_proj_w.data[..], |p| loss(&x, p));
        let nbp = numeric(&p, |p| &mut p.c_proj_b[..], |p| loss(&x, p));
        let mut worst = 0.0f64;
        for (name, a, n) in [
            ("dx", g.dx.data.clone(), nx),
            ("c_attn.w", g.c_attn_w.data.clone(), nwa),
            (
                "c_attn.b (q, v)",
                without_key_bias(&g.c_attn_b),
                without_key_bias(&nba),
            ),
            ("c_proj.w", g.c_proj_w.data.clone(), nwp),
            ("c_proj.b", g.c_proj_b.clone(), nbp),
        ] {
            let r = worst_rel(&a, &n);
            let mask = if causal { "causal" } else { "full" };
            println!("attention ({mask}) {name}: worst relative difference {r:.2e}");
            worst = worst.max(r);
        }
        worst
    }

    #[test]
    fn attention_backward_matches_numerical_causal() {
        let r = worst(true, backward);
        assert!(r <= TOL, "causal attention: {r:.3e}");
    }

    #[test]
    fn attention_backward_matches_numerical_full() {
        let r = worst(false, backward);
        assert!(r <= TOL, "full attention: {r:.3e}");
    }

    #[test]
    fn key_bias_gets_no_gradient() {
        // Each key-bias gradient is Σ_i q_i·Σ_j dS_ij / √D, and every row of dS sums to zero
        // (the softmax removed its mean). What is left is rounding: ~1e-16 of the terms summed.
        for causal in [true, false] {
            let (x, p, dy) = point();
            let (_, cache) = forward(&x, &p, B, T, H, causal);
            let g = backward(&cache, &p, &dy);
            let scale = g.c_attn_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let kb = &g.c_attn_b[C..2 * C];
            let worst = kb.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            println!(
                "attention (causal {causal}) key bias: max |g| {worst:.1e} of scale {scale:.1e}"
            );
            assert!(worst < 1e-12 * scale, "key bias gradient {kb:?}");
        }
    }

    #[test]
    fn causal_output_ignores_later_inputs() {
        // Scramble every input at positions ≥ 3 of both sequences.
        let (x, p, _) = point();
        let mut x2 = x.clone();
        for r in 0..B * T {
            if r % T >= 3 {
                for (j, v) in randn(67 + r as u64, C, 5.0).into_iter().enumerate() {
                    *x2.at_mut(r, j) += v;
                }
            }
        }
        let (y, _) = forward(&x, &p, B, T, H, true);
        let (y2, _) = forward(&x2, &p, B, T, H, true);
        for r in 0..B * T {
            if r % T < 3 {
                assert_eq!(y.row(r), y2.row(r), "causal row {r} saw the future");
            } else {
                assert_ne!(y.row(r), y2.row(r));
            }
        }
        // Without the mask the same change does reach the earlier rows: the test has teeth.
        let (f, _) = forward(&x, &p, B, T, H, false);
        let (f2, _) = forward(&x2, &p, B, T, H, false);
        assert_ne!(f.row(0), f2.row(0));
    }

    #[test]
    fn causal_gradient_does_not_reach_later_inputs() {
        // Blame only the output at position 2 of sequence 1.
        let (x, p, _) = point();
        let (bt, tt) = (1, 2);
        let mut dy = Mat::zeros(B * T, C);
        for (j, v) in randn(68, C, 1.0).into_iter().enumerate() {
            *dy.at_mut(bt * T + tt, j) = v;
        }
        for causal in [true, false] {
            let (_, cache) = forward(&x, &p, B, T, H, causal);
            let g = backward(&cache, &p, &dy);
            for r in 0..B * T {
                let (b, t) = (r / T, r % T);
                let zero = g.dx.row(r).iter().all(|v| *v == 0.0);
                if b != bt || (causal && t > tt) {
                    assert!(
                        zero,
                        "row {r} (causal {causal}) got gradient {:?}",
                        g.dx.row(r)
                    );
                } else {
                    assert!(!zero, "row {r} (causal {causal}) got no gradient");
                }
            }
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::attention::CausalSelfAttentionConfig;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    #[test]
    fn causal_attention_backward_matches_burn_autodiff() {
        let (b, t, c, h) = (2, 5, 8, 2);
        let x = Mat::new(b * t, c, f32_exact(randn(331, b * t * c, 3.0)));
        let p = AttentionParams {
            c_attn_w: Mat::new(c, 3 * c, f32_exact(randn(332, 3 * c * c, 0.5))),
            c_attn_b: f32_exact(randn(333, 3 * c, 0.5)),
            c_proj_w: Mat::new(c, c, f32_exact(randn(334, c * c, 0.5))),
            c_proj_b: f32_exact(randn(335, c, 0.5)),
        };
        let dy = Mat::new(b * t, c, randn(336, b * t * c, 1.0));
        let attn = load(
            CausalSelfAttentionConfig::new(c, h).init::<AB>(&Default::default()),
            &[
                ("c_attn.weight", &[c, 3 * c], &p.c_attn_w.data),
                ("c_attn.bias", &[3 * c], &p.c_attn_b),
                ("c_proj.weight", &[c, c], &p.c_proj_w.data),
                ("c_proj.bias", &[c], &p.c_proj_b),
            ],
        );
        let xt = tensor::<AB, 3>(x.data.clone(), [b, t, c]).require_grad();
        let y = attn.forward(xt.clone(), None);
        let (want, cache) = forward(&x, &p, b, t, h, true);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, t, c]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        let got = grads_by_path(&attn, &grads);
        // f64 both sides; ~1e-15. The key-bias columns are rounding noise on both sides (their
        // true gradient is exactly zero), so the bias is compared without them.
        let qv = |v: &[f64]| -> Vec<f64> { v[..c].iter().chain(&v[2 * c..]).copied().collect() };
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        assert_close(
            "c_attn.weight",
            &got["c_attn.weight"],
            &g.c_attn_w.data,
            1e-12,
        );
        assert_close(
            "c_attn.bias (q, v)",
            &qv(&got["c_attn.bias"]),
            &qv(&g.c_attn_b),
            1e-12,
        );
        assert!(
            got["c_attn.bias"][c..2 * c].iter().all(|v| v.abs() < 1e-12),
            "key bias gradient is zero"
        );
        assert_close(
            "c_proj.weight",
            &got["c_proj.weight"],
            &g.c_proj_w.data,
            1e-12,
        );
        assert_close("c_proj.bias", &got["c_proj.bias"], &g.c_proj_b, 1e-12);
    }
}
