//! GELU in GPT-2's tanh form (`gelu_new`, diffusers' `gelu-approximate`):
//! `0.5·x·(1 + tanh(z))` with `z = √(2/π)·(x + 0.044715·x³)`.
//!
//! Written as `x·σ(2z) = x / (1 + e^{−2z})`, which is the same function (`(1 + tanh z)/2 = σ(2z)`)
//! and costs one `exp` where `tanh` costs an `expm1` and more, and `x·x·x` where `powf(x, 3)` costs
//! a logarithm and an exponential: measured on the DiT, Burn's `gelu_approximate` spent a quarter
//! of a CPU training step in `tanh` and `powf`. At the extremes `e^{−2z}` overflows to infinity
//! for very negative `x` (giving 0, not NaN) and vanishes for very positive `x` (giving `x`).

use burn::prelude::*;

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// Shapes: any → the same.
pub fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let cube = x.clone() * x.clone() * x.clone();
    let z2 = (x.clone() + cube * 0.044_715) * (-2.0 * SQRT_2_OVER_PI); // −2z
    x / (z2.exp() + 1.0)
}

#[cfg(test)]
mod tests {
    use crate::testing::{TB, tensor, to_vec};

    #[test]
    fn equals_the_tanh_form_and_stays_finite() {
        let xs = vec![-1e4, -30.0, -3.0, -0.5, 0.0, 0.7, 2.0, 30.0, 1e4];
        let got = to_vec(super::gelu_tanh(tensor::<TB, 1>(xs.clone(), [xs.len()])));
        for (x, g) in xs.iter().zip(&got) {
            let want =
                0.5 * x * (1.0 + (super::SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh());
            assert!(g.is_finite(), "gelu({x}) = {g}");
            assert!(
                (g - want).abs() <= 1e-14 * want.abs().max(1.0),
                "gelu({x}) = {g}, tanh form {want}"
            );
        }
    }
}
