//! Helpers for the numerical and parity tests of this crate.
//!
//! Every Burn test here runs on `NdArray<f64>`: parity with the f64 reference is then limited by
//! summation order (~1e-15 relative), not by f32 rounding, so a wrong factor cannot hide under a
//! tolerance. (One float type per test process: Burn 0.21 fixes a device's float dtype at first
//! use, and `NdArray<f32>` and `NdArray<f64>` share the device.)

use burn::prelude::*;

pub type TB = burn_ndarray::NdArray<f64>;
pub type AB = burn::backend::Autodiff<TB>;

/// A tensor's values as f64.
pub fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// A tensor from values and a shape on the test device.
pub fn tensor<B: Backend, const D: usize>(data: Vec<f64>, shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(data, shape).convert::<B::FloatElem>(),
        &Default::default(),
    )
}

pub use crate::compare::{assert_close, numerical_grad, randn, worst_rel};
