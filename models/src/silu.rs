//! SiLU, `x·σ(x)`, written out: Burn 0.21's `sigmoid` (and so its `silu`) casts to f32 inside the
//! default implementation, which costs ~1e-7 of accuracy on an f64 backend and would hide behind
//! it any parity test of the layers that use it. `x / (1 + e^{−x})` stays in the backend's precision.
//! The exponent is clamped (see [`crate::gelu`]): unclamped, `e^{−x}` overflows for `x < −88` in
//! f32 and the backward pass turns `0·∞` into NaN.

use burn::prelude::*;

/// Shapes: any → the same.
pub fn silu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.clone() / (x.neg().clamp_max(crate::fused::composed::EXP_CLAMP).exp() + 1.0)
}

#[cfg(test)]
mod tests {
    use crate::testing::{AB, TB, tensor, to_vec};
    use burn::prelude::*;

    #[test]
    fn silu_is_exact_in_f64_and_finite_at_the_extremes() {
        let x = Tensor::<TB, 1>::from_data([-800.0, -3.0, 0.0, 2.5, 800.0], &Default::default());
        let got = to_vec(super::silu(x));
        let want: Vec<f64> = [-800.0f64, -3.0, 0.0, 2.5, 800.0]
            .iter()
            .map(|x| {
                if *x < -80.0 {
                    x / (1.0 + 80f64.exp())
                } else {
                    x / (1.0 + (-x).exp())
                }
            })
            .collect();
        assert_eq!(got, want);
        assert!(got.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn gradient_is_finite_far_out() {
        let xs = vec![-1e4, -100.0, -90.0, 90.0, 1e4];
        let x = tensor::<AB, 1>(xs.clone(), [xs.len()]).require_grad();
        let g = to_vec(x.grad(&super::silu(x.clone()).sum().backward()).unwrap());
        assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
    }
}
