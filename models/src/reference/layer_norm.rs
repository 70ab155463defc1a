//! LayerNorm over each row: `x̂ = (x − mean)/√(var + eps)`, `y = x̂·γ + β` (var biased).
//!
//! A normalised row cannot see a shift or a stretch of its input: adding a constant to every
//! element, or (eps aside) scaling the centred row, leaves `x̂` unchanged. So the gradient reaching
//! `x` has no component in those two directions. With `g = dy·γ` (the blame on `x̂`), the backward
//! pass removes both projections and rescales by the stretch the forward pass divided out:
//! `dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂))`. The gain and shift are per-column sums:
//! `dγ = Σ_rows dy·x̂`, `dβ = Σ_rows dy`.

use super::Mat;

/// What the backward pass needs: the normalised rows and each row's `1/σ`.
#[derive(Clone, Debug)]
pub struct LayerNormCache {
    pub xhat: Mat,
    pub rstd: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct LayerNormGrads {
    pub dx: Mat,
    pub dgamma: Vec<f64>,
    pub dbeta: Vec<f64>,
}

/// `x [n, c]`, `gamma [c]`, `beta [c]` → `y [n, c]`.
pub fn forward(x: &Mat, gamma: &[f64], beta: &[f64], eps: f64) -> (Mat, LayerNormCache) {
    assert_eq!(
        gamma.len(),
        x.cols,
        "layer_norm: gamma is not the row width"
    );
    assert_eq!(beta.len(), x.cols, "layer_norm: beta is not the row width");
    let c = x.cols as f64;
    let mut xhat = Mat::zeros(x.rows, x.cols);
    let mut y = Mat::zeros(x.rows, x.cols);
    let mut rstd = Vec::with_capacity(x.rows);
    for r in 0..x.rows {
        let row = x.row(r);
        let mean = row.iter().sum::<f64>() / c;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c;
        let s = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            let h = (v - mean) * s;
            *xhat.at_mut(r, j) = h;
            *y.at_mut(r, j) = h * gamma[j] + beta[j];
        }
        rstd.push(s);
    }
    (y, LayerNormCache { xhat, rstd })
}

