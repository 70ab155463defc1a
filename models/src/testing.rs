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

/// Values rounded to f32 and back: parity tests load weights into Burn through f32 checkpoint
/// tensors, so the point is chosen f32-exact and both sides compute from identical weights.
pub fn f32_exact(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| x as f32 as f64).collect()
}

/// Replaces the named parameters of a Burn module (by Burn path) with the given values; the
/// others keep their values. A name the module does not have is an error.
pub fn load<M: burn::module::Module<AB>>(module: M, tensors: &[(&str, &[usize], &[f64])]) -> M {
    let mut map: std::collections::HashMap<String, crate::checkpoint::NamedTensor> =
        crate::named::export(&module)
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
    let given: Vec<(String, crate::checkpoint::NamedTensor)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            assert!(
                data.iter().all(|&v| v as f32 as f64 == v),
                "{name}: parity points must be f32-exact (use f32_exact)"
            );
            let t = crate::checkpoint::NamedTensor::new(
                *name,
                shape.to_vec(),
                data.iter().map(|&v| v as f32).collect(),
            );
            (name.to_string(), t)
        })
        .collect();
    for (name, t) in given {
        assert!(
            map.contains_key(&name),
            "the module has no parameter {name}"
        );
        map.insert(name, t);
    }
    crate::named::import(module, map, std::path::Path::new("test")).unwrap()
}

/// The module's parameter gradients by Burn path, as f64.
pub fn grads_by_path<M: burn::module::AutodiffModule<AB>>(
    module: &M,
    grads: &<AB as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> std::collections::HashMap<String, Vec<f64>> {
    crate::named::export_grads_f64(module, grads)
        .into_iter()
        .collect()
}
