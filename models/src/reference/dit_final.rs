//! DiT's output layer, as diffusers' `DiTTransformer2DModel` runs it after the last block:
//!
//! ```text
//! shift, scale = proj_out_1(SiLU(c)).chunk(2)       // [D, 2D] + bias; shift FIRST
//! y   = LN(x, eps 1e-6, no affine)·(1 + scale) + shift   // norm_out
//! out = proj_out_2(y)                               // [D, p·p·C_out] + bias
//! ```
//!
//! Note the order: shift first, scale second, as in the blocks' `shift_msa, scale_msa` and in
//! Facebook's DiT `FinalLayer`. diffusers' `AdaLayerNormContinuous` (SD3, Flux) chunks
//! `scale, shift` instead; a checkpoint read with the halves swapped still runs, with every
//! shift acting as a scale, so the test below pins the order. `out`'s per-token vector
//! is ordered `(i, j, c)`, the order `patch::unpatchify` reads.
//!
//! Backward: `proj_out_2`, then the modulate (`modulate.rs`: LayerNorm's backward with gain
//! `1 + scale`, and `dshift`, `dscale` summed over each sample's tokens), then the two chunks'
//! gradients side by side (`[dshift | dscale]`) back through `proj_out_1` and the SiLU into `dc`.

use super::dit_block::{chunk, unchunk};
use super::modulate::{self, ModulateCache};
use super::{Mat, linear, silu};

/// `norm_out`'s eps.
pub const NORM_OUT_EPS: f64 = 1e-6;

/// The final layer's weights, diffusers' names, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct DitFinalParams {
    /// `[D, 2D]`: columns `0..D` make the shift, `D..2D` the scale.
    pub proj_out_1_w: Mat,
    /// `[2D]`.
    pub proj_out_1_b: Vec<f64>,
    /// `[D, p·p·C_out]`.
    pub proj_out_2_w: Mat,
    /// `[p·p·C_out]`.
    pub proj_out_2_b: Vec<f64>,
}

