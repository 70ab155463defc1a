//! The classic mistakes of hand-written backward passes, each made on purpose and each caught by
//! the same numerical check the correct version passes.
//!
//! Each test runs the correct layer's own check (its point, its step, its tolerance) against a
//! deliberately wrong backward pass and requires the worst relative difference to be at least 100
//! times that tolerance. Measured margins (worst relative difference / tolerance):
//!
//! | mistake                               | check (tolerance)    | worst rel. diff. | margin |
//! |---------------------------------------|----------------------|------------------|--------|
//! | softmax without its row-average term  | attention (1e-6)     | 1.93             | 1.9e6  |
//! | attention without 1/√D going back     | attention (1e-6)     | 1.01             | 1.0e6  |
//! | dK = dS·Q (transpose missed)          | attention (1e-6)     | 1.62             | 1.6e6  |
//! | LayerNorm backward without γ          | layer_norm (1e-6)    | 0.465            | 4.6e5  |
//! | LayerNorm backward without 1/σ        | layer_norm (1e-6)    | 1.09             | 1.1e6  |
//! | embedding backward assigns, not adds  | embedding (1e-9)     | 0.699            | 7.0e8  |
//! | softmax-xent summed, not averaged     | softmax_xent (1e-6)  | 3.00 (n − 1)     | 3.0e6  |
//! | GELU derivative missing its 3         | gelu (1e-6)          | 0.0196           | 2.0e4  |
//! | adaLN without the `1 +` on scale      | modulate (1e-6)      | 0.702            | 7.0e5  |
//! | gate on the residual, not the branch  | gated_residual (1e-9)| 2.32             | 2.3e9  |
//! | RoPE backward by +angle, not −angle   | rope (1e-9)          | 1.56             | 1.6e9  |
//! | unpatchify in conv `(c, i, j)` order  | patch, exact (0)     | 1.51, 48/64 px   | exact  |
//!
//! The unpatchify mistake is a permutation, not a wrong factor: no gradient check is needed, and
//! none would help (its backward pass would be the matching wrong permutation, consistent with
//! it). It is caught by comparing with diffusers' `nhwpqc → nchpwq` written out index by index,
//! an exact comparison the correct version passes with 0 pixels misplaced (C = 2; for C = 1 the
//! two orders coincide and the mistake is invisible, which is why the check uses two channels).
//!
//! The GELU mistake is the quietest: `3·0.044715·x²` against `0.044715·x²` matters only where
//! the gate is still opening (|x| ≈ 1–2), and even there it costs only 2% of the largest
//! gradient; a tolerance near 1e-2 would let it pass.

use super::attention::{self, AttentionCache, AttentionGrads, AttentionParams, block, put_block};
use super::embedding;
use super::gelu::{self, CUBIC, GeluCache, SQRT_2_OVER_PI};
use super::layer_norm::{self, LayerNormCache, LayerNormGrads};
use super::modulate::{self, GatedGrads, ModulateCache};
use super::{Mat, linear, patch, rope, softmax_xent};
use crate::testing::{numerical_grad, randn, worst_rel};

/// Requires `worst ≥ 100·tol` and prints the margin.
#[track_caller]
fn caught(name: &str, worst: f64, tol: f64) {
    println!(
        "mistake '{name}': worst relative difference {worst:.2e}, \
         tolerance {tol:.0e}, margin {:.1e}",
        worst / tol
    );
    assert!(
        worst >= 100.0 * tol,
        "mistake '{name}' slipped through: \
         worst relative difference {worst:.3e} is under 100 × {tol:.0e}"
    );
}

#[derive(Clone, Copy, PartialEq)]
enum AttnMistake {
    DroppedRowAverage,
    ForgottenScale,
    UntransposedDk,
}

