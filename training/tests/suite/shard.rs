//! A batch cut into parts run on threads side by side gives the whole batch's gradient and loss:
//! for every kind of training batch here (flow matching on clips, language modelling with
//! document masks, classification), at even and uneven cuts, in f64 so that only the order of
//! summation can differ. The models are scrambled and the inputs far from unit scale, so a missing
//! weight (a part's share of the batch) shows as a factor, not as rounding.

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{ClassificationOutput, TrainOutput, TrainStep};
use nervus_models::flow::FlowBatch;
use nervus_models::gpt::{GptConfig, LmBatch};
use nervus_models::mlp::{ClassBatch, MlpConfig};
use nervus_models::named;
use nervus_models::output::Objective;
use nervus_models::video_dit::{ClipBatch, VideoDitConfig};
use nervus_training::shard::{self, Merge, Shard, ranges};
use std::collections::HashMap;

type B = burn::backend::Autodiff<burn_ndarray::NdArray<f64>>;

/// Every parameter replaced by values of scale `scale`, different for every parameter.
fn scrambled<M: Module<B>>(model: M, seed: u64, scale: f64) -> M {
    let tensors: HashMap<_, _> = named::export(&model)
        .into_iter()
        .enumerate()
        .map(|(k, mut t)| {
            let mut s = (seed + k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            t.data.iter_mut().for_each(|v| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *v = (((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale) as f32;
            });
            (t.name.clone(), t)
        })
        .collect();
    named::import(model, tensors, std::path::Path::new("test")).expect("import")
}

use crate::alone;

/// Each parameter's gradient, by parameter id.
fn grads_of<M: AutodiffModule<B>>(model: &M, grads: &GradientsParams) -> HashMap<String, Vec<f64>> {
    struct Collect<'a> {
        grads: &'a GradientsParams,
        out: HashMap<String, Vec<f64>>,
    }
    impl ModuleVisitor<B> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let g = self
                .grads
                .get::<<B as AutodiffBackend>::InnerBackend, D>(param.id)
                .unwrap_or_else(|| panic!("no gradient for parameter {}", param.id));
            self.out
                .insert(param.id.to_string(), g.into_data().iter::<f64>().collect());
        }
    }
    let mut c = Collect {
        grads,
        out: HashMap::new(),
    };
    model.visit(&mut c);
    c.out
}

/// `a` equals `b` to `tol` relative to `b`'s largest magnitude (or `floor`, if larger); NaN
/// anywhere fails.
fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64, floor: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b.iter().fold(floor, |m, v| m.max(v.abs()));
    assert!(
        scale > 0.0,
        "{what}: the reference is all zero, which proves nothing"
    );
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x - y).abs() <= tol * scale;
        assert!(ok, "{what}[{i}]: {x} against {y} (scale {scale})");
    }
}

/// The step in `parts` parts against the model's own step on the whole batch.
fn check<M>(
    name: &str,
    model: &M,
    batch: M::Input,
    parts: usize,
    loss_of: impl Fn(&M::Output) -> f64,
) where
    M: Objective<B> + 'static,
    M::Input: Shard + Clone + Send + 'static,
    M::Output: Merge + Send + 'static,
{
    let whole: TrainOutput<M::Output> = model.step(batch.clone());
    let cut = shard::step(model, batch, parts);
    let (a, b) = (grads_of(model, &cut.grads), grads_of(model, &whole.grads));
    assert_eq!(a.len(), b.len(), "{name}: parameters with gradients");
    // A key projection's bias has a gradient of exactly zero (softmax ignores a shift shared by
    // every key), which both sides compute as rounding noise: each tensor is compared relative to
    // its own largest entry, but never to less than a ten-thousandth of the model's largest. That
    // allows 1e-14 of the largest gradient (about 45 ulps of it) where the noise reached 1.5e-16
    // of it; a millionth, used before, allowed 1e-16, under one ulp, and failed 4 runs in 2,100.
    let floor = 1e-4 * b.values().flatten().fold(0f64, |m, v| m.max(v.abs()));
    for (id, g) in &b {
        let what = format!("{name}, {parts} parts, grad {id}");
        assert_close(&what, &a[id], g, 1e-10, floor);
    }
    let (la, lb) = (loss_of(&cut.item), loss_of(&whole.item));
    assert!(
        (la - lb).abs() <= 1e-12 * lb.abs(),
        "{name}, {parts} parts: loss {la} against {lb}"
    );
    assert!(
        (cut.item.weight() - whole.item.weight()).abs() < 0.5,
        "{name}: the parts' weights add up to the whole"
    );
}

