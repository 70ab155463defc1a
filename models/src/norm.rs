//! The block's normalisation: LayerNorm (GPT-2) or RMSNorm (the modern recipe), one module.
//!
//! A normalised row cannot see its input shifted or stretched, so its gradient has no component in
//! those directions: LayerNorm removes both the mean and the scale, RMSNorm only the scale (it is
//! cheaper and, in practice, as good). Both are written out here rather than taken from Burn:
//! Burn 0.21's `RmsNorm` computes in f32 whatever the backend's precision (the f64 parity tests
//! would see its 1e-7), and one module with one pair of names (`gamma`, `beta`) keeps the
//! checkpoint names the same for both kinds.

use burn::module::Param;
use burn::prelude::*;
use serde::{Deserialize, Serialize};

/// Which normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormKind {
    /// Subtract the mean, divide by the standard deviation, scale and shift (GPT-2).
    LayerNorm,
    /// Divide by the root mean square and scale; no mean, no shift.
    RmsNorm,
}

/// LayerNorm or RMSNorm over the last axis, with a learned gain (and, for LayerNorm, a shift).
#[derive(Module, Debug)]
pub struct Norm<B: Backend> {
    /// `[C]`, ones at initialisation.
    pub gamma: Param<Tensor<B, 1>>,
    /// `[C]`, zeros at initialisation; `None` for RMSNorm.
    pub beta: Option<Param<Tensor<B, 1>>>,
    #[module(skip)]
    pub kind: NormKind,
    pub eps: f64,
}

impl<B: Backend> Norm<B> {
    pub fn new(kind: NormKind, d: usize, eps: f64, device: &B::Device) -> Self {
        Self {
            gamma: Param::from_tensor(Tensor::ones([d], device)),
            beta: (kind == NormKind::LayerNorm)
                .then(|| Param::from_tensor(Tensor::zeros([d], device))),
            kind,
            eps,
        }
    }

    /// Shapes: `[.., C]` → `[.., C]`.
    /// One fused op with its own backward where the backend has it ([`crate::fused::norm`]).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        crate::fused::norm(
            x,
            Some(self.gamma.val()),
            self.beta.as_ref().map(|b| b.val()),
            self.eps,
            self.kind == NormKind::RmsNorm,
        )
    }
}
