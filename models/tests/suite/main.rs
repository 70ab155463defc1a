//! The models crate's integration tests in f64, one binary: every test file here links the same
//! Burn code, and one binary compiles it once (separate binaries took most of CI's time, each
//! instantiating Burn's generics anew). Two stay apart: `f32/` (ndarray in f32: a device's float
//! type is set by its first use, once per process, and `NdArray<f32>` shares the device of the
//! `NdArray<f64>` used here) and `witness_log.rs` (it sets the environment the witness log is
//! opened from).
//!
//! Run one file's tests with a filter: `cargo test --release -p nervus-models --test suite
//! gpt2_fixture`.

mod dit_behaviour;
mod dit_fixture;
mod gpt2_fixture;
mod gpt_behaviour;
mod gpt_decoding;
mod qwen2_fixture;

use burn::prelude::*;

/// Burn's seeded generator is one per process and draws a parameter's initial values lazily, at
/// its first use, while the tests run on parallel threads: a test that needs the same weights on
/// every run holds this lock from its seed to its end, so that no other test's draws land among
/// its own.
pub static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`RNG`], taken even if a test that held it failed.
pub fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Token ids `v` as a `[rows, len / rows]` tensor.
pub fn ids<B: Backend>(v: &[i64], rows: usize) -> Tensor<B, 2, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), [rows, v.len() / rows]),
        &Default::default(),
    )
}

/// A tensor's values, in f64.
pub fn vals<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}