#[test]
fn ranges_cover_the_batch_in_nearly_equal_parts() {
    assert_eq!(ranges(5, 2), vec![(0, 3), (3, 2)]);
    assert_eq!(ranges(5, 3), vec![(0, 2), (2, 2), (4, 1)]);
    assert_eq!(ranges(2, 3), vec![(0, 1), (1, 1)], "never an empty part");
    assert_eq!(ranges(4, 1), vec![(0, 4)]);
    assert_eq!(ranges(4, 0), vec![(0, 4)], "0 parts means one");
    for n in 1..20 {
        for p in 1..6 {
            let r = ranges(n, p);
            assert_eq!(r.iter().map(|x| x.1).sum::<usize>(), n);
            assert!(r.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
            let (lo, hi) = r.iter().fold((n, 0), |(l, h), x| (l.min(x.1), h.max(x.1)));
            assert!(hi - lo <= 1 && lo > 0, "{n} in {p}: {r:?}");
        }
    }
}

#[test]
fn video_dit_parts_give_the_whole_batch_gradient() {
    let _alone = alone();
    let dev = Default::default();
    B::seed(&dev, 17);
    let config = VideoDitConfig::new()
        .with_frames(3)
        .with_sample_size(8)
        .with_num_layers(2)
        .with_num_attention_heads(2)
        .with_attention_head_dim(4);
    let model = scrambled(config.init::<B>(&dev), 11, 0.5);
    let shape = [5, 3, 1, 8, 8];
    let batch = FlowBatch::<B, 5> {
        x: Tensor::random(shape, Distribution::Normal(0.5, 3.0), &dev),
        noise: Tensor::random(shape, Distribution::Normal(0.0, 1.0), &dev),
        t: Tensor::from_data([0.1, 0.35, 0.5, 0.8, 0.95], &dev),
        labels: Tensor::from_data([[3, 7], [1, 10], [0, 0], [9, 2], [10, 10]], &dev),
    };
    let loss = |o: &nervus_models::output::LossOutput<_>| o.loss.clone().into_scalar();
    // Plain flow matching, and with two clips contrasted with their doubles: some parts then
    // hold contrasted clips and some none, and the contrast is still the whole batch's.
    let contrasted = ClipBatch {
        flow: batch.clone(),
        doubles: vec![Some([3, 3]), None, None, Some([2, 2]), None],
        double_contrast: 1.3,
    };
    for parts in [2, 3, 5] {
        check("video DiT", &model, batch.clone().into(), parts, loss);
        check("contrasted", &model, contrasted.clone(), parts, loss);
    }
}

#[test]
fn gpt_parts_give_the_whole_batch_gradient_with_document_masks() {
    let _alone = alone();
    let dev = Default::default();
    let config = GptConfig::new(11)
        .with_context(6)
        .with_layers(1)
        .with_heads(2)
        .with_d_model(8);
    let model = scrambled(config.init::<B>(&dev), 5, 0.7);
    let ids = |seed: i64| {
        let v: Vec<i64> = (0..18).map(|i| (i * 7 + seed) % 11).collect();
        Tensor::<B, 2, Int>::from_data(TensorData::new(v, [3, 6]), &dev)
    };
    // Row 1 has a document boundary after position 2; the others are one document.
    let mut mask = vec![false; 3 * 6 * 6];
    for i in 3..6 {
        for j in 0..3 {
            mask[36 + i * 6 + j] = true;
        }
    }
    let batch = LmBatch::<B> {
        inputs: ids(1),
        targets: ids(4),
        doc_mask: Some(Tensor::from_data(TensorData::new(mask, [3, 6, 6]), &dev)),
    };
    let loss = |o: &nervus_models::output::LossOutput<_>| o.loss.clone().into_scalar();
    for parts in [2, 3] {
        check("GPT", &model, batch.clone(), parts, loss);
    }
}

#[test]
fn mlp_parts_give_the_whole_batch_gradient_and_outputs() {
    let _alone = alone();
    let dev = Default::default();
    B::seed(&dev, 23);
    let model = scrambled(
        MlpConfig::new()
            .with_input(6)
            .with_hidden(5)
            .with_classes(4)
            .init::<B>(&dev),
        3,
        1.0,
    );
    let batch = ClassBatch::<B> {
        inputs: Tensor::random([7, 6], Distribution::Normal(1.0, 4.0), &dev),
        targets: Tensor::from_data([0, 3, 1, 2, 2, 0, 1], &dev),
    };
    let loss = |o: &burn::train::ClassificationOutput<B>| o.loss.clone().into_scalar();
    for parts in [2, 4] {
        check("MLP", &model, batch.clone(), parts, loss);
    }
    let whole = model.step(batch.clone()).item;
    let cut = shard::step(&model, batch, 3).item;
    let (a, b): (Vec<f64>, Vec<f64>) = (
        cut.output.into_data().iter().collect(),
        whole.output.into_data().iter().collect(),
    );
    assert_close("MLP logits, 3 parts", &a, &b, 1e-12, 0.0);
    let (ta, tb): (Vec<i64>, Vec<i64>) = (
        cut.targets.into_data().iter().collect(),
        whole.targets.into_data().iter().collect(),
    );
    assert_eq!(ta, tb, "targets in batch order");
}

/// A model whose forward pass fails on a batch holding a NaN: for the parts' failure paths.
#[derive(Module, Debug)]
struct Fragile<B: Backend> {
    w: Param<Tensor<B, 1>>,
}

impl<B: AutodiffBackend> Objective<B> for Fragile<B> {
    fn objective(&self, batch: ClassBatch<B>) -> (Tensor<B, 1>, ClassificationOutput<B>) {
        let n = batch.targets.dims()[0];
        let x: Vec<f64> = batch.inputs.clone().into_data().iter().collect();
        assert!(x.iter().all(|v| !v.is_nan()), "a NaN in this part's inputs");
        let logits = batch.inputs * self.w.val().unsqueeze();
        let loss = logits.clone().sum().reshape([1]) / n as f64;
        (
            loss.clone(),
            ClassificationOutput::new(loss, logits, batch.targets),
        )
    }
}

impl<B: AutodiffBackend> TrainStep for Fragile<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        nervus_models::output::train_step(self, batch)
    }
}

