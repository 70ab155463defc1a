//! The two pieces of adaLN-Zero (DiT, Peebles & Xie 2023): a LayerNorm whose gain and shift come
//! from the conditioning, and a residual whose branch is scaled by a conditioned gate.
//!
//! **Modulate.** `y = x̂·(1 + scale_b) + shift_b` for every token of sample `b`, with `x̂` the
//! LayerNorm of the token without gain or bias (population variance, `eps` given: diffusers uses
//! 1e-6 in `AdaLayerNormZero` and in `norm_out`, 1e-5 — the config's `norm_eps` — before the
//! feed-forward). It is LayerNorm with a per-sample gain `γ_b = 1 + scale_b`, so `dx` is
//! LayerNorm's backward pass with that gain; and since one `shift_b` (one `scale_b`) serves all N
//! tokens of sample b, its gradient is the sum of the blame of those tokens:
//! `dshift_b = Σ_n dy`, `dscale_b = Σ_n dy ⊙ x̂`. The `1 +` means a zero `scale` is the identity
//! gain; forgetting it (in either pass) makes a freshly initialised model multiply by zero.
//!
//! **Gated residual.** `y = x + gate_b ⊙ branch`. Backward: `dx = dy` (the residual path),
//! `dbranch = gate_b ⊙ dy`, `dgate_b = Σ_n branch ⊙ dy`. adaLN-Zero initialises the linear layer
//! that produces the gates to zero, so at step 0 every gate is 0 and every block is exactly the
//! identity: a deep stack starts as a well-conditioned identity map, and each block fades in only
//! as far as training finds it useful. Zero gates do not freeze training: `dgate = Σ branch ⊙ dy`
//! does not contain the gate, so it is non-zero from the first step, while `dbranch = gate ⊙ dy`
//! is zero then. The first update moves only the gates (and whatever produces them); the
//! branches start learning once the gates have opened. (The shifts and scales, also produced by
//! the zeroed layer, start at 0 too: the identity gain, thanks to the `1 +`.)

use super::{Mat, layer_norm};

/// What the backward pass of [`modulate`] needs.
#[derive(Clone, Debug)]
pub struct ModulateCache {
    /// The normalised tokens `[B·N, D]` and each token's `1/σ`.
    pub norm: layer_norm::LayerNormCache,
    /// `scale [B, D]`.
    pub scale: Mat,
    /// Tokens per sample.
    pub n: usize,
}

/// Gradients of [`modulate`].
#[derive(Clone, Debug)]
pub struct ModulateGrads {
    /// `[B·N, D]`.
    pub dx: Mat,
    /// `[B, D]`.
    pub dshift: Mat,
    /// `[B, D]`.
    pub dscale: Mat,
}

/// Gradients of [`gated_residual`].
#[derive(Clone, Debug)]
pub struct GatedGrads {
    /// `[B·N, D]`.
    pub dx: Mat,
    /// `[B, D]`.
    pub dgate: Mat,
    /// `[B·N, D]`.
    pub dbranch: Mat,
}

fn check_per_sample(x: &Mat, v: &Mat, n: usize, what: &str) {
    assert!(
        n > 0 && x.rows.is_multiple_of(n),
        "{what}: rows not a multiple of N"
    );
    assert_eq!(
        (v.rows, v.cols),
        (x.rows / n, x.cols),
        "{what}: per-sample vectors must be [B, D]"
    );
}

/// `x [B·N, D]`, `shift [B, D]`, `scale [B, D]` → `LN(x)·(1 + scale_b) + shift_b`, `[B·N, D]`.
pub fn modulate(x: &Mat, shift: &Mat, scale: &Mat, n: usize, eps: f64) -> (Mat, ModulateCache) {
    check_per_sample(x, shift, n, "modulate shift");
    check_per_sample(x, scale, n, "modulate scale");
    let d = x.cols;
    let (mut y, norm) = layer_norm::forward(x, &vec![1.0; d], &vec![0.0; d], eps);
    for r in 0..y.rows {
        let b = r / n;
        for j in 0..d {
            let e = y.at_mut(r, j);
            *e = *e * (1.0 + scale.at(b, j)) + shift.at(b, j);
        }
    }
    let cache = ModulateCache {
        norm,
        scale: scale.clone(),
        n,
    };
    (y, cache)
}

