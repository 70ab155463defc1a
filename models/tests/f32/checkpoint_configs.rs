//! What the checkpoint readers assume when a config leaves a key out, what they refuse, and how
//! GPT-2's reader treats a tied head and transformers' attention buffers.
//!
//! The defaults are the libraries' own (transformers' `GPT2Config`, diffusers'
//! `DiTTransformer2DModel`): a config written by an older or a newer release may omit any key that
//! has a default there, and must then mean what it means there.

use burn::prelude::*;
use nervus_models::checkpoint::{CheckpointError, NamedTensor, write_safetensors};
use nervus_models::diffusers::DitTransformerConfig;
use nervus_models::gpt::{Gpt, GptConfig};
use nervus_models::gpt2::{self, Gpt2Config};
use std::path::{Path, PathBuf};

type B = burn_ndarray::NdArray<f32>;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nervus-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn gpt2_minimal() -> serde_json::Value {
    serde_json::json!({
        "vocab_size": 11, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 2
    })
}

fn gpt2_config(extra: serde_json::Value) -> Gpt2Config {
    let mut v = gpt2_minimal();
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_gpt2_config_without_optional_keys_takes_transformers_defaults() {
    let c = gpt2_config(serde_json::json!({}));
    assert_eq!(c.model_type, "gpt2");
    assert_eq!(c.activation_function, "gelu_new");
    assert_eq!(c.layer_norm_epsilon, 1e-5);
    assert!(
        c.tie_word_embeddings,
        "transformers ties the head by default"
    );
    assert!(c.scale_attn_weights);
    assert!(!c.scale_attn_by_inverse_layer_idx);
    assert_eq!(c.initializer_range, 0.02);
    assert_eq!(c.n_inner, None);
    let m = c
        .to_model(Path::new("config.json"))
        .expect("the defaults are GPT-2's");
    assert_eq!(m.norm_eps, 1e-5);
    assert_eq!(m.init_std, 0.02);
}

#[test]
fn gpt2_variants_this_model_does_not_implement_are_refused_by_name() {
    let file = Path::new("config.json");
    let ok = |extra| gpt2_config(extra).to_model(file).map(|_| ());
    assert!(
        ok(serde_json::json!({"n_inner": 64})).is_ok(),
        "4 × 16 is GPT-2's width"
    );
    let refused = |extra: serde_json::Value, says: &str| {
        let e = ok(extra.clone()).expect_err(&extra.to_string()).to_string();
        assert!(e.contains(says), "{extra}: `{e}` does not say `{says}`");
    };
    refused(serde_json::json!({"n_inner": 48}), "n_inner");
    refused(serde_json::json!({"n_inner": 20}), "n_inner");
    refused(
        serde_json::json!({"scale_attn_by_inverse_layer_idx": true}),
        "scaling",
    );
    refused(serde_json::json!({"scale_attn_weights": false}), "scaling");
    refused(serde_json::json!({"activation_function": "relu"}), "relu");
    refused(serde_json::json!({"n_head": 3}), "n_head 3");
}

/// A small GPT-2 written by `gpt2::save`, then rewritten by `edit` (tensors by GPT-2 name, and the
/// config's JSON).
fn saved_gpt2(
    name: &str,
    edit: impl FnOnce(&mut Vec<NamedTensor>, &mut serde_json::Value),
) -> (PathBuf, Gpt<B>) {
    let dir = scratch(name);
    let m: Gpt<B> = GptConfig::new(11)
        .with_context(8)
        .with_d_model(16)
        .with_heads(2)
        .with_layers(1)
        .init(&Default::default());
    gpt2::save(&m, &dir).unwrap();
    let mut tensors = gpt2::to_gpt2(nervus_models::named::export(&m));
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut tensors, &mut config);
    write_safetensors(&dir.join("model.safetensors"), &tensors, None).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    (dir, m)
}

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

