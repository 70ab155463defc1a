//! A GPT-2 transformer block (pre-norm): `x1 = x + attn(ln_1(x))`, `y = x1 + mlp(ln_2(x1))`, with
//! `mlp = c_fc [C, 4C] → GELU (tanh) → c_proj [4C, C]` and causal attention.
//!
//! A residual `y = x + f(x)` has Jacobian `I + f'`, so its backward pass is
//! `dx = dy + f.backward(dy)`: the upstream gradient arrives untouched, plus whatever the branch
//! adds. That identity path is what lets a unit gradient cross dozens of blocks whose own branches
//! each pass back only a fraction of it (the test at the bottom shows 24 of them). Everything else
//! is the layers beside this file, run backwards in reverse order.

use super::attention::{self, AttentionCache, AttentionGrads, AttentionParams};
use super::gelu::{self, GeluCache};
use super::layer_norm::{self, LayerNormCache};
use super::{Mat, linear};

/// LayerNorm's eps in GPT-2 (and PyTorch's default).
pub const LN_EPS: f64 = 1e-5;

/// The weights of one block, named after GPT-2's `h.{i}.*` tensors, in `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct BlockParams {
    pub ln_1_g: Vec<f64>,
    pub ln_1_b: Vec<f64>,
    pub attn: AttentionParams,
    pub ln_2_g: Vec<f64>,
    pub ln_2_b: Vec<f64>,
    /// `[C, 4C]`.
    pub mlp_c_fc_w: Mat,
    pub mlp_c_fc_b: Vec<f64>,
    /// `[4C, C]`.
    pub mlp_c_proj_w: Mat,
    pub mlp_c_proj_b: Vec<f64>,
}

