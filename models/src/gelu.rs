//! GELU in GPT-2's tanh form (`gelu_new`, diffusers' `gelu-approximate`):
//! `0.5·x·(1 + tanh(z))` with `z = √(2/π)·(x + 0.044715·x³)`.
//!
//! Written as `x·σ(2z) = x / (1 + e^{−2z})`, which is the same function (`(1 + tanh z)/2 = σ(2z)`)
//! and costs one `exp` where `tanh` costs an `expm1` and more, and `x·x·x` where `powf(x, 3)` costs
//! a logarithm and an exponential: measured on the DiT, Burn's `gelu_approximate` spent a quarter
//! of a CPU training step in `tanh` and `powf`.
//!
//! The exponent is clamped at 80 before `exp`. Without the clamp, a pre-activation below about −10
//! overflows `e^{−2z}` to infinity in f32: the value is still right (`x/∞ = 0`) but the backward pass
//! multiplies a zero upstream gradient by `exp'(·) = ∞` and makes NaN. That is exactly what killed
//! a DiT run at step 1094 with its loss at 0.27. Past the clamp `x·σ(2z)` is below 1e-33 of `x`, and
//! its gradient is correctly zero.

use burn::prelude::*;

/// Shapes: any → the same. One fused op with its own backward where the backend has it
/// ([`crate::fused::gelu_tanh`]), else the composed formula above.
pub fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    crate::fused::gelu_tanh(x)
}

#[cfg(test)]
mod tests {
    use crate::testing::{AB, TB, tensor, to_vec};

    #[test]
    fn equals_the_tanh_form_and_stays_finite() {
        let xs = vec![-1e4, -30.0, -3.0, -0.5, 0.0, 0.7, 2.0, 30.0, 1e4];
        let got = to_vec(super::gelu_tanh(tensor::<TB, 1>(xs.clone(), [xs.len()])));
        for (x, g) in xs.iter().zip(&got) {
            let want = 0.5
                * x
                * (1.0
                    + (crate::fused::composed::SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh());
            assert!(g.is_finite(), "gelu({x}) = {g}");
            assert!(
                (g - want).abs() <= 1e-14 * want.abs().max(1.0),
                "gelu({x}) = {g}, tanh form {want}"
            );
        }
    }

    /// The regression: far out on either side the gradient is finite (0 on the left, 1 on the
    /// right), in f32 where the overflow happened and in f64. (Checked to fail without the clamp.)
    #[test]
    fn gradient_is_finite_far_out_on_both_sides() {
        let xs = vec![-1e4, -500.0, -60.0, -12.0, -10.5, 10.5, 60.0, 500.0];
        let x = tensor::<AB, 1>(xs.clone(), [xs.len()]).require_grad();
        let g = to_vec(
            x.grad(&super::gelu_tanh(x.clone()).sum().backward())
                .unwrap(),
        );
        for (x, g) in xs.iter().zip(&g) {
            assert!(g.is_finite(), "gelu'({x}) = {g}");
            let want = if *x < 0.0 { 0.0 } else { 1.0 };
            assert!((g - want).abs() < 1e-6, "gelu'({x}) = {g}");
        }
        type F = burn::backend::Autodiff<burn::backend::Flex>;
        let xs32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
        let x = burn::tensor::Tensor::<F, 1>::from_data(
            burn::tensor::TensorData::new(xs32, [xs.len()]),
            &Default::default(),
        )
        .require_grad();
        let g: Vec<f32> = x
            .grad(&super::gelu_tanh(x.clone()).sum().backward())
            .unwrap()
            .into_data()
            .iter::<f32>()
            .collect();
        assert!(g.iter().all(|v| v.is_finite()), "f32 gradients {g:?}");
    }
}