/// Gradients of [`DitFinalParams`], plus `dx` and `dc`.
#[derive(Clone, Debug)]
pub struct DitFinalGrads {
    /// `[B·N, D]`.
    pub dx: Mat,
    /// `[B, D]`.
    pub dc: Mat,
    pub proj_out_1_w: Mat,
    pub proj_out_1_b: Vec<f64>,
    pub proj_out_2_w: Mat,
    pub proj_out_2_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct DitFinalCache {
    pub c: Mat,
    pub silu_c: Mat,
    pub modulate: ModulateCache,
    /// The modulated tokens `[B·N, D]`, `proj_out_2`'s input.
    pub y: Mat,
}

/// `x [B·N, D]`, `c [B, D]` → `[B·N, p·p·C_out]`; `n` tokens per sample.
pub fn forward(x: &Mat, c: &Mat, p: &DitFinalParams, n: usize, eps: f64) -> (Mat, DitFinalCache) {
    let d = x.cols;
    let silu_c = silu::forward(c);
    let ss = linear::forward(&silu_c, &p.proj_out_1_w, &p.proj_out_1_b);
    let (shift, scale) = (chunk(&ss, 0, d), chunk(&ss, 1, d));
    let (y, modulate) = modulate::modulate(x, &shift, &scale, n, eps);
    let out = linear::forward(&y, &p.proj_out_2_w, &p.proj_out_2_b);
    let cache = DitFinalCache {
        c: c.clone(),
        silu_c,
        modulate,
        y,
    };
    (out, cache)
}

/// Given `dout [B·N, p·p·C_out]`, the gradients with respect to `x`, `c` and every weight.
pub fn backward(cache: &DitFinalCache, p: &DitFinalParams, dout: &Mat) -> DitFinalGrads {
    let p2 = linear::backward(&cache.y, &p.proj_out_2_w, dout);
    let m = modulate::modulate_backward(&cache.modulate, &p2.dx);
    let dss = unchunk(&[&m.dshift, &m.dscale]);
    let p1 = linear::backward(&cache.silu_c, &p.proj_out_1_w, &dss);
    DitFinalGrads {
        dx: m.dx,
        dc: silu::backward(&cache.c, &p1.dx),
        proj_out_1_w: p1.dw,
        proj_out_1_b: p1.db,
        proj_out_2_w: p2.dw,
        proj_out_2_b: p2.db,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const B: usize = 2;
    const N: usize = 4;
    const D: usize = 8;
    /// p = 2, C_out = 2: 8 outputs per token.
    const OUT: usize = 2 * 2 * 2;

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
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
    fn dit_final_backward_matches_numerical() {
        let p = DitFinalParams {
            proj_out_1_w: Mat::new(D, 2 * D, randn(301, 2 * D * D, 0.3)),
            proj_out_1_b: randn(302, 2 * D, 0.5),
            proj_out_2_w: Mat::new(D, OUT, randn(303, D * OUT, 0.5)),
            proj_out_2_b: randn(304, OUT, 0.5),
        };
        let x = Mat::new(B * N, D, randn(305, B * N * D, 3.0));
        let c = Mat::new(B, D, randn(306, B * D, 3.0));
        let dout = Mat::new(B * N, OUT, randn(307, B * N * OUT, 1.0));
        let eps = NORM_OUT_EPS;
        let loss = |x: &Mat, c: &Mat, p: &DitFinalParams| dot(&forward(x, c, p, N, eps).0, &dout);
        let (_, cache) = forward(&x, &c, &p, N, eps);
        let g = backward(&cache, &p, &dout);
        let f =
            |field: fn(&mut DitFinalParams) -> &mut [f64]| numeric(&p, field, |p| loss(&x, &c, p));
        let checks = [
            (
                "dx",
                g.dx.data.clone(),
                numeric(&x, |x| &mut x.data[..], |x| loss(x, &c, &p)),
            ),
            (
                "dc",
                g.dc.data.clone(),
                numeric(&c, |c| &mut c.data[..], |c| loss(&x, c, &p)),
            ),
            (
                "proj_out_1.w",
                g.proj_out_1_w.data.clone(),
                f(|p| &mut p.proj_out_1_w.data[..]),
            ),
            (
                "proj_out_1.b",
                g.proj_out_1_b.clone(),
                f(|p| &mut p.proj_out_1_b[..]),
            ),
            (
                "proj_out_2.w",
                g.proj_out_2_w.data.clone(),
                f(|p| &mut p.proj_out_2_w.data[..]),
            ),
            (
                "proj_out_2.b",
                g.proj_out_2_b.clone(),
                f(|p| &mut p.proj_out_2_b[..]),
            ),
        ];
        // LayerNorm's truncation (~1e-8, 1/σ³ with σ ≈ 3) and SiLU's (≲1e-7) are the only
        // non-linear parts; the rest is rounding. 1e-6 as for both.
        for (name, a, n) in &checks {
            println!(
                "dit_final {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-6);
        }
    }

    #[test]
    fn shift_is_the_first_half() {
        // A proj_out_1 whose bias alone sets shift = 5 and scale = 0 (weights zero): the output
        // of the modulate is x̂ + 5, so the row means are 5 — had the halves been swapped, the
        // tokens would be x̂·6, with row means 0.
        let p = DitFinalParams {
            proj_out_1_w: Mat::zeros(D, 2 * D),
            proj_out_1_b: [vec![5.0; D], vec![0.0; D]].concat(),
            proj_out_2_w: Mat::zeros(D, OUT),
            proj_out_2_b: vec![0.0; OUT],
        };
        let x = Mat::new(B * N, D, randn(308, B * N * D, 3.0));
        let c = Mat::new(B, D, randn(309, B * D, 3.0));
        let (_, cache) = forward(&x, &c, &p, N, NORM_OUT_EPS);
        for r in 0..B * N {
            let mean = cache.y.row(r).iter().sum::<f64>() / D as f64;
            assert!((mean - 5.0).abs() < 1e-12, "row {r}: mean {mean}");
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::dit::DitConfig;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    #[test]
    fn dit_output_layer_matches_burn_autodiff() {
        let (b, n, heads, hd, p_sz, ch) = (2, 4, 2, 4, 2, 1);
        let d = heads * hd;
        let out = p_sz * p_sz * ch;
        let m = |r: usize, c: usize, s: u64| Mat::new(r, c, f32_exact(randn(s, r * c, 0.5)));
        let p = DitFinalParams {
            proj_out_1_w: m(d, 2 * d, 491),
            proj_out_1_b: f32_exact(randn(492, 2 * d, 0.5)),
            proj_out_2_w: m(d, out, 493),
            proj_out_2_b: f32_exact(randn(494, out, 0.5)),
        };
        let model = load(
            DitConfig::new()
                .with_sample_size(4)
                .with_patch_size(p_sz)
                .with_num_layers(1)
                .with_num_attention_heads(heads)
                .with_attention_head_dim(hd)
                .init::<AB>(&Default::default()),
            &[
                ("proj_out_1.weight", &[d, 2 * d], &p.proj_out_1_w.data),
                ("proj_out_1.bias", &[2 * d], &p.proj_out_1_b),
                ("proj_out_2.weight", &[d, out], &p.proj_out_2_w.data),
                ("proj_out_2.bias", &[out], &p.proj_out_2_b),
            ],
        );
        let x = Mat::new(b * n, d, f32_exact(randn(495, b * n * d, 3.0)));
        let c = Mat::new(b, d, f32_exact(randn(496, b * d, 1.5)));
        let dy = Mat::new(b * n, out, randn(497, b * n * out, 1.0));
        let xt = tensor::<AB, 3>(x.data.clone(), [b, n, d]).require_grad();
        let ct = tensor::<AB, 2>(c.data.clone(), [b, d]).require_grad();
        let y = model.head(xt.clone(), ct.clone());
        let (want, cache) = forward(&x, &c, &p, n, NORM_OUT_EPS);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, n, out]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        let got = grads_by_path(&model, &grads);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-11);
        assert_close("dc", &to_vec(ct.grad(&grads).unwrap()), &g.dc.data, 1e-11);
        assert_close(
            "proj_out_1.weight",
            &got["proj_out_1.weight"],
            &g.proj_out_1_w.data,
            1e-11,
        );
        assert_close(
            "proj_out_1.bias",
            &got["proj_out_1.bias"],
            &g.proj_out_1_b,
            1e-11,
        );
        assert_close(
            "proj_out_2.weight",
            &got["proj_out_2.weight"],
            &g.proj_out_2_w.data,
            1e-11,
        );
        assert_close(
            "proj_out_2.bias",
            &got["proj_out_2.bias"],
            &g.proj_out_2_b,
            1e-11,
        );
    }
}
