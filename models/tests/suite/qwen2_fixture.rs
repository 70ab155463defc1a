//! transformers' own Qwen2 against ours: `tests/fixtures/qwen2-tiny` is `Qwen2ForCausalLM.
//! save_pretrained` of a 2-layer model (4 query heads sharing 2 key/value heads, biases on q, k
//! and v only, an MLP width of 88, tied embeddings, rope theta 10⁶) with every parameter
//! scrambled (gains 1 ± 0.5, the embedding N(0, 1), everything else, biases too, N(0, 0.3)),
//! and the logits transformers computed for two sequences of 16 tokens. `make.py` beside it made
//! it. Same tolerance, and the same reason for it, as the GPT-2 fixture: 2e-5 of the largest logit.

use nervus_models::checkpoint::TensorFile;
use nervus_models::compare::worst_rel;
use nervus_models::qwen2;
use std::path::PathBuf;

type TB = burn_ndarray::NdArray<f64>;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2-tiny")
}

#[test]
fn qwen2_fixture_logits_match_transformers() {
    let (model, hf) =
        qwen2::load::<TB>(&fixture(), &Default::default()).expect("the fixture loads");
    assert_eq!(hf.eos_ids(), [2]);
    let c = &model.config;
    assert_eq!(
        (c.layers, c.heads, c.kv_heads, c.d_model),
        (2, 4, Some(2), 32)
    );
    assert_eq!(c.mlp_hidden(), 88);
    let mut reference = TensorFile::read(&fixture().join("reference.safetensors")).unwrap();
    let input: Vec<i64> = reference
        .take("input_ids", &[2, 16])
        .unwrap()
        .data
        .iter()
        .map(|&v| v as i64)
        .collect();
    let want: Vec<f64> = reference
        .take("logits", &[2, 16, 320])
        .unwrap()
        .data
        .iter()
        .map(|&v| v as f64)
        .collect();
    let got = crate::vals(model.forward(crate::ids::<TB>(&input, 2)));
    let worst = worst_rel(&got, &want);
    println!("logits: worst relative difference {worst:.1e} (tolerance 2e-5)");
    assert!(
        worst < 2e-5,
        "logits differ from transformers' by {worst:e} (relative)"
    );
}

#[test]
fn a_qwen2_config_this_model_cannot_run_is_refused_by_its_key() {
    let dir = std::env::temp_dir().join(format!("nervus-qwen2-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    for (from, to, says) in [
        (
            "\"use_sliding_window\": false",
            "\"use_sliding_window\": true",
            "use_sliding_window",
        ),
        (
            "\"hidden_act\": \"silu\"",
            "\"hidden_act\": \"gelu\"",
            "hidden_act `gelu`",
        ),
        (
            "\"rope_type\": \"default\"",
            "\"rope_type\": \"yarn\"",
            "rope scaling",
        ),
        (
            "\"model_type\": \"qwen2\"",
            "\"model_type\": \"llama\"",
            "model_type `llama`",
        ),
        (
            "\"num_key_value_heads\": 2",
            "\"num_key_value_heads\": 3",
            "--kv-heads 3",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        std::fs::write(dir.join("config.json"), good.replace(from, to)).unwrap();
        std::fs::copy(
            fixture().join("model.safetensors"),
            dir.join("model.safetensors"),
        )
        .unwrap();
        let err = qwen2::load::<TB>(&dir, &Default::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains(says), "{to}: {err}");
        assert!(err.contains("config.json"), "{to}: {err}");
    }
    // The weights of another shape: named, with both shapes.
    std::fs::write(
        dir.join("config.json"),
        good.replace("\"intermediate_size\": 88", "\"intermediate_size\": 96"),
    )
    .unwrap();
    let err = qwen2::load::<TB>(&dir, &Default::default())
        .expect_err("refused")
        .to_string();
    assert!(err.contains("mlp.gate_proj.weight"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
