//! Logit soft-capping, `c·tanh(z/c)` (Gemma 2): every logit stays inside `(−c, c)`, and the small
//! ones are left almost unchanged (`tanh u ≈ u` near zero). Its hand-derived twin, with the
//! derivation, is `reference/softcap.rs`.

use burn::prelude::*;

/// Shapes: any → the same. `cap` must be positive.
pub fn softcap<B: Backend, const D: usize>(z: Tensor<B, D>, cap: f64) -> Tensor<B, D> {
    // Times 1/c rather than divided by c: Burn 0.21's autodiff takes the gradient of a division
    // by a scalar in f32 (see `attention.rs`).
    (z * (1.0 / cap)).tanh() * cap
}
