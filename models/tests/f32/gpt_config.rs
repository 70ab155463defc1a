//! The GPT configuration's arithmetic against the model it builds: the analytic parameter count
//! (printed before a run, and in the README's presets) equals Burn's count of the built module for
//! every combination of switches, the GPT-2 test names exactly GPT-2's architecture, and the
//! presets and the SwiGLU width are what the README says. A binary of its own: building models
//! draws from Burn's process-wide generator, which other test binaries seed.

use burn_ndarray::NdArray;
use nervus_models::gpt::{GptConfig, GptSize, MlpKind, PositionKind};
use nervus_models::norm::NormKind;

type B = NdArray<f32>;

/// Every dimension different (vocab 37, context 11, width 24, 4 heads of 6, 3 layers), so a
/// count that swaps two of them is wrong.
fn base() -> GptConfig {
    GptConfig::new(37)
        .with_context(11)
        .with_d_model(24)
        .with_heads(4)
        .with_layers(3)
}

#[test]
fn the_analytic_parameter_count_is_the_built_models_for_every_switch() {
    let configs = [
        ("gpt-2", base()),
        ("modern", base().modern()),
        (
            "modern, 2 key/value heads",
            base().modern().with_kv_heads(Some(2)),
        ),
        (
            "modern, 1 key/value head",
            base().modern().with_kv_heads(Some(1)),
        ),
        ("gpt-2 without biases", base().with_bias(false)),
        (
            "layer norm, swiglu, qk-norm, biases",
            base().with_mlp(MlpKind::SwiGlu).with_qk_norm(true),
        ),
        (
            "rms norm, learned positions, gelu",
            base().with_norm(NormKind::RmsNorm),
        ),
        (
            "rope with biases",
            base().with_positions(PositionKind::Rope),
        ),
    ];
    let dev = Default::default();
    for (what, config) in configs {
        let built = config.init::<B>(&dev).num_params();
        assert_eq!(config.num_params(), built, "{what}");
    }
}

#[test]
fn only_gpt2s_own_architecture_counts_as_gpt2() {
    assert!(base().is_gpt2());
    assert!(
        base().with_kv_heads(Some(4)).is_gpt2(),
        "as many key/value heads as heads"
    );
    let not = [
        ("rms norm", base().with_norm(NormKind::RmsNorm)),
        ("rope", base().with_positions(PositionKind::Rope)),
        ("swiglu", base().with_mlp(MlpKind::SwiGlu)),
        ("qk-norm", base().with_qk_norm(true)),
        ("soft-cap", base().with_logit_softcap(Some(30.0))),
        ("grouped heads", base().with_kv_heads(Some(2))),
        ("no biases", base().with_bias(false)),
        ("modern", base().modern()),
    ];
    for (what, config) in not {
        assert!(!config.is_gpt2(), "{what}");
    }
}

#[test]
fn swiglu_width_is_eight_thirds_rounded_up_to_64_and_gelu_four() {
    let w = |d: usize, mlp: MlpKind| GptConfig::new(5).with_d_model(d).with_mlp(mlp).mlp_hidden();
    assert_eq!(w(128, MlpKind::Gelu), 512);
    assert_eq!(w(128, MlpKind::SwiGlu), 384); // 341.3 → 384
    assert_eq!(w(96, MlpKind::SwiGlu), 256); // exactly 256
    assert_eq!(w(512, MlpKind::SwiGlu), 1408); // 1365.3 → 1408
}

#[test]
fn presets_are_read_by_name() {
    assert_eq!(GptSize::parse("small"), Some(GptSize::Small));
    assert_eq!(GptSize::parse("medium"), Some(GptSize::Medium));
    assert_eq!(GptSize::parse("large"), Some(GptSize::Large));
    assert_eq!(GptSize::parse("huge"), None);
    assert_eq!(GptSize::parse("Small"), None);
}
