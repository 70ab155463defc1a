//! transformers' own GPT-2 against ours, llm.c style: `tests/fixtures/gpt2-tiny` is
//! `GPT2LMHeadModel.save_pretrained` of a 2-layer model with every parameter scrambled (gains
//! 1 ± 0.5, everything else small noise), with the logits, the loss and every parameter's gradient
//! PyTorch computed for one batch. Loading it and reproducing all of them checks the architecture,
//! the checkpoint names and layouts, and the backward pass against code nobody here wrote.
//!
//! Tolerance: the fixture was computed in f32 by PyTorch; we compute in f64 from the same f32
//! weights, so the differences are PyTorch's f32 rounding, accumulated through two blocks (a few
//! 1e-7 relative per operation). 2e-5 of each tensor's largest value is ~100× that and ~1000×
//! below what the smallest layout mistake costs (a swapped head or a missing 1/√D moves
//! everything by O(1)).

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_models::checkpoint::TensorFile;
use nervus_models::compare::{record, worst_rel};
use nervus_models::gpt2;
use std::path::PathBuf;

type TB = burn_ndarray::NdArray<f64>;
type AB = Autodiff<TB>;

const TOL: f64 = 2e-5;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt2-tiny")
}

fn ids(data: &[f32], b: usize, range: std::ops::Range<usize>, t: usize) -> Tensor<AB, 2, Int> {
    let v: Vec<i64> = (0..b)
        .flat_map(|r| range.clone().map(move |c| (r, c)))
        .map(|(r, c)| data[r * t + c] as i64)
        .collect();
    Tensor::from_data(TensorData::new(v, [b, range.len()]), &Default::default())
}

#[test]
fn gpt2_fixture_logits_loss_and_every_gradient() {
    let dev = Default::default();
    let model = gpt2::load::<AB>(&fixture(), &dev).expect("the fixture loads");
    let mut reference = TensorFile::read(&fixture().join("reference.safetensors")).unwrap();
    let input = reference.take("input_ids", &[2, 16]).unwrap().data;
    let want_logits = reference.take("logits", &[2, 16, 65]).unwrap().data;
    let want_loss = reference.take("loss", &[1]).unwrap().data[0] as f64;

    let mut report = Vec::new();
    let logits: Vec<f64> = model
        .forward(ids(&input, 2, 0..16, 16))
        .into_data()
        .iter::<f64>()
        .collect();
    let want: Vec<f64> = want_logits.iter().map(|&v| v as f64).collect();
    report.push(("logits".to_string(), worst_rel(&logits, &want)));

    // The fixture's loss: logits[:, :-1] against input_ids[:, 1:]. Causality makes the first 15
    // positions' logits independent of the 16th token, so this is the same computation.
    let loss = model.loss(ids(&input, 2, 0..15, 16), ids(&input, 2, 1..16, 16));
    let got_loss = loss.clone().into_scalar();
    report.push((
        "loss".to_string(),
        ((got_loss - want_loss) / want_loss).abs(),
    ));

    let grads = loss.backward();
    let named = gpt2::to_gpt2(nervus_models::named::export_grads(&model, &grads));
    assert_eq!(
        named.len(),
        29,
        "every parameter of the 2-layer model has a gradient"
    );
    for g in named {
        let want = reference
            .take(&format!("grad.{}", g.name), &g.shape)
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<f64> = g.data.iter().map(|&v| v as f64).collect();
        let want: Vec<f64> = want.data.iter().map(|&v| v as f64).collect();
        report.push((format!("grad.{}", g.name), worst_rel(&got, &want)));
    }
    println!("worst relative difference per tensor (tolerance {TOL:.0e}):");
    for (name, r) in &report {
        println!("  {r:9.2e}  {name}");
        record(name, *r, TOL);
    }
    // NaN fails: `r <= TOL` is false for it, so it lands in `bad`.
    let within = |r: f64| r <= TOL;
    let bad: Vec<_> = report.iter().filter(|(_, r)| !within(*r)).collect();
    assert!(bad.is_empty(), "outside tolerance: {bad:?}");
}

#[test]
fn gpt2_fixture_round_trips_through_our_save() {
    let dev = Default::default();
    let model = gpt2::load::<TB>(&fixture(), &dev).unwrap();
    let dir = std::env::temp_dir().join(format!("nervus-gpt2-rt-{}", std::process::id()));
    gpt2::save(&model, &dir).unwrap();
    let back = gpt2::load::<TB>(&dir, &dev).unwrap();
    let x = Tensor::<TB, 2, Int>::from_data([[1i64, 5, 9, 2, 64, 0]], &dev);
    let a: Vec<f64> = model.forward(x.clone()).into_data().iter::<f64>().collect();
    let b: Vec<f64> = back.forward(x).into_data().iter::<f64>().collect();
    // The fixture's weights are f32 and our file is f32: the round trip is exact.
    assert_eq!(worst_rel(&b, &a), 0.0);
    // And the directory is a transformers one: the same keys as the fixture's file.
    let ours = TensorFile::read(&dir.join("model.safetensors")).unwrap();
    let theirs = TensorFile::read(&fixture().join("model.safetensors")).unwrap();
    let mut k1: Vec<_> = ours.tensors.keys().collect();
    let mut k2: Vec<_> = theirs.tensors.keys().collect();
    k1.sort();
    k2.sort();
    assert_eq!(k1, k2);
    for (k, t) in &ours.tensors {
        assert_eq!(t.shape, theirs.tensors[k].shape, "{k}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
