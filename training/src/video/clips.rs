//! The video run's data: training batches of clips made on the spot ([`ClipSource`]), the fixed
//! validation clips ([`FixedClips`]) and the label gap they measure ([`LabelGap`]).

use crate::dit::{TimeSampling, flow_batch};
use crate::loader::BatchSource;
use burn::prelude::*;
use nervus_datasets::moving::Clips;
use nervus_datasets::rng::Rng;
use nervus_inference::video::{CLIP, clip_shape, to_model};
use nervus_models::flow::FlowBatch;
use nervus_models::video_dit::{ClipBatch, VideoDit};
use std::sync::Arc;

const EVAL_SEED: u64 = 0xC1_1B5;

/// Noise levels validation is measured at (1/16, 3/16, … 15/16).
pub const EVAL_LEVELS: usize = 8;

/// Training batches: clips of random digits made on the spot; batch `n` of the run is a function
/// of the seed and `n` alone.
pub struct ClipSource {
    clips: Arc<Clips>,
    batch: usize,
    seed: u64,
    label_dropout: f64,
    time: TimeSampling,
    null: i64,
    epochs: Vec<usize>,
    double_contrast: f64,
}

/// The lowest noise level at which a clip is contrasted with its double: below it the noised clip
/// still shows its digits, and no wrong label changed the 8-block model's loss by more than 0.0026
/// (on 0.04 to 0.07; `docs/video/preregistered-high-noise.md`).
pub const CONTRAST_FROM: f32 = 0.5;

impl ClipSource {
    pub fn new(
        clips: Arc<Clips>,
        batch: usize,
        seed: u64,
        label_dropout: f64,
        time: TimeSampling,
        classes: usize,
        epochs: Vec<usize>,
    ) -> Self {
        Self {
            clips,
            batch,
            seed,
            label_dropout,
            time,
            null: classes as i64,
            epochs,
            double_contrast: 0.0,
        }
    }

    /// Contrast each clip of two different digits, labelled and at a noise level of at least
    /// [`CONTRAST_FROM`], with one of its doubles chosen at random, at weight `lambda`
    /// ([`VideoDit::training_loss`]). At 0 (the default) the batches are those of a source without
    /// the option, to the bit.
    pub fn with_double_contrast(mut self, lambda: f64) -> Self {
        self.double_contrast = lambda;
        self
    }

    /// Epochs (evaluations) in the run.
    pub fn epochs(&self) -> usize {
        self.epochs.len()
    }
}

impl<B: Backend> BatchSource<B> for ClipSource {
    type Batch = ClipBatch<B>;

