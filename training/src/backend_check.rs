//! Does a backend train like the reference one? The same video DiT (same weights), the same
//! batches and the same optimizer (AdamW behind global-norm clipping, as every run here uses) are
//! run for a few steps on both, and compared step by step: each step's loss and gradient norm,
//! every parameter's gradient at the first step, and how far every parameter has moved at the end.
//!
//! Float sums in another order differ in the last digits, and Adam turns that into whole steps of
//! the learning rate where a gradient is near zero, so the last comparison is against how far the
//! parameters moved, not against zero. A kernel that computes something else (a fused kernel with
//! a bug, say) shows as a difference orders of magnitude above that: the figures measured for flex
//! against ndarray in f64 are at [`Tolerances::CPU`]. `cargo run --release --features cuda
//! --example backend_check` runs it against the CPU.

use crate::optim::{OptimizerSpec, global_grad_norm};
use crate::video::clips::ClipSource;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use nervus_datasets::moving::Clips;
use nervus_datasets::rng::Rng;
use nervus_models::checkpoint::NamedTensor;
use nervus_models::named;
use nervus_models::video_dit::{VideoDit, VideoDitConfig};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::dit::TimeSampling;
use crate::loader::BatchSource;

/// What is run on both backends.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    /// Clips a step.
    pub batch: usize,
    /// Optimizer steps.
    pub steps: usize,
    pub lr: f64,
    /// Global gradient-norm clipping (0 = off).
    pub clip: f64,
    pub seed: u64,
}

impl Default for CheckOptions {
    /// The 8-block model of `docs/video/deep-run` at its batch and peak learning rate.
    fn default() -> Self {
        Self {
            layers: 8,
            d_model: 128,
            heads: 4,
            batch: 16,
            steps: 20,
            lr: 1e-3,
            clip: 1.0,
            seed: 1337,
        }
    }
}

/// Limits a tested backend must stay within. The defaults leave room for a GPU's matrix products
/// in reduced precision (TF32 keeps 10 bits of mantissa: relative errors near 1e-3 a product),
/// and are far below what a wrong kernel gives (errors of the order of the values). A CPU backend
/// in f32 against a reference in f64 agrees far more closely: see [`Tolerances::CPU`].
#[derive(Clone, Copy, Debug)]
pub struct Tolerances {
    /// Relative difference of every step's loss and gradient norm.
    pub step: f64,
    /// Relative difference (norm of the difference over the reference's norm) of every
    /// parameter's first-step gradient.
    pub grad: f64,
    /// Norm of the difference of every parameter at the end over how far the reference moved it.
    pub moved: f64,
}

impl Default for Tolerances {
    fn default() -> Self {
        Self {
            step: 1e-2,
            grad: 2e-2,
            moved: 0.25,
        }
    }
}

impl Tolerances {
    /// A CPU backend in f32 against ndarray in f64 (`training/tests/suite/backend_check.rs`): flex, on
    /// the tests' model, differs by at most 3.4e-8 (loss), 6.1e-8 (gradient norm), 8.0e-6 (a
    /// first-step gradient) and 8.1e-5 (an end against its move), measured on an AMD EPYC (AVX2).
    /// Against an f32 reference these limits would not hold: ndarray in f32 is itself 1.8e-4 away
    /// from f64 on one first-step gradient there (on the machine of an earlier session, ndarray
    /// and flex in f32 were 4.6e-5 apart on their worst one).
    pub const CPU: Tolerances = Tolerances {
        step: 1e-6,
        grad: 1e-4,
        moved: 1e-2,
    };
}

/// One backend's run.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Backend name, for the report.
    pub backend: String,
    /// Each step's loss (before the update).
    pub losses: Vec<f64>,
    /// Each step's global gradient norm (before clipping).
    pub grad_norms: Vec<f64>,
    /// Every parameter's gradient at the first step.
    pub first_grads: Vec<NamedTensor>,
    /// Every parameter at the start and at the end.
    pub start: Vec<NamedTensor>,
    pub end: Vec<NamedTensor>,
    /// Wall time of the steps, seconds (the first step's compilation included on a GPU).
    pub seconds: f64,
}