/// Given `dy [B·N, D]`, the gradients with respect to `x`, `shift` and `scale`.
pub fn modulate_backward(cache: &ModulateCache, dy: &Mat) -> ModulateGrads {
    let (n, d) = (cache.n, dy.cols);
    let batch = dy.rows / n;
    let mut dxhat = Mat::zeros(dy.rows, d);
    let mut dshift = Mat::zeros(batch, d);
    let mut dscale = Mat::zeros(batch, d);
    for r in 0..dy.rows {
        let b = r / n;
        for j in 0..d {
            let g = dy.at(r, j);
            *dxhat.at_mut(r, j) = g * (1.0 + cache.scale.at(b, j));
            *dshift.at_mut(b, j) += g;
            *dscale.at_mut(b, j) += g * cache.norm.xhat.at(r, j);
        }
    }
    // LayerNorm's backward pass with unit gain, fed the blame on x̂ (the gain already applied).
    let dx = layer_norm::backward(&cache.norm, &vec![1.0; d], &dxhat).dx;
    ModulateGrads { dx, dshift, dscale }
}

/// `x [B·N, D]`, `gate [B, D]`, `branch [B·N, D]` → `x + gate_b ⊙ branch`, `[B·N, D]`.
pub fn gated_residual(x: &Mat, gate: &Mat, branch: &Mat, n: usize) -> Mat {
    check_per_sample(x, gate, n, "gated_residual gate");
    assert_eq!(
        (x.rows, x.cols),
        (branch.rows, branch.cols),
        "gated_residual: x and branch shapes differ"
    );
    let mut y = x.clone();
    for r in 0..y.rows {
        for j in 0..y.cols {
            *y.at_mut(r, j) += gate.at(r / n, j) * branch.at(r, j);
        }
    }
    y
}

