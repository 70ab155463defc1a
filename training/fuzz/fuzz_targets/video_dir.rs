//! A video DiT's pipeline folder (transformer/config.json and the weights) with one file replaced
//! by arbitrary bytes: loading is an error or a model, and a model that loads (at a size a test
//! can afford) runs one step.

#![no_main]

#[path = "common.rs"]
mod common;

use burn::prelude::*;
use common::{B, Fixture};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static FILES: &[(&str, &[u8])] = &[
    (
        "transformer/config.json",
        include_bytes!("../fixtures/video/config.json"),
    ),
    (
        "transformer/diffusion_pytorch_model.safetensors",
        include_bytes!("../fixtures/video/diffusion_pytorch_model.safetensors"),
    ),
];

fuzz_target!(|data: &[u8]| {
    static FIX: OnceLock<Fixture> = OnceLock::new();
    let fix = FIX.get_or_init(|| Fixture::new("video", FILES));
    let Some(dir) = fix.with(data) else { return };
    let device = Default::default();
    if let Ok(model) = nervus_models::video_pipeline::load_pipeline::<B>(dir, &device) {
        let c = &model.config;
        let (f, s, ch) = (c.frames, c.sample_size, c.in_channels);
        if f * s * s * ch <= 8 * 32 * 32 {
            let x = Tensor::<B, 5>::zeros([1, f, ch, s, s], &device);
            let t = Tensor::<B, 1>::from_floats([500.0], &device);
            let labels = Tensor::<B, 2, Int>::zeros([1, 2], &device);
            let v = model.forward(x, t, labels);
            assert_eq!(v.dims(), [1, f, ch, s, s]);
        }
    }
});
