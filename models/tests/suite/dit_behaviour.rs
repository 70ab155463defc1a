//! The image DiT as the sampler and the learner see it, held in the model crate itself: the
//! velocity the sampler integrates is the network at diffusers' 0..1000 timestep scale, the null
//! label is the class after the last real one, and the flow-matching loss is the mean squared
//! error of that velocity against `noise − x` at `x_t = (1 − t)·x + t·noise`.
//!
//! On the diffusers fixture's scrambled weights: a fresh DiT's output layer starts at zero
//! (adaLN-Zero), so on fresh weights every velocity is 0 and none of this would show.

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_models::diffusers;
use nervus_models::dit::{Dit, DitConfig};
use nervus_models::flow::{FlowBatch, Velocity};
use std::path::PathBuf;

type TB = burn_ndarray::NdArray<f64>;

fn fixture_model() -> Dit<TB> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dit-tiny");
    diffusers::load_transformer::<TB>(&dir, &Default::default()).expect("the fixture loads")
}

fn tensor<const D: usize>(data: Vec<f64>, shape: [usize; D]) -> Tensor<TB, D> {
    Tensor::from_data(TensorData::new(data, shape), &Default::default())
}

fn vals<const D: usize>(t: Tensor<TB, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Deterministic values spread over −1..1 (images) or roughly unit (noise).
fn wave(n: usize, f: f64, amp: f64) -> Vec<f64> {
    (0..n).map(|i| amp * (i as f64 * f).sin()).collect()
}

fn labels(v: &[i64]) -> Tensor<TB, 2, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), [v.len(), 1]),
        &Default::default(),
    )
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_finite() && y.is_finite() {
                (x - y).abs()
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}

#[test]
fn the_velocity_is_the_network_at_a_thousand_times_t_and_the_null_label_follows_the_classes() {
    let m = fixture_model();
    assert_eq!(m.config.classes, 10);
    assert_eq!(m.null_label(), 10);
    let n = 2 * 28 * 28;
    let x = tensor(wave(n, 0.37, 1.0), [2, 1, 28, 28]);
    let t = tensor(vec![0.3, 0.8], [2]);
    let y = labels(&[3, 10]);
    let got = vals(m.velocity(x.clone(), t.clone(), y.clone()));
    let want = vals(m.forward(x.clone(), t * 1000.0, y.clone()));
    assert_eq!(max_diff(&got, &want), 0.0);
    // The check has teeth: the network's output moves with the timestep.
    let other = vals(m.forward(x, tensor(vec![300.0 + 1.0, 800.0], [2]), y));
    assert!(max_diff(&got, &other) > 1e-6);
}

#[test]
fn the_flow_loss_is_the_velocity_error_at_the_noised_point() {
    let m = fixture_model();
    let n = 2 * 28 * 28;
    let (xs, noise) = (wave(n, 0.37, 0.9), wave(n, 1.91, 1.4));
    let ts = [0.25, 0.7];
    let xt: Vec<f64> = (0..n)
        .map(|i| {
            let t = ts[i / (28 * 28)];
            (1.0 - t) * xs[i] + t * noise[i]
        })
        .collect();
    let target: Vec<f64> = (0..n).map(|i| noise[i] - xs[i]).collect();
    let v = vals(m.forward(
        tensor(xt, [2, 1, 28, 28]),
        tensor(vec![250.0, 700.0], [2]),
        labels(&[1, 7]),
    ));
    let want = v
        .iter()
        .zip(&target)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / n as f64;
    let got = m
        .flow_loss(FlowBatch {
            x: tensor(xs, [2, 1, 28, 28]),
            noise: tensor(noise, [2, 1, 28, 28]),
            t: tensor(ts.to_vec(), [2]),
            labels: labels(&[1, 7]),
        })
        .into_scalar();
    assert!(
        (got - want).abs() <= 1e-12 * want,
        "flow loss {got} against {want} by hand"
    );
}

/// Tokens are patches: (side / patch)², and what the patch embedding makes of an image. Several
/// channels (3 here) go in and come out: the output layer writes p·p·C values a token.
#[test]
fn a_dit_cuts_its_images_into_patches_of_every_channel() {
    let c = DitConfig::new()
        .with_sample_size(12)
        .with_patch_size(2)
        .with_in_channels(3)
        .with_num_layers(1)
        .with_num_attention_heads(2)
        .with_attention_head_dim(4);
    assert_eq!(c.tokens(), 36);
    let m: Dit<TB> = c.init(&Default::default());
    let x = tensor(wave(2 * 3 * 12 * 12, 0.5, 1.0), [2, 3, 12, 12]);
    assert_eq!(m.pos_embed.forward(x.clone()).dims(), [2, 36, 8]);
    let out = m.forward(x, tensor(vec![10.0, 900.0], [2]), labels(&[0, 9]));
    assert_eq!(out.dims(), [2, 3, 12, 12]);
}

/// GPT-2 and the DiT start their biases at zero; the zeroed bias is still a trainable parameter.
#[test]
fn a_zeroed_bias_is_zero_and_still_trains() {
    type AB = Autodiff<TB>;
    let mut layer = burn::nn::LinearConfig::new(3, 4)
        .with_initializer(burn::nn::Initializer::Constant { value: 0.5 })
        .init::<AB>(&Default::default());
    nervus_models::zero_bias(&mut layer);
    let bias = layer.bias.as_ref().expect("a bias");
    assert_eq!(
        bias.val().into_data().iter::<f64>().collect::<Vec<_>>(),
        [0.0; 4]
    );
    let x = Tensor::<AB, 2>::from_data(TensorData::new(vec![1.0; 6], [2, 3]), &Default::default());
    let grads = layer.forward(x).sum().backward();
    let g = bias.grad(&grads).expect("the zeroed bias has a gradient");
    assert_eq!(g.into_data().iter::<f64>().collect::<Vec<_>>(), [2.0; 4]);
}
