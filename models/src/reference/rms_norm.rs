//! RMSNorm over each row: `y = x/√(mean(x²) + eps) · γ`.
//!
//! Unlike LayerNorm it does not centre, so a shift of the input is seen and only a stretch is not:
//! scaling the row leaves `x̂ = x·r` unchanged (eps aside), with `r = 1/√(mean(x²) + eps)`. The
//! backward pass therefore removes one projection where LayerNorm removes two: with `g = dy·γ`,
//! `dx = r·(g − x̂·mean(g·x̂))`, and `dγ = Σ_rows dy·x̂`.

use super::Mat;

/// What the backward pass needs: the normalised rows and each row's `r = 1/rms`.
#[derive(Clone, Debug)]
pub struct RmsNormCache {
    pub xhat: Mat,
    pub rrms: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct RmsNormGrads {
    pub dx: Mat,
    pub dgamma: Vec<f64>,
}

/// `x [n, c]`, `gamma [c]` → `y [n, c]`.
pub fn forward(x: &Mat, gamma: &[f64], eps: f64) -> (Mat, RmsNormCache) {
    assert_eq!(gamma.len(), x.cols, "rms_norm: gamma is not the row width");
    let mut xhat = Mat::zeros(x.rows, x.cols);
    let mut y = Mat::zeros(x.rows, x.cols);
    let mut rrms = Vec::with_capacity(x.rows);
    for r in 0..x.rows {
        let row = x.row(r);
        let ms = row.iter().map(|v| v * v).sum::<f64>() / x.cols as f64;
        let s = 1.0 / (ms + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            *xhat.at_mut(r, j) = v * s;
            *y.at_mut(r, j) = v * s * gamma[j];
        }
        rrms.push(s);
    }
    (y, RmsNormCache { xhat, rrms })
}

/// Given `dy [n, c]`, the gradients with respect to `x` and `gamma`.
pub fn backward(cache: &RmsNormCache, gamma: &[f64], dy: &Mat) -> RmsNormGrads {
    let (n, c) = (dy.rows, dy.cols);
    let mut dx = Mat::zeros(n, c);
    let mut dgamma = vec![0.0; c];
    for r in 0..n {
        let xh = cache.xhat.row(r);
        let g: Vec<f64> = dy.row(r).iter().zip(gamma).map(|(d, w)| d * w).collect();
        let mean_gx = g.iter().zip(xh).map(|(a, b)| a * b).sum::<f64>() / c as f64;
        for j in 0..c {
            *dx.at_mut(r, j) = cache.rrms[r] * (g[j] - xh[j] * mean_gx);
            dgamma[j] += dy.at(r, j) * xh[j];
        }
    }
    RmsNormGrads { dx, dgamma }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const EPS: f64 = 1e-5;
    const N: usize = 5;
    const C: usize = 8;

    #[test]
    fn rms_norm_backward_matches_numerical() {
        // Inputs of std 3 with a mean of 1 (a shift RMSNorm must see), gain 1 ± 0.5 noise.
        let x = Mat::new(
            N,
            C,
            randn(41, N * C, 3.0).iter().map(|v| v + 1.0).collect(),
        );
        let gamma: Vec<f64> = randn(42, C, 0.5).iter().map(|v| 1.0 + v).collect();
        let dy = Mat::new(N, C, randn(43, N * C, 1.0));
        let loss = |x: &Mat, g: &[f64]| -> f64 {
            let (y, _) = forward(x, g, EPS);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        };
        let h = 1e-3;
        let nx = numerical_grad(&x.data, h, |v| loss(&Mat::new(N, C, v.to_vec()), &gamma));
        let ng = numerical_grad(&gamma, h, |v| loss(&x, v));
        let (_, cache) = forward(&x, &gamma, EPS);
        let g = backward(&cache, &gamma, &dy);
        // As for LayerNorm: truncation h²·|L'''|/6 with L''' ∝ 1/rms³ (rms ≈ 3), ~1e-8 relative
        // (measured, printed: dx 1.1e-8, dγ 4e-13); 1e-6 is a safe ceiling and a millionth of a
        // missing γ or 1/rms.
        for (name, a, n) in [("dx", &g.dx.data, &nx), ("dgamma", &g.dgamma, &ng)] {
            println!(
                "rms_norm {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-6);
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::norm::{Norm, NormKind};
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    #[test]
    fn rms_norm_and_layer_norm_modules_match_the_reference() {
        let (r, c) = (5, 8);
        let x = Mat::new(r, c, f32_exact(randn(521, r * c, 3.0)));
        let gamma = f32_exact(randn(522, c, 0.5).iter().map(|v| 1.0 + v).collect());
        let dy = Mat::new(r, c, randn(523, r * c, 1.0));
        let norm = load(
            Norm::<AB>::new(NormKind::RmsNorm, c, 1e-5, &Default::default()),
            &[("gamma", &[c], &gamma)],
        );
        let xt = tensor::<AB, 2>(x.data.clone(), [r, c]).require_grad();
        let y = norm.forward(xt.clone());
        let (want, cache) = forward(&x, &gamma, 1e-5);
        // Our module computes in the backend's precision (Burn's RmsNorm would not): ~1e-16.
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [r, c]))
            .sum()
            .backward();
        let g = backward(&cache, &gamma, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        assert_close(
            "dgamma",
            &grads_by_path(&norm, &grads)["gamma"],
            &g.dgamma,
            1e-12,
        );

        let beta = f32_exact(randn(524, c, 0.5));
        let ln = load(
            Norm::<AB>::new(NormKind::LayerNorm, c, 1e-5, &Default::default()),
            &[("gamma", &[c], &gamma), ("beta", &[c], &beta)],
        );
        let xt = tensor::<AB, 2>(x.data.clone(), [r, c]).require_grad();
        let y = ln.forward(xt.clone());
        let (want, cache) = crate::reference::layer_norm::forward(&x, &gamma, &beta, 1e-5);
        assert_close("ln y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [r, c]))
            .sum()
            .backward();
        let g = crate::reference::layer_norm::backward(&cache, &gamma, &dy);
        let p = grads_by_path(&ln, &grads);
        assert_close(
            "ln dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &g.dx.data,
            1e-12,
        );
        assert_close("ln dgamma", &p["gamma"], &g.dgamma, 1e-12);
        assert_close("ln dbeta", &p["beta"], &g.dbeta, 1e-12);
    }
}