/// `attention::backward` with one mistake in the per-head core.
fn attention_backward(
    cache: &AttentionCache,
    p: &AttentionParams,
    dy: &Mat,
    mistake: AttnMistake,
) -> AttentionGrads {
    let (seq, heads) = (cache.seq, cache.heads);
    let c = cache.x.cols;
    let d = c / heads;
    let scale = if mistake == AttnMistake::ForgottenScale {
        1.0
    } else {
        1.0 / (d as f64).sqrt()
    };
    let proj = linear::backward(&cache.att, &p.c_proj_w, dy);
    let mut dqkv = Mat::zeros(cache.qkv.rows, 3 * c);
    for b in 0..cache.batch {
        for h in 0..heads {
            let q = block(&cache.qkv, b, seq, h * d, d);
            let k = block(&cache.qkv, b, seq, c + h * d, d);
            let v = block(&cache.qkv, b, seq, 2 * c + h * d, d);
            let pm = &cache.probs[b * heads + h];
            let d_o = block(&proj.dx, b, seq, h * d, d);
            let dp = d_o.matmul_a_bt(&v);
            let mut ds = if mistake == AttnMistake::DroppedRowAverage {
                // dS = P ⊙ dP: the softmax treated as if each output depended on its own input.
                Mat::new(
                    seq,
                    seq,
                    pm.data.iter().zip(&dp.data).map(|(a, b)| a * b).collect(),
                )
            } else {
                attention::softmax_backward(pm, &dp)
            };
            ds.data.iter_mut().for_each(|e| *e *= scale);
            let dk = if mistake == AttnMistake::UntransposedDk {
                ds.matmul(&q)
            } else {
                ds.matmul_at_b(&q)
            };
            put_block(&mut dqkv, b, seq, h * d, &ds.matmul(&k));
            put_block(&mut dqkv, b, seq, c + h * d, &dk);
            put_block(&mut dqkv, b, seq, 2 * c + h * d, &pm.matmul_at_b(&d_o));
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

#[test]
fn softmax_without_its_row_average_is_caught() {
    let w = attention::tests::worst(true, |c, p, dy| {
        attention_backward(c, p, dy, AttnMistake::DroppedRowAverage)
    });
    caught(
        "softmax without its row-average term",
        w,
        attention::tests::TOL,
    );
}

#[test]
fn attention_without_its_scale_is_caught() {
    let w = attention::tests::worst(true, |c, p, dy| {
        attention_backward(c, p, dy, AttnMistake::ForgottenScale)
    });
    caught(
        "attention without 1/sqrt(D) going back",
        w,
        attention::tests::TOL,
    );
}

#[test]
fn dk_without_its_transpose_is_caught() {
    let w = attention::tests::worst(true, |c, p, dy| {
        attention_backward(c, p, dy, AttnMistake::UntransposedDk)
    });
    caught("dK = dS·Q, transpose missed", w, attention::tests::TOL);
}

/// LayerNorm's backward pass, with γ left out of `g = dy·γ` unless `use_gamma` and the final
/// `1/σ` left out unless `use_rstd`.
fn layer_norm_backward(
    cache: &LayerNormCache,
    gamma: &[f64],
    dy: &Mat,
    use_gamma: bool,
    use_rstd: bool,
) -> LayerNormGrads {
    let mut g = layer_norm::backward(cache, gamma, dy);
    let c = dy.cols as f64;
    for r in 0..dy.rows {
        let xh = cache.xhat.row(r);
        let gr: Vec<f64> = dy
            .row(r)
            .iter()
            .zip(gamma)
            .map(|(d, w)| if use_gamma { d * w } else { *d })
            .collect();
        let mean_g = gr.iter().sum::<f64>() / c;
        let mean_gx = gr.iter().zip(xh).map(|(a, b)| a * b).sum::<f64>() / c;
        let s = if use_rstd { cache.rstd[r] } else { 1.0 };
        for j in 0..dy.cols {
            *g.dx.at_mut(r, j) = s * (gr[j] - mean_g - xh[j] * mean_gx);
        }
    }
    g
}

#[test]
fn layer_norm_without_gamma_is_caught() {
    let w = layer_norm::tests::worst(|c, g, dy| layer_norm_backward(c, g, dy, false, true));
    caught(
        "LayerNorm backward without gamma",
        w,
        layer_norm::tests::TOL,
    );
}

#[test]
fn layer_norm_without_rstd_is_caught() {
    let w = layer_norm::tests::worst(|c, g, dy| layer_norm_backward(c, g, dy, true, false));
    caught(
        "LayerNorm backward without 1/std",
        w,
        layer_norm::tests::TOL,
    );
}

#[test]
fn embedding_that_assigns_is_caught() {
    let w = embedding::tests::worst(|ids, dy, vocab| {
        let mut t = Mat::zeros(vocab, dy.cols);
        for (i, &id) in ids.iter().enumerate() {
            // The last use of a repeated token overwrites the blame of the others.
            t.data[id * dy.cols..(id + 1) * dy.cols].copy_from_slice(dy.row(i));
        }
        t
    });
    caught(
        "embedding backward assigns instead of adding",
        w,
        embedding::tests::TOL,
    );
}

#[test]
fn softmax_xent_summed_over_the_batch_is_caught() {
    // The point, step and tolerance of softmax_xent.rs's own numerical test.
    let (z, t) = (Mat::new(4, 6, randn(9, 24, 3.0)), vec![2, 0, 5, 2]);
    let tol = 1e-6;
    let n = numerical_grad(&z.data, 1e-3, |v| {
        softmax_xent::forward(&Mat::new(4, 6, v.to_vec()), &t).0
    });
    let (_, p) = softmax_xent::forward(&z, &t);
    // p − onehot, without the 1/n of the mean.
    let mut dz = p.clone();
    for (r, &tr) in t.iter().enumerate() {
        *dz.at_mut(r, tr) -= 1.0;
    }
    caught(
        "softmax-xent summed, not averaged",
        worst_rel(&dz.data, &n),
        tol,
    );
}

#[test]
fn gelu_missing_its_three_is_caught() {
    let w = gelu::tests::worst(|c: &GeluCache, dy: &Mat| {
        let dx =
            c.x.data
                .iter()
                .zip(&c.tanh.data)
                .zip(&dy.data)
                .map(|((&x, &t), &d)| {
                    // d/dx (x + a·x³) written as 1 + a·x²: the 3 of the cube's derivative lost.
                    let du = SQRT_2_OVER_PI * (1.0 + CUBIC * x * x);
                    d * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
                })
                .collect();
        Mat::new(dy.rows, dy.cols, dx)
    });
    caught("GELU derivative missing its 3", w, gelu::tests::TOL);
}

#[test]
fn adaln_without_one_plus_scale_is_caught() {
    let w = modulate::tests::worst_modulate(|cache: &ModulateCache, dy: &Mat| {
        let mut g = modulate::modulate_backward(cache, dy);
        // The blame on x̂ taken as dy·scale, not dy·(1 + scale).
        let mut dxhat = Mat::zeros(dy.rows, dy.cols);
        for r in 0..dy.rows {
            for j in 0..dy.cols {
                *dxhat.at_mut(r, j) = dy.at(r, j) * cache.scale.at(r / cache.n, j);
            }
        }
        g.dx = layer_norm::backward(&cache.norm, &vec![1.0; dy.cols], &dxhat).dx;
        g
    });
    caught("adaLN without the 1 + on scale", w, modulate::tests::TOL);
}

#[test]
fn gate_on_the_residual_is_caught() {
    // The backward pass of y = gate ⊙ x + branch, run where the layer is x + gate ⊙ branch.
    let w = modulate::tests::worst_gated(|x: &Mat, gate: &Mat, _branch: &Mat, dy: &Mat| {
        let n = modulate::tests::N;
        let mut dx = Mat::zeros(dy.rows, dy.cols);
        let mut dgate = Mat::zeros(gate.rows, gate.cols);
        for r in 0..dy.rows {
            for j in 0..dy.cols {
                *dx.at_mut(r, j) = gate.at(r / n, j) * dy.at(r, j);
                *dgate.at_mut(r / n, j) += x.at(r, j) * dy.at(r, j);
            }
        }
        GatedGrads {
            dx,
            dgate,
            dbranch: dy.clone(),
        }
    });
    caught(
        "gate applied to the residual, not the branch",
        w,
        modulate::tests::GATE_TOL,
    );
}

#[test]
fn unpatchify_in_conv_order_is_caught() {
    // Reading each token as (c, i, j), the order patchify writes, instead of diffusers' (i, j, c).
    let (count, w) = patch::tests::misplaced(|t, batch, channels, height, width, p| {
        let (h, wd) = (height / p, width / p);
        let mut out = vec![0.0; batch * channels * height * width];
        for b in 0..batch {
            for c in 0..channels {
                for y in 0..height {
                    for x in 0..width {
                        let row = b * h * wd + (y / p) * wd + x / p;
                        let col = c * p * p + (y % p) * p + x % p;
                        out[((b * channels + c) * height + y) * width + x] = t.at(row, col);
                    }
                }
            }
        }
        out
    });
    // The check is exact (a permutation does no arithmetic; the correct unpatchify differs from
    // diffusers' einsum in 0 pixels), so any misplaced pixel is caught; the margin is reported
    // against the smallest relative difference a single wrong pixel could show here, 1 ulp.
    println!(
        "mistake 'unpatchify in (c, i, j) order': {count} of 64 pixels misplaced, \
         worst relative difference {w:.2e}, exact check (tolerance 0), {:.1e} ulps",
        w / f64::EPSILON
    );
    assert!(count > 0 && w >= 100.0 * f64::EPSILON, "slipped through");
}

#[test]
fn rope_backward_by_plus_angle_is_caught() {
    // The forward rotation used as its own backward pass.
    let w = rope::tests::worst(rope::forward);
    caught("RoPE backward rotating by +angle", w, rope::tests::TOL);
}