#[test]
fn a_tied_gpt2_checkpoint_without_a_head_gets_wte_as_its_head() {
    let (dir, m) = saved_gpt2("tied", |t, c| {
        t.retain(|t| t.name != "lm_head.weight");
        c["tie_word_embeddings"] = true.into();
    });
    let loaded = gpt2::load::<B>(&dir, &Default::default()).expect("a tied checkpoint loads");
    // Burn's head is `[C, V]`, the embedding `[V, C]`.
    let head = values(loaded.lm_head.weight.val());
    let wte = values(m.wte.weight.val().transpose());
    assert_eq!(head, wte);
    assert_ne!(head, values(m.lm_head.weight.val()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tied_config_with_its_own_head_keeps_that_head() {
    let (dir, m) = saved_gpt2("tied-own-head", |_, c| {
        c["tie_word_embeddings"] = true.into();
    });
    let loaded = gpt2::load::<B>(&dir, &Default::default()).unwrap();
    assert_eq!(
        values(loaded.lm_head.weight.val()),
        values(m.lm_head.weight.val())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_untied_checkpoint_without_a_head_is_refused_naming_the_tensor() {
    let (dir, _) = saved_gpt2("untied-no-head", |t, c| {
        t.retain(|t| t.name != "lm_head.weight");
        c["tie_word_embeddings"] = false.into();
    });
    match gpt2::load::<B>(&dir, &Default::default()) {
        Err(CheckpointError::Missing { name, .. }) => assert_eq!(name, "lm_head.weight"),
        other => panic!(
            "expected lm_head.weight missing, got {:?}",
            other.map(|_| ())
        ),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// transformers' older saves carry each layer's causal mask (`attn.bias`) and `attn.masked_bias`:
/// buffers, not parameters, skipped on reading. Any other stray tensor is refused.
#[test]
fn transformers_attention_buffers_are_skipped_and_other_extras_refused() {
    let buffer = |name: &str| NamedTensor::new(name, vec![1], vec![0.0]);
    let (dir, m) = saved_gpt2("buffers", |t, _| {
        t.push(buffer("transformer.h.0.attn.bias"));
        t.push(buffer("transformer.h.0.attn.masked_bias"));
    });
    let loaded = gpt2::load::<B>(&dir, &Default::default()).expect("buffers are skipped");
    assert_eq!(values(loaded.wte.weight.val()), values(m.wte.weight.val()));
    std::fs::remove_dir_all(&dir).unwrap();

    let (dir, _) = saved_gpt2("stray", |t, _| t.push(buffer("transformer.h.0.attn.stray")));
    let e = gpt2::load::<B>(&dir, &Default::default())
        .map(|_| ())
        .expect_err("a stray tensor")
        .to_string();
    assert!(e.contains("transformer.h.0.attn.stray"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn dit_config(extra: serde_json::Value) -> DitTransformerConfig {
    let mut v = serde_json::json!({
        "_class_name": "DiTTransformer2DModel",
        "attention_head_dim": 8, "in_channels": 1, "norm_type": "ada_norm_zero",
        "num_attention_heads": 2, "num_embeds_ada_norm": 10, "num_layers": 1,
        "patch_size": 4, "sample_size": 28
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_dit_config_without_optional_keys_takes_diffusers_defaults() {
    let c = dit_config(serde_json::json!({}));
    assert_eq!(c.activation_fn, "gelu-approximate");
    assert!(c.attention_bias);
    assert!(!c.norm_elementwise_affine);
    assert_eq!(c.norm_eps, 1e-5);
    assert_eq!(c.norm_num_groups, 32);
    assert_eq!(c.out_channels, None);
    let m = c
        .to_model(Path::new("config.json"))
        .expect("the defaults are the DiT's");
    assert_eq!(m.norm_eps, 1e-5);
}

#[test]
fn dit_variants_this_model_does_not_implement_are_refused() {
    let file = Path::new("config.json");
    for extra in [
        serde_json::json!({"attention_bias": false}),
        serde_json::json!({"norm_elementwise_affine": true}),
        serde_json::json!({"out_channels": 2}),
        serde_json::json!({"sample_size": 30}),
        serde_json::json!({"norm_type": "ada_norm"}),
        serde_json::json!({"activation_fn": "gelu"}),
        serde_json::json!({"_class_name": "Transformer2DModel"}),
    ] {
        assert!(
            dit_config(extra.clone()).to_model(file).is_err(),
            "{extra} was accepted"
        );
    }
    assert!(
        dit_config(serde_json::json!({"out_channels": 1}))
            .to_model(file)
            .is_ok()
    );
}

/// A config that promises a model far larger than its weights file: each loader must answer with
/// the first tensor whose shape differs, before any parameter of the promised size is allocated
/// (width 2^20 makes one attention matrix 2^40 floats; allocating it aborts the test).
#[test]
fn a_config_promising_a_huge_model_is_a_shape_error_not_an_allocation() {
    let (dir, _) = saved_gpt2("huge-gpt2", |_, c| {
        c["n_embd"] = (1u64 << 20).into();
        c["n_head"] = 16.into();
    });
    match gpt2::load::<B>(&dir, &Default::default()) {
        Err(CheckpointError::Shape { expected, got, .. }) => {
            assert!(expected.contains(&(1 << 20)), "{expected:?}");
            assert!(!got.contains(&(1 << 20)), "{got:?}");
        }
        other => panic!("expected a shape error, got {:?}", other.map(|_| ())),
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch("huge-dit");
    let small = dit_config(serde_json::json!({}));
    let m = small.to_model(Path::new("config.json")).unwrap();
    nervus_models::diffusers::save_transformer(&m.init::<B>(&Default::default()), &dir).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["attention_head_dim"] = (1u64 << 18).into();
    config["num_attention_heads"] = 4.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let e = nervus_models::diffusers::load_transformer::<B>(&dir, &Default::default())
        .map(|_| ())
        .expect_err("weights of another size");
    assert!(matches!(e, CheckpointError::Shape { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
