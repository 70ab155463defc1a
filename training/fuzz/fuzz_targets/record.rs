//! A learner checkpoint (`model-E.mpk`, Burn's record format) of arbitrary bytes, loaded into the
//! GPT it was written for as `--resume` checks it (`run::load_model_record`): an error or a model,
//! and a model that loads reads a token.

#![no_main]

#[path = "common.rs"]
mod common;

use burn::prelude::*;
use common::{B, Fixture};
use libfuzzer_sys::fuzz_target;
use nervus_models::gpt::Gpt;
use std::sync::OnceLock;

static MODEL: &[(&str, &[u8])] = &[
    ("config.json", include_bytes!("../fixtures/gpt/config.json")),
    (
        "model.safetensors",
        include_bytes!("../fixtures/gpt/model.safetensors"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../fixtures/gpt/tokenizer.json"),
    ),
];

fuzz_target!(|data: &[u8]| {
    static BASE: OnceLock<Gpt<B>> = OnceLock::new();
    let device = Default::default();
    let base = BASE.get_or_init(|| {
        let fix = Fixture::new("record-model", MODEL);
        let dir = fix.with(&[0xff]).expect("a fixture").to_path_buf();
        // The pick (0xff % 3 = 0) empties config.json: write it back whole.
        std::fs::write(dir.join("config.json"), MODEL[0].1).expect("a scratch file");
        nervus_training::gpt::load_dir::<B>(&dir, &device)
            .expect("the fixture loads")
            .0
    });
    let path = std::env::temp_dir().join(format!("nervus-fuzz-record-{}.mpk", std::process::id()));
    std::fs::write(&path, data).expect("a scratch file");
    if let Ok(model) = nervus_training::run::load_model_record(base, &path) {
        let logits = model.forward(Tensor::<B, 2, Int>::zeros([1, 1], &device));
        assert_eq!(logits.dims(), [1, 1, model.config.vocab]);
    }
});