/// Given `dy [B·N, D]`, the gradients with respect to `x`, `gate` and `branch`.
pub fn gated_residual_backward(gate: &Mat, branch: &Mat, dy: &Mat, n: usize) -> GatedGrads {
    let mut dgate = Mat::zeros(gate.rows, gate.cols);
    let mut dbranch = Mat::zeros(dy.rows, dy.cols);
    for r in 0..dy.rows {
        let b = r / n;
        for j in 0..dy.cols {
            let g = dy.at(r, j);
            *dgate.at_mut(b, j) += branch.at(r, j) * g;
            *dbranch.at_mut(r, j) = gate.at(b, j) * g;
        }
    }
    GatedGrads {
        dx: dy.clone(),
        dgate,
        dbranch,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    pub(crate) const B: usize = 2;
    pub(crate) const N: usize = 5;
    pub(crate) const D: usize = 8;
    const EPS: f64 = 1e-6;

    /// Modulate's tolerance. As for LayerNorm, the truncation `h²·|L'''|/6` carries `1/σ³` with
    /// σ ≈ 3, ~1e-8 of the gradient; dshift and dscale are linear (rounding only). 1e-6 is the
    /// ceiling; a missing `1 +` costs order 1.
    pub(crate) const TOL: f64 = 1e-6;
    /// The gated residual is bilinear in (gate, branch) and linear in each alone, so the centred
    /// difference is exact but for rounding (~1e-12); 1e-9 admits nothing else.
    pub(crate) const GATE_TOL: f64 = 1e-9;

    /// Per-sample vectors with every entry at least 0.3 away from 0 (std 0.5 noise pushed out),
    /// so a lost `1 +` or gate factor changes every coordinate visibly.
    pub(crate) fn away_from_zero(seed: u64, n: usize) -> Vec<f64> {
        randn(seed, n, 0.5)
            .iter()
            .map(|v| v + 0.3 * v.signum())
            .collect()
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    /// The worst relative difference, over dx, dshift and dscale, between `backward` and a
    /// centred difference of `L = Σ y ⊙ dy`, at tokens of std 3 with a mean of 1.
    pub(crate) fn worst_modulate(backward: impl Fn(&ModulateCache, &Mat) -> ModulateGrads) -> f64 {
        let x = Mat::new(
            B * N,
            D,
            randn(231, B * N * D, 3.0).iter().map(|v| v + 1.0).collect(),
        );
        let shift = Mat::new(B, D, away_from_zero(232, B * D));
        let scale = Mat::new(B, D, away_from_zero(233, B * D));
        let dy = Mat::new(B * N, D, randn(234, B * N * D, 1.0));
        let loss = |x: &Mat, sh: &Mat, sc: &Mat| dot(&modulate(x, sh, sc, N, EPS).0, &dy);
        let h = 1e-3;
        let m = |v: &[f64], r| Mat::new(r, D, v.to_vec());
        let nx = numerical_grad(&x.data, h, |v| loss(&m(v, B * N), &shift, &scale));
        let nsh = numerical_grad(&shift.data, h, |v| loss(&x, &m(v, B), &scale));
        let nsc = numerical_grad(&scale.data, h, |v| loss(&x, &shift, &m(v, B)));
        let (_, cache) = modulate(&x, &shift, &scale, N, EPS);
        let g = backward(&cache, &dy);
        let mut worst = 0.0f64;
        for (name, a, n) in [
            ("dx", &g.dx.data, &nx),
            ("dshift", &g.dshift.data, &nsh),
            ("dscale", &g.dscale.data, &nsc),
        ] {
            let r = worst_rel(a, n);
            println!("modulate {name}: worst relative difference {r:.2e}");
            worst = worst.max(r);
        }
        worst
    }

    /// The same for the gated residual, over dx, dgate and dbranch.
    pub(crate) fn worst_gated(backward: impl Fn(&Mat, &Mat, &Mat, &Mat) -> GatedGrads) -> f64 {
        let x = Mat::new(B * N, D, randn(235, B * N * D, 3.0));
        let gate = Mat::new(B, D, away_from_zero(236, B * D));
        let branch = Mat::new(B * N, D, randn(237, B * N * D, 3.0));
        let dy = Mat::new(B * N, D, randn(238, B * N * D, 1.0));
        let loss = |x: &Mat, g: &Mat, br: &Mat| dot(&gated_residual(x, g, br, N), &dy);
        let h = 1e-3;
        let m = |v: &[f64], r| Mat::new(r, D, v.to_vec());
        let nx = numerical_grad(&x.data, h, |v| loss(&m(v, B * N), &gate, &branch));
        let ng = numerical_grad(&gate.data, h, |v| loss(&x, &m(v, B), &branch));
        let nb = numerical_grad(&branch.data, h, |v| loss(&x, &gate, &m(v, B * N)));
        let g = backward(&x, &gate, &branch, &dy);
        let mut worst = 0.0f64;
        for (name, a, n) in [
            ("dx", &g.dx.data, &nx),
            ("dgate", &g.dgate.data, &ng),
            ("dbranch", &g.dbranch.data, &nb),
        ] {
            let r = worst_rel(a, n);
            println!("gated_residual {name}: worst relative difference {r:.2e}");
            worst = worst.max(r);
        }
        worst
    }

    #[test]
    fn modulate_backward_matches_numerical() {
        let r = worst_modulate(modulate_backward);
        assert!(r <= TOL, "modulate: {r:.3e}");
    }

    #[test]
    fn gated_residual_backward_matches_numerical() {
        let r = worst_gated(|_, g, br, dy| gated_residual_backward(g, br, dy, N));
        assert!(r <= GATE_TOL, "gated_residual: {r:.3e}");
    }

    #[test]
    fn zero_conditioning_is_plain_layer_norm_and_zero_gate_is_identity() {
        let x = Mat::new(B * N, D, randn(239, B * N * D, 3.0));
        let zero = Mat::zeros(B, D);
        let (y, _) = modulate(&x, &zero, &zero, N, EPS);
        let (ln, _) = layer_norm::forward(&x, &[1.0; D], &[0.0; D], EPS);
        // x̂·(1 + 0) + 0 = x̂ exactly.
        assert_eq!(y, ln);
        let branch = Mat::new(B * N, D, randn(240, B * N * D, 3.0));
        assert_eq!(gated_residual(&x, &zero, &branch, N), x);
        // At zero gate the branch gets no gradient, but the gate does: Σ branch ⊙ dy.
        let dy = Mat::new(B * N, D, randn(241, B * N * D, 1.0));
        let g = gated_residual_backward(&zero, &branch, &dy, N);
        assert!(g.dbranch.data.iter().all(|&v| v == 0.0));
        assert!(g.dgate.data.iter().all(|&v| v != 0.0));
        assert_eq!(g.dx, dy);
    }

    /// A per-sample vector with a row too many would be read without an index error (sample b
    /// takes row b, the extra row is never touched), silently pairing tokens with the wrong
    /// conditioning if the batch were laid out differently: it is refused.
    #[test]
    #[should_panic(expected = "per-sample vectors must be [B, D]")]
    fn a_shift_with_a_row_too_many_is_refused() {
        let x = Mat::new(B * N, D, randn(242, B * N * D, 1.0));
        let wrong = Mat::zeros(B + 1, D);
        let _ = modulate(&x, &wrong, &Mat::zeros(B, D), N, EPS);
    }

    #[test]
    #[should_panic(expected = "per-sample vectors must be [B, D]")]
    fn a_gate_with_a_row_too_many_is_refused() {
        let x = Mat::new(B * N, D, randn(243, B * N * D, 1.0));
        let _ = gated_residual(&x, &Mat::zeros(B + 1, D), &x, N);
    }

    #[test]
    #[should_panic(expected = "rows not a multiple of N")]
    fn tokens_that_do_not_fill_whole_samples_are_refused() {
        // B·N + 1 rows: (B·N + 1) / N = B per-sample rows would pass the shape test.
        let x = Mat::new(B * N + 1, D, randn(244, (B * N + 1) * D, 1.0));
        let _ = modulate(&x, &Mat::zeros(B, D), &Mat::zeros(B, D), N, EPS);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, randn, tensor, to_vec};

    #[test]
    fn modulate_and_gated_residual_match_burn_autodiff() {
        let (b, n, d) = (2, 3, 8);
        let x = Mat::new(b * n, d, randn(421, b * n * d, 3.0));
        let shift = Mat::new(b, d, randn(422, b * d, 0.7));
        let scale = Mat::new(b, d, randn(423, b * d, 0.7));
        let dy = Mat::new(b * n, d, randn(424, b * n * d, 1.0));
        let xt = tensor::<AB, 3>(x.data.clone(), [b, n, d]).require_grad();
        let st = tensor::<AB, 2>(shift.data.clone(), [b, d]).require_grad();
        let ct = tensor::<AB, 2>(scale.data.clone(), [b, d]).require_grad();
        let y = crate::modulate::modulate(
            crate::modulate::layer_norm_plain(xt.clone(), 1e-6),
            st.clone(),
            ct.clone(),
        );
        let (want, cache) = modulate(&x, &shift, &scale, n, 1e-6);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, n, d]))
            .sum()
            .backward();
        let g = modulate_backward(&cache, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-11);
        assert_close(
            "dshift",
            &to_vec(st.grad(&grads).unwrap()),
            &g.dshift.data,
            1e-11,
        );
        assert_close(
            "dscale",
            &to_vec(ct.grad(&grads).unwrap()),
            &g.dscale.data,
            1e-11,
        );

        let gate = Mat::new(b, d, randn(425, b * d, 0.7));
        let branch = Mat::new(b * n, d, randn(426, b * n * d, 2.0));
        let xt = tensor::<AB, 3>(x.data.clone(), [b, n, d]).require_grad();
        let gt = tensor::<AB, 2>(gate.data.clone(), [b, d]).require_grad();
        let bt = tensor::<AB, 3>(branch.data.clone(), [b, n, d]).require_grad();
        let y = crate::modulate::gated(xt.clone(), gt.clone(), bt.clone());
        assert_close(
            "gated",
            &to_vec(y.clone()),
            &gated_residual(&x, &gate, &branch, n).data,
            1e-15,
        );
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, n, d]))
            .sum()
            .backward();
        let g = gated_residual_backward(&gate, &branch, &dy, n);
        assert_close(
            "gated dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &g.dx.data,
            1e-15,
        );
        assert_close(
            "dgate",
            &to_vec(gt.grad(&grads).unwrap()),
            &g.dgate.data,
            1e-13,
        );
        assert_close(
            "dbranch",
            &to_vec(bt.grad(&grads).unwrap()),
            &g.dbranch.data,
            1e-15,
        );
    }
}
