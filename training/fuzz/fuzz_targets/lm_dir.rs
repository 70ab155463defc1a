//! The LM's directory (native layout: config.json, model.safetensors, a BPE tokenizer.json,
//! training.json) with one file replaced by arbitrary bytes: loading is an error or a model, and a
//! model that loads reads a token.

#![no_main]

#[path = "common.rs"]
mod common;

use burn::prelude::*;
use common::{B, Fixture};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static FILES: &[(&str, &[u8])] = &[
    ("config.json", include_bytes!("../fixtures/lm/config.json")),
    (
        "model.safetensors",
        include_bytes!("../fixtures/lm/model.safetensors"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../fixtures/lm/tokenizer.json"),
    ),
    (
        "training.json",
        include_bytes!("../fixtures/lm/training.json"),
    ),
];

fuzz_target!(|data: &[u8]| {
    static FIX: OnceLock<Fixture> = OnceLock::new();
    let fix = FIX.get_or_init(|| Fixture::new("lm", FILES));
    let Some(dir) = fix.with(data) else { return };
    let device = Default::default();
    if let Ok((model, _tok, _settings)) = nervus_training::lm::load_dir::<B>(dir, &device) {
        let logits = model.forward(Tensor::<B, 2, Int>::zeros([1, 1], &device));
        assert_eq!(logits.dims(), [1, 1, model.config.vocab]);
    }
});