#[test]
fn a_part_that_fails_fails_the_step_and_no_part_waits_for_it() {
    let _alone = alone();
    let dev = Default::default();
    let model = Fragile::<B> {
        w: Param::from_tensor(Tensor::from_data([1.0, 2.0], &dev)),
    };
    for row in [0, 2, 5] {
        let mut x = vec![1.0; 12];
        x[2 * row] = f64::NAN;
        let batch = ClassBatch::<B> {
            inputs: Tensor::from_data(TensorData::new(x, [6, 2]), &dev),
            targets: Tensor::from_data([0, 1, 0, 1, 0, 1], &dev),
        };
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shard::step(&model, batch, 3)
        }));
        let message = failed
            .err()
            .and_then(|e| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert_eq!(message, "a NaN in this part's inputs", "NaN in row {row}");
    }
    // The same part threads still serve a good batch afterwards.
    let batch = ClassBatch::<B> {
        inputs: Tensor::from_data(TensorData::new(vec![1.0; 12], [6, 2]), &dev),
        targets: Tensor::from_data([0, 1, 0, 1, 0, 1], &dev),
    };
    let g = grads_of(&model, &shard::step(&model, batch, 3).grads);
    assert_eq!(g.values().next().expect("one parameter"), &vec![1.0, 1.0]);
}
