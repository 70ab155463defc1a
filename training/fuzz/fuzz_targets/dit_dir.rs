//! A DiT's `transformer/` folder (diffusers' layout: config.json and
//! diffusion_pytorch_model.safetensors) with one file replaced by arbitrary bytes: loading is an
//! error or a model, and a model that loads (at a size a test can afford) runs one step.

#![no_main]

#[path = "common.rs"]
mod common;

use burn::prelude::*;
use common::{B, Fixture};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static FILES: &[(&str, &[u8])] = &[
    ("config.json", include_bytes!("../fixtures/dit/config.json")),
    (
        "diffusion_pytorch_model.safetensors",
        include_bytes!("../fixtures/dit/diffusion_pytorch_model.safetensors"),
    ),
];

fuzz_target!(|data: &[u8]| {
    static FIX: OnceLock<Fixture> = OnceLock::new();
    let fix = FIX.get_or_init(|| Fixture::new("dit", FILES));
    let Some(dir) = fix.with(data) else { return };
    let device = Default::default();
    if let Ok(model) = nervus_models::diffusers::load_transformer::<B>(dir, &device) {
        let c = &model.config;
        // The frame size is not in the weights: a config may ask for any, within reason.
        if c.sample_size * c.sample_size * c.in_channels <= 64 * 64 {
            let x =
                Tensor::<B, 4>::zeros([1, c.in_channels, c.sample_size, c.sample_size], &device);
            let t = Tensor::<B, 1>::from_floats([500.0], &device);
            let labels = Tensor::<B, 2, Int>::zeros([1, 1], &device);
            let v = model.forward(x, t, labels);
            assert_eq!(v.dims(), [1, c.in_channels, c.sample_size, c.sample_size]);
        }
    }
});