/// Gradients of a block, shaped as [`BlockParams`], plus `dx`.
#[derive(Clone, Debug)]
pub struct BlockGrads {
    /// The gradient at the block's input.
    pub dx: Mat,
    pub ln_1_g: Vec<f64>,
    pub ln_1_b: Vec<f64>,
    /// The attention's weights; its `dx` is the gradient at `ln_1`'s output.
    pub attn: AttentionGrads,
    pub ln_2_g: Vec<f64>,
    pub ln_2_b: Vec<f64>,
    pub mlp_c_fc_w: Mat,
    pub mlp_c_fc_b: Vec<f64>,
    pub mlp_c_proj_w: Mat,
    pub mlp_c_proj_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct BlockCache {
    pub ln_1: LayerNormCache,
    pub attn: AttentionCache,
    /// `ln_2(x1)`, the input of `c_fc`.
    pub ln_2_out: Mat,
    pub ln_2: LayerNormCache,
    pub gelu: GeluCache,
    /// `gelu(c_fc(...))`, the input of the MLP's `c_proj`.
    pub gelu_out: Mat,
}

/// `x [B·T, C]` → `y [B·T, C]`.
pub fn forward(
    x: &Mat,
    p: &BlockParams,
    batch: usize,
    seq: usize,
    heads: usize,
) -> (Mat, BlockCache) {
    let (a_in, ln_1) = layer_norm::forward(x, &p.ln_1_g, &p.ln_1_b, LN_EPS);
    let (a_out, attn) = attention::forward(&a_in, &p.attn, batch, seq, heads, true);
    let x1 = add(x, &a_out);
    let (ln_2_out, ln_2) = layer_norm::forward(&x1, &p.ln_2_g, &p.ln_2_b, LN_EPS);
    let fc = linear::forward(&ln_2_out, &p.mlp_c_fc_w, &p.mlp_c_fc_b);
    let (gelu_out, gelu) = gelu::forward(&fc);
    let m_out = linear::forward(&gelu_out, &p.mlp_c_proj_w, &p.mlp_c_proj_b);
    let y = add(&x1, &m_out);
    let cache = BlockCache {
        ln_1,
        attn,
        ln_2_out,
        ln_2,
        gelu,
        gelu_out,
    };
    (y, cache)
}

/// Given `dy [B·T, C]`, the gradients with respect to `x` and every weight.
pub fn backward(cache: &BlockCache, p: &BlockParams, dy: &Mat) -> BlockGrads {
    let proj = linear::backward(&cache.gelu_out, &p.mlp_c_proj_w, dy);
    let dfc = gelu::backward(&cache.gelu, &proj.dx);
    let fc = linear::backward(&cache.ln_2_out, &p.mlp_c_fc_w, &dfc);
    let ln_2 = layer_norm::backward(&cache.ln_2, &p.ln_2_g, &fc.dx);
    let dx1 = add(dy, &ln_2.dx);
    let attn = attention::backward(&cache.attn, &p.attn, &dx1);
    let ln_1 = layer_norm::backward(&cache.ln_1, &p.ln_1_g, &attn.dx);
    BlockGrads {
        dx: add(&dx1, &ln_1.dx),
        ln_1_g: ln_1.dgamma,
        ln_1_b: ln_1.dbeta,
        attn,
        ln_2_g: ln_2.dgamma,
        ln_2_b: ln_2.dbeta,
        mlp_c_fc_w: fc.dw,
        mlp_c_fc_b: fc.db,
        mlp_c_proj_w: proj.dw,
        mlp_c_proj_b: proj.db,
    }
}

pub(super) fn add(a: &Mat, b: &Mat) -> Mat {
    assert_eq!(
        (a.rows, a.cols),
        (b.rows, b.cols),
        "block: residual shapes differ"
    );
    Mat::new(
        a.rows,
        a.cols,
        a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const B: usize = 2;
    const T: usize = 4;
    const C: usize = 8;
    const H: usize = 2;

    /// Block weights at a telling point: gains 1 ± 0.5, non-zero shifts and biases, weights of
    /// std 0.3–0.5. Used by the GPT test too.
    pub(crate) fn params(c: usize, seed: u64) -> BlockParams {
        let gain = |s: u64| randn(s, c, 0.5).iter().map(|v| 1.0 + v).collect();
        BlockParams {
            ln_1_g: gain(seed),
            ln_1_b: randn(seed + 1, c, 0.5),
            attn: AttentionParams {
                c_attn_w: Mat::new(c, 3 * c, randn(seed + 2, 3 * c * c, 0.3)),
                c_attn_b: randn(seed + 3, 3 * c, 0.5),
                c_proj_w: Mat::new(c, c, randn(seed + 4, c * c, 0.5)),
                c_proj_b: randn(seed + 5, c, 0.5),
            },
            ln_2_g: gain(seed + 6),
            ln_2_b: randn(seed + 7, c, 0.5),
            mlp_c_fc_w: Mat::new(c, 4 * c, randn(seed + 8, 4 * c * c, 0.5)),
            mlp_c_fc_b: randn(seed + 9, 4 * c, 0.5),
            mlp_c_proj_w: Mat::new(4 * c, c, randn(seed + 10, 4 * c * c, 0.3)),
            mlp_c_proj_b: randn(seed + 11, c, 0.5),
        }
    }

    fn numeric<P: Clone>(
        p: &P,
        field: impl Fn(&mut P) -> &mut [f64],
        loss: impl Fn(&P) -> f64,
    ) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, 1e-3, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    #[test]
    fn block_backward_matches_numerical() {
        let p = params(C, 70);
        let x = Mat::new(B * T, C, randn(90, B * T * C, 3.0));
        let dy = Mat::new(B * T, C, randn(91, B * T * C, 1.0));
        let loss = |x: &Mat, p: &BlockParams| -> f64 {
            let (y, _) = forward(x, p, B, T, H);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        };
        let (_, cache) = forward(&x, &p, B, T, H);
        let g = backward(&cache, &p, &dy);
        let f = |field: fn(&mut BlockParams) -> &mut [f64]| numeric(&p, field, |p| loss(&x, p));
        let kb = |b: &[f64]| -> Vec<f64> { b[..C].iter().chain(&b[2 * C..]).copied().collect() };
        let checks: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
            (
                "dx",
                g.dx.data.clone(),
                numeric(&x, |x| &mut x.data[..], |x| loss(x, &p)),
            ),
            ("ln_1.g", g.ln_1_g.clone(), f(|p| &mut p.ln_1_g[..])),
            ("ln_1.b", g.ln_1_b.clone(), f(|p| &mut p.ln_1_b[..])),
            (
                "attn.c_attn.w",
                g.attn.c_attn_w.data.clone(),
                f(|p| &mut p.attn.c_attn_w.data[..]),
            ),
            // The key columns of the bias get zero in theory; see attention.rs.
            (
                "attn.c_attn.b (q, v)",
                kb(&g.attn.c_attn_b),
                kb(&f(|p| &mut p.attn.c_attn_b[..])),
            ),
            (
                "attn.c_proj.w",
                g.attn.c_proj_w.data.clone(),
                f(|p| &mut p.attn.c_proj_w.data[..]),
            ),
            (
                "attn.c_proj.b",
                g.attn.c_proj_b.clone(),
                f(|p| &mut p.attn.c_proj_b[..]),
            ),
            ("ln_2.g", g.ln_2_g.clone(), f(|p| &mut p.ln_2_g[..])),
            ("ln_2.b", g.ln_2_b.clone(), f(|p| &mut p.ln_2_b[..])),
            (
                "mlp.c_fc.w",
                g.mlp_c_fc_w.data.clone(),
                f(|p| &mut p.mlp_c_fc_w.data[..]),
            ),
            (
                "mlp.c_fc.b",
                g.mlp_c_fc_b.clone(),
                f(|p| &mut p.mlp_c_fc_b[..]),
            ),
            (
                "mlp.c_proj.w",
                g.mlp_c_proj_w.data.clone(),
                f(|p| &mut p.mlp_c_proj_w.data[..]),
            ),
            (
                "mlp.c_proj.b",
                g.mlp_c_proj_b.clone(),
                f(|p| &mut p.mlp_c_proj_b[..]),
            ),
        ];
        // The block is a composition of the layers checked beside it; its truncation error is
        // theirs, O(h²)·|L'''| ~ 1e-6 relative at worst. Measured (printed): 5.8e-7 at worst
        // (mlp.c_fc.w), the rest below 2.1e-7. h = 1e-3 suffices here, unlike in attention.rs,
        // because ln_1 hands attention inputs of size ~1, not ~3. 1e-5 leaves room for that.
        for (name, a, n) in &checks {
            println!(
                "block {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-5);
        }
        let kbias = g.attn.c_attn_b[C..2 * C]
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        let scale = g.attn.c_attn_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(kbias < 1e-12 * scale, "key bias {kbias:e} of {scale:e}");
    }

    /// The gradient reaching the bottom of a chain of 24 layers `f(x) = x·W + b`, each of which
    /// passes back about a tenth of what it receives (`W ≈ 0.1·I`, a little noise), as a fraction
    /// of a unit gradient at the top: `‖dx‖` for `dy` a unit vector.
    fn chain_gain(residual: bool) -> f64 {
        let (c, layers) = (8, 24);
        let ws: Vec<Mat> = (0..layers)
            .map(|l| {
                let mut w = Mat::new(c, c, randn(100 + l as u64, c * c, 0.002));
                (0..c).for_each(|i| *w.at_mut(i, i) += 0.1);
                w
            })
            .collect();
        let b = randn(96, c, 0.5);
        let mut xs = vec![Mat::new(1, c, randn(97, c, 1.0))];
        for w in &ws {
            let x = &xs[xs.len() - 1];
            let f = linear::forward(x, w, &b);
            let y = if residual { add(x, &f) } else { f };
            xs.push(y);
        }
        let mut g = Mat::zeros(1, c);
        g.data[0] = 1.0;
        for (w, x) in ws.iter().zip(&xs).rev() {
            let branch = linear::backward(x, w, &g).dx;
            g = if residual { add(&g, &branch) } else { branch };
        }
        g.data.iter().map(|v| v * v).sum::<f64>().sqrt()
    }

    #[test]
    fn residual_carries_the_gradient_through_24_layers() {
        let plain = chain_gain(false);
        let res = chain_gain(true);
        println!("24 layers: |dx| = {plain:.2e} without the residual, {res:.2} with it");
        // 0.1^24 = 1e-24 without; about 1.1^24 ≈ 9.8 with.
        assert!(plain <= 1e-20, "plain chain passed back {plain:e}");
        assert!(
            (0.5..=20.0).contains(&res),
            "residual chain passed back {res}"
        );
    }
}

#[cfg(test)]
pub(crate) mod burn_parity {
    use super::*;
    use crate::gpt::GptConfig;
    use crate::gpt::init_block;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    fn exact(p: BlockParams) -> BlockParams {
        let m = |m: Mat| Mat::new(m.rows, m.cols, f32_exact(m.data));
        BlockParams {
            ln_1_g: f32_exact(p.ln_1_g),
            ln_1_b: f32_exact(p.ln_1_b),
            attn: AttentionParams {
                c_attn_w: m(p.attn.c_attn_w),
                c_attn_b: f32_exact(p.attn.c_attn_b),
                c_proj_w: m(p.attn.c_proj_w),
                c_proj_b: f32_exact(p.attn.c_proj_b),
            },
            ln_2_g: f32_exact(p.ln_2_g),
            ln_2_b: f32_exact(p.ln_2_b),
            mlp_c_fc_w: m(p.mlp_c_fc_w),
            mlp_c_fc_b: f32_exact(p.mlp_c_fc_b),
            mlp_c_proj_w: m(p.mlp_c_proj_w),
            mlp_c_proj_b: f32_exact(p.mlp_c_proj_b),
        }
    }

    /// The block's parameters under their Burn paths, with `prefix` (for use inside a GPT).
    pub(crate) fn named(p: &BlockParams, prefix: &str) -> Vec<(String, Vec<usize>, Vec<f64>)> {
        let c = p.ln_1_g.len();
        vec![
            (format!("{prefix}ln_1.gamma"), vec![c], p.ln_1_g.clone()),
            (format!("{prefix}ln_1.beta"), vec![c], p.ln_1_b.clone()),
            (
                format!("{prefix}attn.c_attn.weight"),
                vec![c, 3 * c],
                p.attn.c_attn_w.data.clone(),
            ),
            (
                format!("{prefix}attn.c_attn.bias"),
                vec![3 * c],
                p.attn.c_attn_b.clone(),
            ),
            (
                format!("{prefix}attn.c_proj.weight"),
                vec![c, c],
                p.attn.c_proj_w.data.clone(),
            ),
            (
                format!("{prefix}attn.c_proj.bias"),
                vec![c],
                p.attn.c_proj_b.clone(),
            ),
            (format!("{prefix}ln_2.gamma"), vec![c], p.ln_2_g.clone()),
            (format!("{prefix}ln_2.beta"), vec![c], p.ln_2_b.clone()),
            (
                format!("{prefix}mlp.c_fc.weight"),
                vec![c, 4 * c],
                p.mlp_c_fc_w.data.clone(),
            ),
            (
                format!("{prefix}mlp.c_fc.bias"),
                vec![4 * c],
                p.mlp_c_fc_b.clone(),
            ),
            (
                format!("{prefix}mlp.c_proj.weight"),
                vec![4 * c, c],
                p.mlp_c_proj_w.data.clone(),
            ),
            (
                format!("{prefix}mlp.c_proj.bias"),
                vec![c],
                p.mlp_c_proj_b.clone(),
            ),
        ]
    }

    /// The reference's gradients under the same paths.
    pub(crate) fn named_grads(g: &BlockGrads, prefix: &str) -> Vec<(String, Vec<f64>)> {
        vec![
            (format!("{prefix}ln_1.gamma"), g.ln_1_g.clone()),
            (format!("{prefix}ln_1.beta"), g.ln_1_b.clone()),
            (
                format!("{prefix}attn.c_attn.weight"),
                g.attn.c_attn_w.data.clone(),
            ),
            (format!("{prefix}attn.c_attn.bias"), g.attn.c_attn_b.clone()),
            (
                format!("{prefix}attn.c_proj.weight"),
                g.attn.c_proj_w.data.clone(),
            ),
            (format!("{prefix}attn.c_proj.bias"), g.attn.c_proj_b.clone()),
            (format!("{prefix}ln_2.gamma"), g.ln_2_g.clone()),
            (format!("{prefix}ln_2.beta"), g.ln_2_b.clone()),
            (
                format!("{prefix}mlp.c_fc.weight"),
                g.mlp_c_fc_w.data.clone(),
            ),
            (format!("{prefix}mlp.c_fc.bias"), g.mlp_c_fc_b.clone()),
            (
                format!("{prefix}mlp.c_proj.weight"),
                g.mlp_c_proj_w.data.clone(),
            ),
            (format!("{prefix}mlp.c_proj.bias"), g.mlp_c_proj_b.clone()),
        ]
    }

    /// Compares every named gradient, leaving out the attention key bias (exactly zero in truth,
    /// rounding noise on both sides) after checking it is negligible.
    pub(crate) fn compare(
        got: &std::collections::HashMap<String, Vec<f64>>,
        want: &[(String, Vec<f64>)],
        tol: f64,
    ) {
        for (name, w) in want {
            let g = &got[name];
            if name.ends_with("attn.c_attn.bias") {
                let c = w.len() / 3;
                let qv =
                    |v: &[f64]| -> Vec<f64> { v[..c].iter().chain(&v[2 * c..]).copied().collect() };
                assert!(
                    g[c..2 * c].iter().all(|v| v.abs() < 1e-10),
                    "{name}: key bias gradient"
                );
                assert_close(name, &qv(g), &qv(w), tol);
            } else {
                assert_close(name, g, w, tol);
            }
        }
    }

    #[test]
    fn block_backward_matches_burn_autodiff() {
        let (b, t, c, h) = (2, 4, 8, 2);
        let p = exact(tests::params(c, 341));
        let x = Mat::new(b * t, c, f32_exact(randn(342, b * t * c, 3.0)));
        let dy = Mat::new(b * t, c, randn(343, b * t * c, 1.0));
        let named = named(&p, "");
        let refs: Vec<(&str, &[usize], &[f64])> = named
            .iter()
            .map(|(n, s, d)| (n.as_str(), &s[..], &d[..]))
            .collect();
        let block = load(
            init_block::<AB>(
                &GptConfig::new(9).with_d_model(c).with_heads(h),
                &Default::default(),
            ),
            &refs,
        );
        let xt = tensor::<AB, 3>(x.data.clone(), [b, t, c]).require_grad();
        let y = block.forward(xt.clone(), None);
        let (want, cache) = forward(&x, &p, b, t, h);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, t, c]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        compare(&grads_by_path(&block, &grads), &named_grads(&g, ""), 1e-11);
    }
}