    fn batches(&self, epoch: usize) -> usize {
        crate::loader::batches_in(&self.epochs, epoch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> ClipBatch<B> {
        let n = crate::loader::run_index(&self.epochs, epoch, index);
        let mut rng = Rng::stream(self.seed, n as u64);
        let (mut x, mut noise, mut t, mut labels, mut doubles) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.batch {
            let clip = self.clips.random(&mut rng);
            x.extend(clip.pixels.iter().map(|&v| to_model(v)));
            let [a, b] = clip.digits.map(|d| d as i64);
            let dropped = rng.uniform() < self.label_dropout;
            if dropped {
                labels.extend([self.null, self.null]);
            } else {
                labels.extend([a, b]);
            }
            let level = self.time.draw(&mut rng);
            t.push(level);
            doubles.push(
                (self.double_contrast != 0.0 && !dropped && a != b && level >= CONTRAST_FROM).then(
                    || {
                        let d = if rng.uniform() < 0.5 { a } else { b };
                        [d, d]
                    },
                ),
            );
            noise.extend((0..CLIP).map(|_| rng.normal() as f32));
        }
        ClipBatch {
            flow: flow_batch(x, noise, t, labels, clip_shape(self.batch), device),
            doubles,
            double_contrast: self.double_contrast,
        }
    }
}

/// The validation questions: fixed test clips at 8 noise levels with noise drawn once, and for
/// each clip a wrong pair of labels (a different pair, either way round) for the label gap.
pub struct FixedClips {
    x: Vec<f32>,
    labels: Vec<i64>,
    wrong: Vec<i64>,
    noise: Vec<Vec<f32>>,
    clips: usize,
}

impl FixedClips {
    pub fn new(test: &Clips, clips: usize) -> Self {
        let mut rng = Rng::new(EVAL_SEED);
        let (mut x, mut labels, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..clips {
            let c = test.random(&mut rng);
            x.extend(c.pixels.iter().map(|&v| to_model(v)));
            let [a, b] = c.digits.map(|d| d as i64);
            labels.extend([a, b]);
            loop {
                let (wa, wb) = (
                    (a + 1 + rng.below(9) as i64) % 10,
                    (b + 1 + rng.below(9) as i64) % 10,
                );
                if (wa, wb) != (b, a) {
                    wrong.extend([wa, wb]);
                    break;
                }
            }
        }
        let noise = (0..EVAL_LEVELS)
            .map(|_| (0..clips * CLIP).map(|_| rng.normal() as f32).collect())
            .collect();
        Self {
            x,
            labels,
            wrong,
            noise,
            clips,
        }
    }

    fn level_batch<B: Backend>(
        &self,
        level: usize,
        wrong: bool,
        device: &B::Device,
    ) -> FlowBatch<B, 5> {
        let t = (2 * level + 1) as f32 / (2 * EVAL_LEVELS) as f32;
        flow_batch(
            self.x.clone(),
            self.noise[level].clone(),
            vec![t; self.clips],
            if wrong {
                self.wrong.clone()
            } else {
                self.labels.clone()
            },
            clip_shape(self.clips),
            device,
        )
    }

    /// Each clip's validation loss, averaged over the levels, with the right labels or the wrong
    /// ones. With the right labels their mean is the validation loss the learner reports.
    pub fn clip_losses<B: Backend>(&self, model: &VideoDit<B>, wrong: bool) -> Vec<f64> {
        let device = model.proj_out_2.weight.device();
        let mut sums = vec![0.0; self.clips];
        for l in 0..EVAL_LEVELS {
            let per_clip = model.flow_loss_per_clip(self.level_batch(l, wrong, &device));
            for (s, v) in sums.iter_mut().zip(per_clip.into_data().iter::<f64>()) {
                *s += v;
            }
        }
        sums.iter().map(|s| s / EVAL_LEVELS as f64).collect()
    }

    /// The label gap of `model` on these clips.
    pub fn label_gap<B: Backend>(&self, model: &VideoDit<B>) -> LabelGap {
        LabelGap::of(
            &self.clip_losses(model, false),
            &self.clip_losses(model, true),
        )
    }
}

/// The label gap: each validation clip's loss with a wrong pair of labels minus its loss with its
/// own, averaged over the clips, and the standard error of that average (the differences' sample
/// standard deviation over √n). A model that ignores its labels has a gap within a few standard
/// errors of zero; `z` says how many it is away.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LabelGap {
    pub mean: f64,
    pub standard_error: f64,
}

impl LabelGap {
    /// From each clip's loss with the right labels and with the wrong ones (same clips, same
    /// order). Fewer than two clips give a standard error of NaN.
    pub fn of(right: &[f64], wrong: &[f64]) -> Self {
        assert_eq!(right.len(), wrong.len(), "one loss of each kind per clip");
        let d: Vec<f64> = wrong.iter().zip(right).map(|(w, r)| w - r).collect();
        let n = d.len() as f64;
        let mean = d.iter().sum::<f64>() / n;
        let var = d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let standard_error = if d.len() < 2 {
            f64::NAN
        } else {
            (var / n).sqrt()
        };
        Self {
            mean,
            standard_error,
        }
    }

    /// Standard errors above zero.
    pub fn z(&self) -> f64 {
        self.mean / self.standard_error
    }
}

impl<B: Backend> BatchSource<B> for FixedClips {
    type Batch = FlowBatch<B, 5>;

    fn batches(&self, _epoch: usize) -> usize {
        EVAL_LEVELS
    }

    fn items_per_batch(&self) -> usize {
        self.clips
    }

    fn batch(&self, _epoch: usize, level: usize, device: &B::Device) -> FlowBatch<B, 5> {
        self.level_batch(level, false, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_datasets::mnist::Mnist;

    /// A contrasting source gives a clip a double only where it may (labelled, two different
    /// digits, noise level at least 0.5), and then one of that clip's own doubles, both kinds
    /// turning up; without the option no clip has one.
    #[test]
    fn a_contrasting_source_picks_each_double_from_the_clips_own_digits() {
        type F = burn::backend::Flex;
        let data = Mnist::vendored();
        let clips = Arc::new(Clips::new(&data.test));
        let source = |lambda| {
            ClipSource::new(
                clips.clone(),
                48,
                3,
                0.2,
                TimeSampling::Uniform,
                10,
                vec![4],
            )
            .with_double_contrast(lambda)
        };
        let (on, off) = (source(0.8), source(0.0));
        let dev = Default::default();
        let (mut firsts, mut seconds, mut allowed) = (0, 0, 0);
        for i in 0..4 {
            let a: ClipBatch<F> = on.batch(0, i, &dev);
            let b: ClipBatch<F> = off.batch(0, i, &dev);
            assert_eq!(a.double_contrast, 0.8);
            assert!(
                b.doubles.iter().all(Option::is_none),
                "no contrast, no doubles"
            );
            let first = |batch: &ClipBatch<F>| batch.flow.x.clone().narrow(0, 0, 1).into_data();
            assert_eq!(first(&a), first(&b), "the same clips are drawn");
            let labels: Vec<i64> = a.flow.labels.clone().into_data().iter::<i64>().collect();
            let t: Vec<f32> = a.flow.t.clone().into_data().iter::<f32>().collect();
            for (k, double) in a.doubles.iter().enumerate() {
                let (x, y) = (labels[2 * k], labels[2 * k + 1]);
                let may = x != 10 && x != y && t[k] >= CONTRAST_FROM;
                allowed += usize::from(may);
                match double {
                    None => assert!(!may, "clip {k} ({x}, {y}) at {} has no double", t[k]),
                    Some(d) => {
                        assert!(may, "clip {k} ({x}, {y}) at {} has {d:?}", t[k]);
                        assert!(*d == [x, x] || *d == [y, y], "({x}, {y}) got {d:?}");
                        firsts += usize::from(d[0] == x);
                        seconds += usize::from(d[0] == y);
                    }
                }
            }
        }
        assert!(
            allowed > 40,
            "most batches have contrasted clips: {allowed}"
        );
        assert!(
            firsts > 5 && seconds > 5,
            "both doubles: {firsts} and {seconds}"
        );
    }

    #[test]
    fn the_label_gap_is_the_mean_difference_with_its_standard_error() {
        let right = [1.0, 2.0, 3.0, 4.0];
        let wrong = [1.5, 2.5, 3.0, 5.0];
        // Differences 0.5 0.5 0 1: mean 0.5, sample variance 1/6, standard error √(1/24).
        let g = LabelGap::of(&right, &wrong);
        assert!((g.mean - 0.5).abs() < 1e-15);
        assert!((g.standard_error - (1.0f64 / 24.0).sqrt()).abs() < 1e-15);
        assert!((g.z() - 0.5 / (1.0f64 / 24.0).sqrt()).abs() < 1e-12);
        assert!(LabelGap::of(&[1.0], &[2.0]).standard_error.is_nan());
    }

    #[test]
    fn wrong_labels_are_never_the_right_pair() {
        let data = Mnist::vendored();
        let f = FixedClips::new(&Clips::new(&data.test), 50);
        for (r, w) in f.labels.chunks(2).zip(f.wrong.chunks(2)) {
            let (mut r, mut w) = (r.to_vec(), w.to_vec());
            r.sort();
            w.sort();
            assert_ne!(r, w);
        }
    }

    #[test]
    fn clip_losses_average_to_the_validation_loss() {
        use burn::backend::Flex;
        use nervus_models::video_dit::VideoDitConfig;
        let data = Mnist::vendored();
        let f = FixedClips::new(&Clips::new(&data.test), 3);
        let config = VideoDitConfig::new()
            .with_num_layers(1)
            .with_num_attention_heads(1)
            .with_attention_head_dim(8);
        let device = Default::default();
        let model = config.init::<Flex>(&device);
        let per_level: f64 = (0..EVAL_LEVELS)
            .map(|l| {
                model
                    .flow_loss(f.level_batch::<Flex>(l, false, &device))
                    .into_scalar()
                    .elem::<f64>()
            })
            .sum::<f64>()
            / EVAL_LEVELS as f64;
        let clips = f.clip_losses(&model, false);
        assert_eq!(clips.len(), 3);
        let mean = clips.iter().sum::<f64>() / 3.0;
        assert!(
            (mean - per_level).abs() <= 1e-5 * per_level,
            "{mean} vs {per_level}"
        );
    }
}
