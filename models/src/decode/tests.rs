//! The decoder against its witness, [`Gpt::forward`] on the whole sequence.

use super::*;
use burn::backend::Flex;

type B = Flex;

/// A small GPT with every parameter scrambled (norm gains away from 1, biases away from 0, so
/// that a missing factor or term shows).
fn scrambled(config: GptConfig) -> Gpt<B> {
    let model = config.init::<B>(&Default::default());
    let mut seed = 0x9E37_79B9u32;
    let tensors = crate::named::export(&model)
        .into_iter()
        .map(|mut t| {
            let gain = t.name.ends_with(".gamma");
            for v in &mut t.data {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let u = (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5; // [-0.5, 0.5)
                *v = if gain { 1.0 + u } else { 0.6 * u };
            }
            (t.name.clone(), t)
        })
        .collect();
    crate::named::import(model, tensors, std::path::Path::new("test")).unwrap()
}

fn config() -> GptConfig {
    GptConfig::new(53)
        .with_context(12)
        .with_layers(2)
        .with_heads(4)
        .with_d_model(32)
}

/// The logits `Gpt::forward` gives at every position of `ids`, `[T][V]`.
fn witness(model: &Gpt<B>, ids: &[u32]) -> Vec<Vec<f32>> {
    let v: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    let x = Tensor::<B, 2, Int>::from_data(TensorData::new(v, [1, ids.len()]), &Default::default());
    let logits: Vec<f32> = model.forward(x).into_data().iter::<f32>().collect();
    logits
        .chunks(model.config.vocab)
        .map(|r| r.to_vec())
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // Written so that NaN fails: !(x <= tol) is true for NaN.
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: logit {i}: {g} vs {w} (scale {scale})"
        );
    }
}

#[test]
fn prompt_and_every_step_match_the_burn_model() {
    let model = scrambled(config());
    let cpu = CpuGpt::from_model(&model, None).unwrap();
    let ids = [3u32, 17, 52, 0, 9, 9, 41, 23, 5, 30, 11, 2];
    let want = witness(&model, &ids);
    // The first five as a prompt, then one at a time up to the full context.
    let mut cache = cpu.cache();
    let got = cpu.forward(&ids[..5], &mut cache);
    assert_close(&got, &want[4], 1e-5, "prompt");
    for i in 5..ids.len() {
        let got = cpu.forward(&ids[i..i + 1], &mut cache);
        assert_close(&got, &want[i], 1e-5, &format!("step {i}"));
    }
    assert_eq!(cache.len(), 12);
    // A cleared cache starts again.
    cache.clear();
    assert_close(
        &cpu.forward(&ids[..2], &mut cache),
        &want[1],
        1e-5,
        "after clear",
    );
}

#[test]
fn int8_weights_compute_what_the_dequantised_burn_model_does() {
    let model = scrambled(config());
    for group in [None, Some(8)] {
        let q8 = quantize(&model, group);
        // Every linear layer (4 a block, and the head), none of the embeddings.
        assert_eq!(q8.len(), 2 * 4 + 1);
        assert!(!q8.contains_key("wte.weight"));
        let cpu = CpuGpt::from_model(&model, Some(&q8)).unwrap();
        let deq = dequantized(model.clone(), &q8).unwrap();
        let ids = [7u32, 1, 44, 29, 29, 3];
        let want = witness(&deq, &ids);
        let mut cache = cpu.cache();
        assert_close(
            &cpu.forward(&ids[..3], &mut cache),
            &want[2],
            1e-5,
            "q8 prompt",
        );
        for i in 3..ids.len() {
            let got = cpu.forward(&ids[i..i + 1], &mut cache);
            assert_close(&got, &want[i], 1e-5, &format!("q8 step {i}"));
        }
        // And int8 is not f32: the quantised model differs from the original, a little.
        let f32_logits = witness(&model, &ids);
        let diff = want[5]
            .iter()
            .zip(&f32_logits[5])
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff > 0.0 && diff < 0.1, "int8 moved the logits by {diff}");
    }
}

#[test]
fn architectures_it_lacks_are_refused_by_name() {
    let rope = config().with_positions(PositionKind::Rope);
    assert_eq!(
        CpuGpt::supports(&rope).unwrap_err(),
        "the CPU decoder has no rotary positions"
    );
    let gqa = config().with_kv_heads(Some(2));
    assert!(
        CpuGpt::supports(&gqa)
            .unwrap_err()
            .contains("grouped-query")
    );
    assert!(CpuGpt::supports(&config()).is_ok());
}
