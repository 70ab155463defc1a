//! The video DiT on the shared path: a tiny model learns, and a run stopped and resumed is the
//! run that never stopped (weights, optimizer, schedule and data position all come back).

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving::Clips;
use nervus_models::mlp::MlpConfig;
use nervus_models::named;
use nervus_models::video_dit::{VideoDit, VideoDitConfig};
use nervus_training::dit::{DrawSettings, TimeSampling};
use nervus_training::options::RunOptions;
use nervus_training::report::Reporter;
use nervus_training::video::{VideoOptions, train};
use std::path::{Path, PathBuf};
use std::sync::Arc;

// Flex: bit-reproducible from run to run, and the resume test compares runs bit for bit.
type B = Autodiff<burn::backend::Flex>;
type I = burn::backend::Flex;

fn scratch(name: &str) -> PathBuf {
    crate::scratch(&format!("video-{name}"))
}

// Burn draws initial weights lazily from one process-wide generator: make a model and touch
// every parameter under one lock, or two tests side by side interleave their draws.
use crate::INIT;

fn tiny() -> VideoDitConfig {
    VideoDitConfig::new()
        .with_num_layers(2)
        .with_num_attention_heads(2)
        .with_attention_head_dim(8)
}

fn fresh(seed: u64) -> VideoDit<B> {
    let _held = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Default::default();
    B::seed(&dev, seed);
    let model = tiny().init::<B>(&dev);
    let _ = named::export(&model);
    model
}

fn options(dir: &Path, steps: usize, every: usize, lr: f64) -> VideoOptions {
    VideoOptions {
        run: RunOptions {
            decay_to: 0.1,
            clip: Some(1.0),
            seed: 5,
            eval_every: every,
            save: Some(dir.join("model")),
            ..RunOptions::new(steps, 2, lr, dir.join("train"))
        },
        eval_clips: 2,
        label_dropout: 0.1,
        time: TimeSampling::Uniform,
        double_contrast: 0.0,
        draw: DrawSettings {
            steps: 1,
            guidance: 2.0,
            shift: 1.0,
            guidance_below: 1.0,
            guidance_above: 1.0,
        },
        judge_every: false,
        out: dir.to_path_buf(),
        data_name: "test".into(),
    }
}

fn data() -> (Arc<Clips>, Clips) {
    let m = Mnist::vendored();
    (Arc::new(Clips::new(&m.train)), Clips::new(&m.test))
}

fn judge() -> nervus_models::mlp::Mlp<I> {
    MlpConfig::new().init::<I>(&Default::default())
}

fn params(model: &VideoDit<I>) -> Vec<(String, Vec<f32>)> {
    named::export(model)
        .into_iter()
        .map(|t| (t.name, t.data))
        .collect()
}

#[test]
fn a_tiny_video_model_learns_and_saves_its_best() {
    let _beside = crate::beside_others();
    let dir = scratch("learns");
    let (train_clips, test) = data();
    let opts = options(&dir, 40, 20, 3e-3);
    let (report, _) = train(
        &opts,
        train_clips,
        &test,
        vec![judge()],
        fresh(3),
        Reporter::silent(),
    )
    .unwrap();
    let losses: Vec<f64> = report.checkpoints.iter().map(|c| c.valid_loss).collect();
    assert_eq!(losses.len(), 2);
    // A fresh model predicts zero velocity: loss E|ε − x|² ≈ 1 + E[x²] ≈ 1.9 on these clips.
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(losses[1] < 1.5, "validation after 40 steps: {losses:?}");
    // The last checkpoint judges all 55 pairs and says how much the drawn clips move.
    let last = report.checkpoints.last().unwrap();
    assert_eq!(last.verdicts.as_ref().map(|v| v.clips()), Some(55));
    assert!(last.flicker.is_finite());
    for f in [
        "clips-step00040.gif",
        "clips-step00040.png",
        "guess-step00040.png",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let saved =
        nervus_models::video_pipeline::load_pipeline::<I>(&dir.join("model"), &Default::default())
            .unwrap();
    assert_eq!(saved.config, tiny());
    let _ = std::fs::remove_dir_all(dir);
}

/// Every batch of the resume test is cut across two threads ([`nervus_training::shard`]), so
/// the test also says that a threaded run is reproducible to the bit.
fn threaded(dir: &Path) -> VideoOptions {
    let mut o = options(dir, 4, 2, 1e-3);
    o.run.parts = 2;
    o
}

#[test]
fn a_video_run_stopped_and_resumed_is_the_run_that_never_stopped() {
    let _beside = crate::beside_others();
    let dir = scratch("resume");
    let (train_clips, test) = data();
    let whole_dir = dir.join("whole");
    let (whole, whole_model) = train(
        &threaded(&whole_dir),
        train_clips.clone(),
        &test,
        vec![judge()],
        fresh(7),
        Reporter::silent(),
    )
    .unwrap();
    assert_eq!(whole.checkpoints.len(), 2);

    let parts = dir.join("parts");
    let mut first = threaded(&parts);
    first.run.stop_after = Some(2);
    let (stopped, _) = train(
        &first,
        train_clips.clone(),
        &test,
        vec![judge()],
        fresh(7),
        Reporter::silent(),
    )
    .unwrap();
    assert_eq!(
        stopped.checkpoints.len(),
        1,
        "stopped at its first evaluation"
    );
    let mut second = threaded(&parts);
    second.run.resume = true;
    // Another starting model: the resume must replace it with the checkpoint's.
    let (resumed, resumed_model) = train(
        &second,
        train_clips.clone(),
        &test,
        vec![judge()],
        fresh(999),
        Reporter::silent(),
    )
    .unwrap();
    assert_eq!(resumed.checkpoints.len(), 1);
    let (a, b) = (&whole.checkpoints[1], &resumed.checkpoints[0]);
    assert_eq!(a.step, b.step);
    assert_eq!(a.train_loss.to_bits(), b.train_loss.to_bits());
    assert_eq!(a.valid_loss.to_bits(), b.valid_loss.to_bits());
    assert_eq!(a.label_gap.to_bits(), b.label_gap.to_bits());
    assert_eq!(params(&whole_model), params(&resumed_model));

    // The same run on one thread: the same arithmetic in another order, so close, not equal.
    let (single, _) = train(
        &options(&dir.join("single"), 4, 2, 1e-3),
        train_clips,
        &test,
        vec![judge()],
        fresh(7),
        Reporter::silent(),
    )
    .unwrap();
    let (x, y) = (single.checkpoints[1].valid_loss, a.valid_loss);
    assert!((x - y).abs() <= 1e-4 * y, "one thread {x}, two threads {y}");
    let _ = std::fs::remove_dir_all(dir);
}