/// Given `dy [n, c]`, the gradients with respect to `x`, `gamma` and `beta`.
pub fn backward(cache: &LayerNormCache, gamma: &[f64], dy: &Mat) -> LayerNormGrads {
    let (n, c) = (dy.rows, dy.cols);
    let mut dx = Mat::zeros(n, c);
    let mut dgamma = vec![0.0; c];
    let mut dbeta = vec![0.0; c];
    for r in 0..n {
        let xh = cache.xhat.row(r);
        let g: Vec<f64> = dy.row(r).iter().zip(gamma).map(|(d, w)| d * w).collect();
        let mean_g = g.iter().sum::<f64>() / c as f64;
        let mean_gx = g.iter().zip(xh).map(|(a, b)| a * b).sum::<f64>() / c as f64;
        for j in 0..c {
            *dx.at_mut(r, j) = cache.rstd[r] * (g[j] - mean_g - xh[j] * mean_gx);
            dgamma[j] += dy.at(r, j) * xh[j];
            dbeta[j] += dy.at(r, j);
        }
    }
    LayerNormGrads { dx, dgamma, dbeta }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    /// Truncation of the centred difference is `h²·|L'''|/6`: with rows of std 3 the third
    /// derivative in `x` carries `1/σ³ ≈ 1/27`, so the error is ~1e-8 of the gradient. Measured
    /// (printed): dx 1.3e-8, dγ and dβ ~1e-12 (L is linear in them, so only rounding is left).
    /// 1e-6 leaves room and is ~1e-6 of what a lost γ or 1/σ costs.
    pub(crate) const TOL: f64 = 1e-6;
    const EPS: f64 = 1e-5;
    const N: usize = 5;
    const C: usize = 8;

    /// The worst relative difference, over dx, dγ and dβ, between `backward` and a centred
    /// difference of `L = Σ y ⊙ dy`, at inputs of std 3 (so 1/σ is far from 1), a gain of 1 ± 0.5
    /// noise and a non-zero shift.
    pub(crate) fn worst(backward: impl Fn(&LayerNormCache, &[f64], &Mat) -> LayerNormGrads) -> f64 {
        let x = Mat::new(N, C, randn(31, N * C, 3.0));
        let gamma: Vec<f64> = randn(32, C, 0.5).iter().map(|v| 1.0 + v).collect();
        let beta = randn(33, C, 0.5);
        let dy = Mat::new(N, C, randn(34, N * C, 1.0));
        let loss = |x: &Mat, g: &[f64], b: &[f64]| -> f64 {
            let (y, _) = forward(x, g, b, EPS);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        };
        let h = 1e-3;
        let nx = numerical_grad(&x.data, h, |v| {
            loss(&Mat::new(N, C, v.to_vec()), &gamma, &beta)
        });
        let ng = numerical_grad(&gamma, h, |v| loss(&x, v, &beta));
        let nb = numerical_grad(&beta, h, |v| loss(&x, &gamma, v));
        let (_, cache) = forward(&x, &gamma, &beta, EPS);
        let g = backward(&cache, &gamma, &dy);
        let mut worst = 0.0f64;
        for (name, a, n) in [
            ("dx", &g.dx.data, &nx),
            ("dgamma", &g.dgamma, &ng),
            ("dbeta", &g.dbeta, &nb),
        ] {
            let r = worst_rel(a, n);
            println!("layer_norm {name}: worst relative difference {r:.2e}");
            worst = worst.max(r);
        }
        worst
    }

    #[test]
    fn layer_norm_backward_matches_numerical() {
        let r = worst(backward);
        assert!(r <= TOL, "layer_norm: {r:.3e}");
    }

    #[test]
    fn a_large_shift_is_invisible_because_the_variance_is_taken_about_the_mean() {
        // Rows of std 3 shifted by 1e6: the two-pass variance Σ(v − m)²/c sees only the spread,
        // while the one-pass form Σ(v² − m²)/c, equal on paper, cancels 1e12-sized terms and
        // keeps ~1e-4 of error. The outputs must match the unshifted rows' to 1e-8.
        let (n, c) = (4, 8);
        let x = Mat::new(n, c, randn(51, n * c, 3.0));
        let shifted = Mat::new(n, c, x.data.iter().map(|v| v + 1e6).collect());
        let gamma = vec![1.0; c];
        let beta = vec![0.0; c];
        let (y, _) = forward(&x, &gamma, &beta, EPS);
        let (ys, _) = forward(&shifted, &gamma, &beta, EPS);
        let r = worst_rel(&ys.data, &y.data);
        assert!(r < 1e-8, "shifted rows normalise differently: {r:e}");
    }

    #[test]
    fn gradient_has_no_shift_or_stretch_component() {
        // The two projections the derivation removes: Σ_j dx_j = 0 and Σ_j dx_j·x̂_j = 0 per row.
        // The second holds exactly only without eps (with it, a stretch moves x̂ by a factor
        // depending on eps/(var + eps)), so this test sets eps to zero.
        let x = Mat::new(N, C, randn(35, N * C, 3.0));
        let gamma: Vec<f64> = randn(36, C, 0.5).iter().map(|v| 1.0 + v).collect();
        let (_, cache) = forward(&x, &gamma, &[0.0; C], 0.0);
        let g = backward(&cache, &gamma, &Mat::new(N, C, randn(37, N * C, 1.0)));
        for r in 0..N {
            let s: f64 = g.dx.row(r).iter().sum();
            let p: f64 =
                g.dx.row(r)
                    .iter()
                    .zip(cache.xhat.row(r))
                    .map(|(a, b)| a * b)
                    .sum();
            assert!(s.abs() < 1e-14 && p.abs() < 1e-14, "row {r}: {s:e} {p:e}");
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};
    use burn::nn::LayerNormConfig;

    #[test]
    fn layer_norm_backward_matches_burn_autodiff() {
        let (r, c) = (5, 8);
        let x = Mat::new(r, c, f32_exact(randn(311, r * c, 3.0)));
        let gamma = f32_exact(randn(312, c, 0.5).iter().map(|v| 1.0 + v).collect());
        let beta = f32_exact(randn(313, c, 0.5));
        let dy = Mat::new(r, c, randn(314, r * c, 1.0));
        let ln = load(
            LayerNormConfig::new(c).init::<AB>(&Default::default()),
            &[("gamma", &[c], &gamma), ("beta", &[c], &beta)],
        );
        let xt = tensor::<AB, 2>(x.data.clone(), [r, c]).require_grad();
        let y = ln.forward(xt.clone());
        let (want, cache) = forward(&x, &gamma, &beta, 1e-5);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [r, c]))
            .sum()
            .backward();
        let g = backward(&cache, &gamma, &dy);
        let p = grads_by_path(&ln, &grads);
        // f64 both sides: ~1e-15 from summation order.
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        assert_close("dgamma", &p["gamma"], &g.dgamma, 1e-12);
        assert_close("dbeta", &p["beta"], &g.dbeta, 1e-12);
    }
}
