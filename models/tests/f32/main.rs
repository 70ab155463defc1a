//! The models crate's integration tests that run ndarray in f32 (checkpoint layouts and config
//! arithmetic), in a binary apart from `suite/`, which runs ndarray in f64: a device's float type
//! is fixed by its first use, once per process, and `NdArray<f32>` and `NdArray<f64>` share one
//! device.

mod checkpoint_configs;
mod gpt_config;
