//! GELU, tanh form (GPT-2's `gelu_new`): `y = ½·x·(1 + tanh u)`, `u = √(2/π)·(x + 0.044715·x³)`.
//!
//! By the product rule the slope has two parts: `½·(1 + tanh u)`, the gate as it stands, and
//! `½·x·(1 − tanh² u)·du/dx`, how the gate opens as x moves, where
//! `du/dx = √(2/π)·(1 + 3·0.044715·x²)`. Both need `tanh u`, so the forward pass keeps it rather
//! than the backward pass recomputing it. The `3` of the cube's derivative is the factor most
//! easily lost.

use super::Mat;

/// `√(2/π)`.
pub const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh approximation.
pub const CUBIC: f64 = 0.044_715;

/// What the backward pass needs: the input and `tanh(u)` for every element.
#[derive(Clone, Debug)]
pub struct GeluCache {
    pub x: Mat,
    pub tanh: Mat,
}

/// `x [n, c]` → `y [n, c]`, elementwise.
pub fn forward(x: &Mat) -> (Mat, GeluCache) {
    let tanh: Vec<f64> = x
        .data
        .iter()
        .map(|&v| (SQRT_2_OVER_PI * (v + CUBIC * v * v * v)).tanh())
        .collect();
    let y = x
        .data
        .iter()
        .zip(&tanh)
        .map(|(&v, &t)| 0.5 * v * (1.0 + t))
        .collect();
    (
        Mat::new(x.rows, x.cols, y),
        GeluCache {
            x: x.clone(),
            tanh: Mat::new(x.rows, x.cols, tanh),
        },
    )
}

/// `dx = dy · gelu'(x)`, elementwise, given `dy [n, c]`.
pub fn backward(cache: &GeluCache, dy: &Mat) -> Mat {
    let dx = cache
        .x
        .data
        .iter()
        .zip(&cache.tanh.data)
        .zip(&dy.data)
        .map(|((&x, &t), &d)| {
            let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x * x);
            d * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
        })
        .collect();
    Mat::new(dy.rows, dy.cols, dx)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    /// GELU is smooth; the centred difference's truncation error is `h²·|y'''|/6`, and |y'''| is
    /// at most ~2 here, so the error is below ~3e-7 of a gradient of size ~1. Measured (printed):
    /// 1.2e-7. 1e-6 sits above that and is 1/20,000 of what a lost 3 costs (2e-2).
    pub(crate) const TOL: f64 = 1e-6;

    /// The worst relative difference between `backward` and a centred difference of
    /// `L = Σ gelu(x) ⊙ dy`, at inputs of std 3 (the slope's every regime: 0, 1, and the bump).
    pub(crate) fn worst(backward: impl Fn(&GeluCache, &Mat) -> Mat) -> f64 {
        let x = Mat::new(6, 7, randn(21, 42, 3.0));
        let dy = Mat::new(6, 7, randn(22, 42, 1.0));
        let n = numerical_grad(&x.data, 1e-3, |v| {
            let (y, _) = forward(&Mat::new(6, 7, v.to_vec()));
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        });
        let (_, cache) = forward(&x);
        worst_rel(&backward(&cache, &dy).data, &n)
    }

    #[test]
    fn gelu_backward_matches_numerical() {
        let r = worst(backward);
        println!("gelu dx: worst relative difference {r:.2e}");
        assert!(r <= TOL, "gelu dx: {r:.3e}");
    }

    #[test]
    fn gelu_is_the_tanh_form() {
        // GPT-2's gelu_new at 1 and −2, as Python's math module computes it.
        let (y, _) = forward(&Mat::new(1, 2, vec![1.0, -2.0]));
        assert!((y.data[0] - 0.841_191_990_608_276_8).abs() < 1e-14);
        assert!((y.data[1] + 0.045_402_305_912_224_94).abs() < 1e-14);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::gelu::gelu_tanh;
    use crate::testing::{AB, assert_close, f32_exact, randn, tensor, to_vec};

    #[test]
    fn gelu_backward_matches_burn_autodiff() {
        let x = Mat::new(4, 6, f32_exact(randn(301, 24, 3.0)));
        let dy = Mat::new(4, 6, randn(302, 24, 1.0));
        let xt = tensor::<AB, 2>(x.data.clone(), [4, 6]).require_grad();
        let y = gelu_tanh(xt.clone());
        let (want, cache) = forward(&x);
        // f64 on both sides; the formulas are the same, so only rounding differs (~1e-16).
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-13);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [4, 6]))
            .sum()
            .backward();
        assert_close(
            "dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &backward(&cache, &dy).data,
            1e-12,
        );
    }
}