/// The model every backend starts from: initialised on `B` from `seed`, read out by name, then
/// every value moved by normal noise of std [`SCRAMBLE`]. A fresh DiT's output layer and adaLN
/// modulations are zero, so at its first step no gradient reaches anything but the output layer;
/// from scrambled weights every parameter's gradient is non-zero and a wrong factor anywhere
/// shows.
pub fn initial_weights<B: AutodiffBackend>(
    opts: &CheckOptions,
    device: &B::Device,
) -> Vec<NamedTensor> {
    B::seed(device, opts.seed);
    let model: VideoDit<B> = config(opts).init(device);
    let mut rng = Rng::stream(opts.seed, 0x5c4a);
    let mut weights = named::export(&model);
    for t in &mut weights {
        for v in &mut t.data {
            *v += (rng.normal() * SCRAMBLE) as f32;
        }
    }
    weights
}

/// Std of the noise [`initial_weights`] adds to every initial value.
pub const SCRAMBLE: f64 = 0.05;

fn config(opts: &CheckOptions) -> VideoDitConfig {
    VideoDitConfig::new()
        .with_num_layers(opts.layers)
        .with_num_attention_heads(opts.heads)
        .with_attention_head_dim(opts.d_model / opts.heads)
}

/// Runs the check's steps on `B` from `weights`, on batches made from `clips`.
pub fn trace<B: AutodiffBackend>(
    opts: &CheckOptions,
    weights: &[NamedTensor],
    clips: Arc<Clips>,
    name: &str,
    device: &B::Device,
) -> Result<Trace, String> {
    let fresh: VideoDit<B> = config(opts).init(device);
    let tensors: HashMap<String, NamedTensor> = weights
        .iter()
        .map(|t| (t.name.clone(), t.clone()))
        .collect();
    let mut model = named::import(fresh, tensors, Path::new("the reference's weights"))
        .map_err(|e| e.to_string())?;
    let classes = model.config.classes;
    let source = ClipSource::new(
        clips,
        opts.batch,
        opts.seed,
        0.1,
        TimeSampling::Uniform,
        classes,
        vec![opts.steps],
    );
    let mut optim =
        OptimizerSpec::adamw(0.0).build::<VideoDit<B>, B>(Some(opts.clip).filter(|c| *c > 0.0));
    let start = named::export(&model);
    let (mut losses, mut grad_norms, mut first_grads) = (Vec::new(), Vec::new(), Vec::new());
    let t0 = std::time::Instant::now();
    for i in 0..opts.steps {
        let batch = <ClipSource as BatchSource<B>>::batch(&source, 1, i, device);
        // What the model's `TrainStep` does, with the raw gradients kept for reading out.
        let loss = model.flow_loss(batch.flow);
        losses.push(loss.clone().into_scalar().elem::<f64>());
        let raw = loss.backward();
        if i == 0 {
            first_grads = named::export_grads::<B, _>(&model, &raw);
        }
        let grads = GradientsParams::from_grads(raw, &model);
        grad_norms.push(global_grad_norm::<B, _>(&model, &grads));
        model = optim.step(opts.lr, model, grads);
    }
    let end = named::export(&model.valid());
    Ok(Trace {
        backend: name.to_string(),
        losses,
        grad_norms,
        first_grads,
        start,
        end,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The largest of each kind of difference between a tested trace and the reference's.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// Relative difference of the loss and of the gradient norm, each step.
    pub losses: Vec<f64>,
    pub grad_norms: Vec<f64>,
    /// The parameter with the largest first-step gradient difference, and that difference.
    pub worst_grad: (String, f64),
    /// The parameter whose end differs most relative to how far it moved, and that ratio.
    pub worst_moved: (String, f64),
    /// Parameters left out of that comparison: their first-step gradient is rounding noise
    /// ([`GRADIENT_FREE`]).
    pub gradient_free: Vec<String>,
    /// What failed, one line each (empty: passed).
    pub failures: Vec<String>,
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

fn norm(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// Compares `tested` with `reference`. Every limit is tested by the private `within`, which is
/// false on NaN, so a NaN fails.
pub fn compare(reference: &Trace, tested: &Trace, tol: Tolerances) -> CheckReport {
    let mut failures = Vec::new();
    if reference.losses.len() != tested.losses.len() {
        failures.push(format!(
            "{} ran {} steps, the reference {}",
            tested.backend,
            tested.losses.len(),
            reference.losses.len()
        ));
    }
    let losses: Vec<f64> = reference
        .losses
        .iter()
        .zip(&tested.losses)
        .map(|(r, t)| rel(*t, *r))
        .collect();
    let grad_norms: Vec<f64> = reference
        .grad_norms
        .iter()
        .zip(&tested.grad_norms)
        .map(|(r, t)| rel(*t, *r))
        .collect();
    for (what, diffs, values) in [
        ("loss", &losses, &tested.losses),
        ("gradient norm", &grad_norms, &tested.grad_norms),
    ] {
        if let Some(i) = diffs.iter().position(|d| !within(*d, tol.step)) {
            failures.push(format!(
                "step {}: {what} {} differs from the reference's by {:.2e} (relative; limit {:.0e})",
                i + 1,
                values[i],
                diffs[i],
                tol.step
            ));
        }
    }
    let by_name = |v: &[NamedTensor]| -> HashMap<String, Vec<f64>> {
        v.iter()
            .map(|t| (t.name.clone(), t.data.iter().map(|&x| x as f64).collect()))
            .collect()
    };
    let (rg, tg) = (
        by_name(&reference.first_grads),
        by_name(&tested.first_grads),
    );
    // Parameters the loss does not depend on (a key bias, which adds the same amount to every
    // score a query gives, so the softmax cancels it) get gradients of rounding noise alone, and
    // Adam turns noise into steps of the whole learning rate: where they end is noise too.
    let elements: usize = rg.values().map(Vec::len).sum();
    let rms = |v: &[f64]| norm(v.iter().copied()) / (v.len().max(1) as f64).sqrt();
    let global_rms =
        reference.grad_norms.first().copied().unwrap_or(0.0) / (elements.max(1) as f64).sqrt();
    let mut gradient_free: Vec<String> = rg
        .iter()
        .filter(|(_, g)| rms(g) < GRADIENT_FREE * global_rms)
        .map(|(n, _)| n.clone())
        .collect();
    gradient_free.sort();
    for name in &gradient_free {
        // The tested backend's must be rounding noise too.
        let t = tg.get(name).map(|t| rms(t)).unwrap_or(f64::NAN);
        if !within(t, 10.0 * GRADIENT_FREE * global_rms) {
            failures.push(format!(
                "first-step gradient of {name} should be rounding noise (the loss does not depend on it) but its RMS is {t:.2e}, the whole model's {global_rms:.2e}"
            ));
        }
    }
    let compared = || rg.keys().filter(|n| !gradient_free.contains(n));
    let worst_grad = worst(compared(), |name| match (rg.get(name), tg.get(name)) {
        (Some(r), Some(t)) if t.len() == r.len() => {
            let diff = norm(r.iter().zip(t).map(|(a, b)| a - b));
            diff / norm(r.iter().copied()).max(f64::MIN_POSITIVE)
        }
        _ => f64::NAN,
    });
    if !within(worst_grad.1, tol.grad) {
        failures.push(format!(
            "first-step gradient of {} differs by {:.2e} of its norm (limit {:.0e})",
            worst_grad.0, worst_grad.1, tol.grad
        ));
    }
    let (r0, r1, t1) = (
        by_name(&reference.start),
        by_name(&reference.end),
        by_name(&tested.end),
    );
    let worst_moved = worst(compared(), |name| {
        match (r0.get(name), r1.get(name), t1.get(name)) {
            (Some(start), Some(r), Some(t)) if r.len() == start.len() && t.len() == start.len() => {
                let moved = norm(r.iter().zip(start).map(|(a, b)| a - b));
                let diff = norm(r.iter().zip(t).map(|(a, b)| a - b));
                diff / moved.max(f64::MIN_POSITIVE)
            }
            _ => f64::NAN,
        }
    });
    if !within(worst_moved.1, tol.moved) {
        failures.push(format!(
            "after {} steps, {} differs from the reference's by {:.2e} of how far it moved (limit {:.0e})",
            reference.losses.len(),
            worst_moved.0,
            worst_moved.1,
            tol.moved
        ));
    }
    CheckReport {
        losses,
        grad_norms,
        worst_grad,
        worst_moved,
        gradient_free,
        failures,
    }
}

/// A parameter whose first-step gradient's RMS is below this share of the whole model's is taken
/// to be one the loss does not depend on (its end position is not compared).
pub const GRADIENT_FREE: f64 = 1e-5;

/// `x` is at most `limit`: false for a NaN.
fn within(x: f64, limit: f64) -> bool {
    x <= limit
}

/// A parameter's name, or "all equal" where no parameter differed at all.
fn or_all_equal(name: &str) -> &str {
    if name.is_empty() { "all equal" } else { name }
}

/// The name with the largest difference `diff` gives (a NaN is the largest, and the first NaN
/// stays), with that difference; an empty name and 0 where there are no names.
fn worst<'a>(names: impl Iterator<Item = &'a String>, diff: impl Fn(&str) -> f64) -> (String, f64) {
    let mut worst = (String::new(), 0.0f64);
    for name in names {
        let d = diff(name);
        if !worst.1.is_nan() && !within(d, worst.1) {
            worst = (name.clone(), d);
        }
    }
    worst
}

impl CheckReport {
    /// The report as lines of text.
    pub fn summary(&self, reference: &Trace, tested: &Trace) -> String {
        let max = |v: &[f64]| {
            v.iter()
                .copied()
                .fold(0.0f64, |a, b| if b > a || b.is_nan() { b } else { a })
        };
        let mut s = String::new();
        s += &format!(
            "{} against {}: {} steps ({:.1} s against {:.1} s)\n",
            tested.backend,
            reference.backend,
            reference.losses.len(),
            tested.seconds,
            reference.seconds
        );
        s += "step  loss (reference)  loss (tested)  rel. diff  grad norm rel. diff\n";
        for i in 0..self.losses.len() {
            s += &format!(
                "{:>4}  {:>16.6}  {:>13.6}  {:>9.2e}  {:>9.2e}\n",
                i + 1,
                reference.losses[i],
                tested.losses[i],
                self.losses[i],
                self.grad_norms[i]
            );
        }
        s += &format!(
            "largest: loss {:.2e}, gradient norm {:.2e}, first-step gradient {:.2e} ({}), end against distance moved {:.2e} ({})\n",
            max(&self.losses),
            max(&self.grad_norms),
            self.worst_grad.1,
            or_all_equal(&self.worst_grad.0),
            self.worst_moved.1,
            or_all_equal(&self.worst_moved.0)
        );
        if !self.gradient_free.is_empty() {
            s += &format!(
                "not compared at the end (gradient is rounding noise): {}\n",
                self.gradient_free.join(", ")
            );
        }
        if self.failures.is_empty() {
            s += "PASS: trains like the reference\n";
        } else {
            for f in &self.failures {
                s += &format!("FAIL: {f}\n");
            }
        }
        s
    }
}
