//! The backend check on CPU backends, against a reference run in f64.
//!
//! The reference is ndarray with f64 as its float type. A backend's float type is fixed for the
//! whole process at its first use, which is why these tests live in a test binary of their own:
//! nothing here uses ndarray in f32. An f32 reference would carry its own rounding into every
//! comparison: on an AMD EPYC (AVX2) ndarray in f32 is 1.8e-4 (of the norm) away from f64 on the
//! first-step gradient of the timestep MLP, where flex is 7e-6 away, so the check would measure
//! the reference's error, not the tested backend's.

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::DType;
use burn::tensor::backend::set_default_float_dtype;
use burn_ndarray::NdArray;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving::Clips;
use nervus_models::checkpoint::NamedTensor;
use nervus_training::backend_check::{
    CheckOptions, Tolerances, Trace, compare, initial_weights, trace,
};
use std::sync::{Arc, Once};

type F64 = NdArray<f64>;
type Reference = Autodiff<F64>;

fn small() -> CheckOptions {
    CheckOptions {
        layers: 2,
        d_model: 32,
        heads: 2,
        batch: 2,
        steps: 4,
        ..CheckOptions::default()
    }
}

/// Makes ndarray compute in f64 (once per process, before any ndarray tensor exists). Another
/// test of this binary that used `NdArray<f64>` first has fixed the device's float type already,
/// to f64 as well: the check below holds either way.
fn ndarray_in_f64() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        let device = Default::default();
        if let Err(e) = set_default_float_dtype::<F64>(&device, DType::F64) {
            eprintln!("ndarray's float type was set before this test: {e}");
        }
        // Tensors made from f32 data (weights, batches) must come out in f64.
        let t = Tensor::<F64, 1>::from_data(TensorData::from([0.5f32]), &device);
        assert_eq!(t.dtype(), DType::F64, "ndarray does not compute in f64");
    });
}

/// The tests' options, weights, clips, and the reference run (ndarray, f64).
fn reference() -> (CheckOptions, Vec<NamedTensor>, Arc<Clips>, Trace) {
    ndarray_in_f64();
    let opts = small();
    let clips = Arc::new(Clips::new(&Mnist::vendored().test));
    let w = initial_weights::<Reference>(&opts, &Default::default());
    let r =
        trace::<Reference>(&opts, &w, clips.clone(), "ndarray f64", &Default::default()).unwrap();
    (opts, w, clips, r)
}

#[test]
fn flex_trains_like_the_f64_reference() {
    let _beside = crate::beside_others();
    let (opts, w, clips, r) = reference();
    let t = trace::<Autodiff<Flex>>(&opts, &w, clips, "flex", &Default::default()).unwrap();
    let report = compare(&r, &t, Tolerances::CPU);
    println!("{}", report.summary(&r, &t));
    assert!(report.failures.is_empty(), "{}", report.summary(&r, &t));
    // The losses went somewhere: the check compares runs that train.
    assert!(r.losses.iter().all(|l| l.is_finite() && *l > 0.0));
    assert!(r.losses.windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn a_run_with_another_learning_rate_fails() {
    let _beside = crate::beside_others();
    let (opts, w, clips, r) = reference();
    let off = CheckOptions {
        lr: opts.lr * 1.5,
        ..opts.clone()
    };
    let t = trace::<Reference>(
        &off,
        &w,
        clips,
        "ndarray f64, lr × 1.5",
        &Default::default(),
    )
    .unwrap();
    let report = compare(&r, &t, Tolerances::CPU);
    // The first step's gradient is the same (same weights, same batch); what the optimizer
    // did with it is not.
    assert!(report.worst_grad.1 <= 1e-6, "{}", report.summary(&r, &t));
    assert!(!report.failures.is_empty(), "{}", report.summary(&r, &t));
}

#[test]
fn a_nan_fails() {
    let _beside = crate::beside_others();
    let (_, _, _, r) = reference();
    let mut t = r.clone();
    t.losses[2] = f64::NAN;
    let out = t
        .end
        .iter_mut()
        .find(|p| p.name == "proj_out_2.weight")
        .unwrap();
    out.data[0] = f32::NAN;
    let report = compare(&r, &t, Tolerances::default());
    assert_eq!(report.failures.len(), 2, "{}", report.summary(&r, &t));
}
