//! Measurements for `cargo xtask bench`: each returns a rate for one backend, and the caller
//! interleaves backends round by round and reports medians, so that a machine that slows down in
//! the middle slows every backend alike.

use crate::optim::OptimizerSpec;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::backend::AutodiffBackend;
use nervus_models::mlp::MlpConfig;
use nervus_models::output::{LossOutput, Objective};
use std::time::Instant;

/// Waits for the device to finish queued work (a no-op on synchronous CPU backends).
pub fn sync<B: Backend>(device: &B::Device) {
    let _ = B::sync(device);
}

/// GFLOP/s of an `n × n` f32 matmul, `reps` products timed together after one warm-up.
pub fn matmul_gflops<B: Backend>(n: usize, reps: usize, device: &B::Device) -> f64 {
    let a = Tensor::<B, 2>::random([n, n], Distribution::Default, device);
    let b = Tensor::<B, 2>::random([n, n], Distribution::Default, device);
    let _ = a.clone().matmul(b.clone()).into_data();
    sync::<B>(device);
    let t = Instant::now();
    let mut last = None;
    for _ in 0..reps {
        last = Some(a.clone().matmul(b.clone()));
    }
    if let Some(l) = last {
        let _ = l.into_data();
    }
    sync::<B>(device);
    let secs = t.elapsed().as_secs_f64();
    2.0 * (n as f64).powi(3) * reps as f64 / secs / 1e9
}

/// Training steps a second of the MNIST MLP (784-128-10, SGD with momentum, batch `batch`):
/// forward, backward, optimizer step, `steps` of them after five warm-up steps.
pub fn mlp_steps_per_sec<B: AutodiffBackend>(
    batch: usize,
    steps: usize,
    device: &B::Device,
) -> f64 {
    let mut model = MlpConfig::new().init::<B>(device);
    let mut optim = OptimizerSpec::Sgd { momentum: 0.9 }.build(None);
    let x = Tensor::<B, 2>::random([batch, 784], Distribution::Default, device);
    let y = Tensor::<B, 1, Int>::random([batch], Distribution::Uniform(0.0, 10.0), device);
    let mut step = |model: nervus_models::mlp::Mlp<B>| {
        let out = model.classify(nervus_models::mlp::ClassBatch {
            inputs: x.clone(),
            targets: y.clone(),
        });
        let grads = GradientsParams::from_grads(out.loss.backward(), &model);
        optim.step(0.01, model, grads)
    };
    for _ in 0..5 {
        model = step(model);
    }
    sync::<B>(device);
    let t = Instant::now();
    for _ in 0..steps {
        model = step(model);
    }
    // Reading a weight back forces every queued step to finish.
    let _ = model.valid().fc2.weight.val().into_data();
    sync::<B>(device);
    steps as f64 / t.elapsed().as_secs_f64()
}

/// The median of some measurements.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Training characters a second of a GPT: forward, backward (the batch cut across `parts`
/// threads, as training cuts it), clipping and an AdamW step on random windows of
/// `batch × context` tokens, `steps` of them after two warm-up steps.
pub fn gpt_chars_per_sec<B: AutodiffBackend>(
    config: &nervus_models::gpt::GptConfig,
    batch: usize,
    parts: usize,
    steps: usize,
    clip: Option<f64>,
    device: &B::Device,
) -> f64 {
    use nervus_models::gpt::{Gpt, LmBatch};
    let model: Gpt<B> = config.init(device);
    let t = config.context;
    let ids = || {
        Tensor::<B, 2, Int>::random(
            [batch, t],
            Distribution::Uniform(0.0, config.vocab as f64),
            device,
        )
    };
    let b = LmBatch {
        inputs: ids(),
        targets: ids(),
        doc_mask: None,
    };
    let rate = steps_per_sec(model, steps, b, parts, 0.1, clip, device);
    (batch * t) as f64 * rate
}

/// One training step (the model's own objective on `batch`, cut across `parts` threads as
/// training cuts it; then clipping and AdamW with `decay`), `steps` of them after two warm-up
/// steps; returns steps a second.
fn steps_per_sec<B, M>(
    mut model: M,
    steps: usize,
    batch: M::Input,
    parts: usize,
    decay: f64,
    clip: Option<f64>,
    device: &B::Device,
) -> f64
where
    B: AutodiffBackend,
    M: Objective<B, Output = LossOutput<B::InnerBackend>> + 'static,
    M::Input: crate::shard::Shard + Clone + Send + 'static,
{
    let mut optim = OptimizerSpec::adamw(decay).build(clip);
    let mut last = None;
    let mut step = |model: M| {
        let out = crate::shard::step(&model, batch.clone(), parts);
        last = Some(out.item.loss);
        optim.step(1e-3, model, out.grads)
    };
    for _ in 0..2 {
        model = step(model);
    }
    sync::<B>(device);
    let start = Instant::now();
    for _ in 0..steps {
        model = step(model);
    }
    // Reading the last loss back forces every queued step to finish.
    let _ = last.map(|l| l.into_data());
    sync::<B>(device);
    steps as f64 / start.elapsed().as_secs_f64()
}

/// Training images a second of the digits DiT (`config`), batch `batch` cut across `parts`
/// threads.
pub fn dit_images_per_sec<B: AutodiffBackend>(
    config: &nervus_models::dit::DitConfig,
    batch: usize,
    parts: usize,
    steps: usize,
    device: &B::Device,
) -> f64 {
    use nervus_models::flow::FlowBatch;
    let s = config.sample_size;
    let shape = [batch, config.in_channels, s, s];
    let b = FlowBatch::<B, 4> {
        x: Tensor::random(shape, Distribution::Uniform(-1.0, 1.0), device),
        noise: Tensor::random(shape, Distribution::Normal(0.0, 1.0), device),
        t: Tensor::random([batch], Distribution::Uniform(0.0, 1.0), device),
        labels: Tensor::random([batch, 1], Distribution::Uniform(0.0, 10.0), device),
    };
    let model = config.init::<B>(device);
    batch as f64 * steps_per_sec(model, steps, b, parts, 0.0, Some(1.0), device)
}

/// Training steps a second of the video DiT (`config`: its attention decides), batch `batch`
/// cut across `parts` threads.
pub fn video_steps_per_sec<B: AutodiffBackend>(
    config: &nervus_models::video_dit::VideoDitConfig,
    batch: usize,
    parts: usize,
    steps: usize,
    device: &B::Device,
) -> f64 {
    use nervus_models::flow::FlowBatch;
    let s = config.sample_size;
    let shape = [batch, config.frames, config.in_channels, s, s];
    let b = FlowBatch::<B, 5> {
        x: Tensor::random(shape, Distribution::Uniform(-1.0, 1.0), device),
        noise: Tensor::random(shape, Distribution::Normal(0.0, 1.0), device),
        t: Tensor::random([batch], Distribution::Uniform(0.0, 1.0), device),
        labels: Tensor::random([batch, 2], Distribution::Uniform(0.0, 10.0), device),
    };
    let model = config.init::<B>(device);
    steps_per_sec(model, steps, b.into(), parts, 0.0, Some(1.0), device)
}
