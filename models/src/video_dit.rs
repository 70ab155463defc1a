//! The video DiT: the image DiT with one more axis. Every frame is cut into patches as before
//! (with the same 2-D position wave), the frames are laid end to end (`F·N` tokens), a third wave
//! says which frame a token is in ([`crate::frame_embed`]), and the two labels are looked up and
//! added ([`crate::label_embed`]). The blocks, the output layer, the flow-matching loss and the
//! sampler are the image model's.
//!
//! Attention is what changes. `Full` lets every token read all `F·N`; `Factorised` alternates a
//! spatial block (each frame's `N` patches read each other) with a temporal block (each place's
//! `F` frames read each other), done by regrouping the tokens ([`crate::regroup`]), so a patch
//! still hears from anywhere in the clip, in two hops, for a fraction of the arithmetic.

use crate::dit_trunk::{DitTrunk, TrunkShape};
use crate::flow::{FlowBatch, Velocity, mse, mse_per_sample, noised};
use crate::frame_embed::add_frame_wave;
use crate::output::{LossOutput, Objective, train_step};
use crate::patch_embed::unpatchify;
use crate::regroup::{Axis, Grouping};
use burn::prelude::*;
use burn::tensor::activation::softplus;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use serde::{Deserialize, Serialize};

/// Which tokens a block lets attend to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// Even blocks within a frame, odd blocks across frames at one place.
    Factorised,
    /// Every block over all tokens of the clip.
    Full,
}

impl std::str::FromStr for Attention {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "factorised" | "factorized" => Ok(Self::Factorised),
            "full" => Ok(Self::Full),
            other => Err(format!("unknown attention `{other}`: factorised or full")),
        }
    }
}

/// Shape of a [`VideoDit`]; names as the image model's config where they mean the same.
#[derive(Config, Debug, PartialEq)]
pub struct VideoDitConfig {
    #[config(default = 8)]
    pub frames: usize,
    /// Frame side in pixels.
    #[config(default = 32)]
    pub sample_size: usize,
    #[config(default = 4)]
    pub patch_size: usize,
    #[config(default = 1)]
    pub in_channels: usize,
    #[config(default = 4)]
    pub num_layers: usize,
    #[config(default = 4)]
    pub num_attention_heads: usize,
    #[config(default = 32)]
    pub attention_head_dim: usize,
    #[config(default = 10)]
    pub classes: usize,
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    #[config(default = "Attention::Factorised")]
    pub attention: Attention,
}

impl VideoDitConfig {
    pub fn d_model(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    /// Patches per frame.
    pub fn patches(&self) -> usize {
        (self.sample_size / self.patch_size).pow(2)
    }

    pub fn patch_shape(&self) -> crate::patch_embed::PatchShape {
        crate::patch_embed::PatchShape {
            channels: self.in_channels,
            patch: self.patch_size,
        }
    }

    /// Block `i`'s grouping: `None` for full attention.
    pub fn grouping(&self, i: usize) -> Option<Grouping> {
        match self.attention {
            Attention::Full => None,
            Attention::Factorised => Some(Grouping {
                frames: self.frames,
                patches: self.patches(),
                axis: if i.is_multiple_of(2) {
                    Axis::Space
                } else {
                    Axis::Time
                },
            }),
        }
    }

    /// Initialised as the image DiT is: every block the identity, zero velocity out.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VideoDit<B> {
        assert!(
            self.sample_size.is_multiple_of(self.patch_size),
            "patch size {} does not divide the frame side {}",
            self.patch_size,
            self.sample_size
        );
        self.shape().init(self.clone(), device)
    }

    /// The sizes of its trunk.
    pub fn shape(&self) -> TrunkShape {
        TrunkShape {
            in_channels: self.in_channels,
            patch_size: self.patch_size,
            num_layers: self.num_layers,
            num_attention_heads: self.num_attention_heads,
            attention_head_dim: self.attention_head_dim,
            classes: self.classes,
            norm_eps: self.norm_eps,
        }
    }
}

/// The video DiT: the image model's trunk with a [`VideoDitConfig`] (frames, attention groups).
pub type VideoDit<B> = DitTrunk<B, VideoDitConfig>;

impl<B: Backend> VideoDit<B> {
    /// The clip as tokens, frames end to end, with both position waves. Shapes:
    /// `x [B, F, C, H, W]` → `[B, F·N, D]`.
    pub fn embed(&self, x: Tensor<B, 5>) -> Tensor<B, 3> {
        let [b, f, c, h, w] = x.dims();
        let tokens = self.pos_embed.forward(x.reshape([b * f, c, h, w])); // [B·F, N, D]
        let [_, n, d] = tokens.dims();
        add_frame_wave(tokens.reshape([b, f, n, d])).reshape([b, f * n, d])
    }

    /// Shapes: `x [B, F, C, H, W]`, `t [B]` on the 0..1000 scale, `labels [B, 2]` (the null
    /// class for "no label") → velocity `[B, F, C, H, W]`.
    pub fn forward(
        &self,
        x: Tensor<B, 5>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
    ) -> Tensor<B, 5> {
        let [b, f, c, h, w] = x.dims();
        let tokens = self.embed(x);
        let out = self.blocks_and_head(tokens, t, labels, |i| self.config.grouping(i)); // [B, F·N, p·p·C]
        let [_, _, pp] = out.dims();
        let n = self.config.patches();
        unpatchify(out.reshape([b * f, n, pp]), self.config.patch_size, c, h, w)
            .reshape([b, f, c, h, w])
    }

    /// The flow-matching loss of a batch of clips.
    pub fn flow_loss(&self, batch: FlowBatch<B, 5>) -> Tensor<B, 1> {
        let (pred, target) = self.prediction_and_target(batch);
        mse(pred, target)
    }

    /// The velocity predicted at the noised clips and the one that should have been.
    fn prediction_and_target(&self, batch: FlowBatch<B, 5>) -> (Tensor<B, 5>, Tensor<B, 5>) {
        let (xt, target) = noised(batch.x, batch.noise, batch.t.clone());
        (self.forward(xt, batch.t * 1000.0, batch.labels), target)
    }

    /// The flow-matching loss of each clip of a batch: what `flow_loss` averages.
    ///
    /// Shapes: clips `[B, F, C, H, W]` → `[B]`.
    pub fn flow_loss_per_clip(&self, batch: FlowBatch<B, 5>) -> Tensor<B, 1> {
        let (pred, target) = self.prediction_and_target(batch);
        mse_per_sample(pred, target)
    }
}

/// The sharpness of the double contrast: a clip whose double costs `d` more than its own pair
/// scores `softplus(−DOUBLE_SCALE·d) / DOUBLE_SCALE`, so at `d` = 0.005 the odds are e to 1.
pub const DOUBLE_SCALE: f64 = 200.0;

/// A training batch of clips: the flow-matching batch and, for the clips whose pair is to be told
/// apart from its double, the double's labels (`[a, a]` or `[b, b]` for a clip of `a` and `b`).
#[derive(Clone, Debug)]
pub struct ClipBatch<B: Backend> {
    pub flow: FlowBatch<B, 5>,
    /// One entry per clip: the double to contrast it with, or `None`.
    pub doubles: Vec<Option<[i64; 2]>>,
    /// λ, the contrast's weight; 0 is plain flow matching.
    pub double_contrast: f64,
}

impl<B: Backend> From<FlowBatch<B, 5>> for ClipBatch<B> {
    /// Plain flow matching: nothing contrasted.
    fn from(flow: FlowBatch<B, 5>) -> Self {
        let n = flow.t.dims()[0];
        Self {
            flow,
            doubles: vec![None; n],
            double_contrast: 0.0,
        }
    }
}

impl<B: Backend> VideoDit<B> {
    /// The loss training minimises, and the flow loss inside it (what a step reports):
    ///
    /// `flow + λ/B · Σ_k softplus_s(L_k − D_k)`, the sum over the contrasted clips `k`, where
    /// `L_k` is clip `k`'s flow loss with its own labels, `D_k` with its double's (same noised
    /// clip, same level), `softplus_s(u) = ln(1 + e^{s·u})/s` with `s` = [`DOUBLE_SCALE`], and `B`
    /// the batch's clips (not the contrasted ones', so a batch cut into parts sums to the same).
    /// It asks the model to find a clip of `a` and `b` worse explained by "two `a`s" than by "an
    /// `a` and a `b`", the difference it barely makes on its own. Shapes: clips `[B, F, C, H, W]`
    /// → two `[1]`.
    pub fn training_loss(&self, batch: ClipBatch<B>) -> (Tensor<B, 1>, Tensor<B, 1>) {
        let ClipBatch {
            flow,
            doubles,
            double_contrast,
        } = batch;
        let b = flow.t.dims()[0];
        assert_eq!(doubles.len(), b, "one double (or none) per clip");
        let picked: Vec<(usize, [i64; 2])> = doubles
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i, d)))
            .collect();
        if double_contrast == 0.0 || picked.is_empty() {
            // Plain flow matching, to the bit as before the contrast existed.
            let loss = self.flow_loss(flow);
            return (loss.clone(), loss);
        }
        let (xt, target) = noised(flow.x, flow.noise, flow.t.clone());
        let t = flow.t * 1000.0;
        let own = mse_per_sample(
            self.forward(xt.clone(), t.clone(), flow.labels),
            target.clone(),
        );
        let loss = own.clone().mean();
        let device = xt.device();
        let k = picked.len();
        let index = Tensor::<B, 1, Int>::from_data(
            TensorData::new(picked.iter().map(|(i, _)| *i as i64).collect(), [k]),
            &device,
        );
        let labels = Tensor::<B, 2, Int>::from_data(
            TensorData::new(picked.iter().flat_map(|(_, d)| *d).collect(), [k, 2]),
            &device,
        );
        let double = mse_per_sample(
            self.forward(
                xt.select(0, index.clone()),
                t.select(0, index.clone()),
                labels,
            ),
            target.select(0, index.clone()),
        );
        let margin = own.select(0, index) - double;
        let contrast = softplus(margin, DOUBLE_SCALE).sum() * (double_contrast / b as f64);
        (loss.clone() + contrast, loss)
    }
}

impl<B: AutodiffBackend> Objective<B> for VideoDit<B> {
    /// The training loss, contrast included; reports the flow loss alone.
    fn objective(&self, batch: ClipBatch<B>) -> (Tensor<B, 1>, LossOutput<B::InnerBackend>) {
        let count = batch.flow.x.dims().iter().product();
        let (training, flow) = self.training_loss(batch);
        let output = LossOutput {
            loss: flow.inner(),
            count,
        };
        (training, output)
    }
}

impl<B: AutodiffBackend> TrainStep for VideoDit<B> {
    type Input = ClipBatch<B>;
    type Output = LossOutput<B::InnerBackend>;

    fn step(&self, batch: ClipBatch<B>) -> TrainOutput<LossOutput<B::InnerBackend>> {
        train_step(self, batch)
    }
}

impl<B: Backend> InferenceStep for VideoDit<B> {
    type Input = FlowBatch<B, 5>;
    type Output = LossOutput<B>;

    fn step(&self, batch: FlowBatch<B, 5>) -> LossOutput<B> {
        let count = batch.x.dims().iter().product();
        LossOutput {
            loss: self.flow_loss(batch),
            count,
        }
    }
}

impl<B: Backend> Velocity<B, 5> for VideoDit<B> {
    fn velocity(
        &self,
        x: Tensor<B, 5>,
        t: Tensor<B, 1>,
        labels: Tensor<B, 2, Int>,
    ) -> Tensor<B, 5> {
        self.forward(x, t * 1000.0, labels)
    }

    fn null_label(&self) -> i64 {
        self.config.classes as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{AB, TB, assert_close, to_vec, worst_rel};
    use burn::tensor::Distribution;

    fn small(attention: Attention) -> VideoDitConfig {
        VideoDitConfig::new()
            .with_frames(3)
            .with_sample_size(8)
            .with_num_layers(2)
            .with_num_attention_heads(2)
            .with_attention_head_dim(4)
            .with_attention(attention)
    }

    /// Scrambles every parameter (the adaLN maps and the output start at zero, which would hide
    /// nearly everything).
    fn scrambled<B: Backend>(config: &VideoDitConfig, seed: u64) -> VideoDit<B> {
        map_params(config.init::<B>(&Default::default()), |k, _, data| {
            let mut r = xorshift(seed + k as u64);
            data.iter_mut().for_each(|v| *v = r() as f32 * 0.5);
        })
    }

    /// The label tables scaled by `f`, so that labels change the loss a little, as a trained
    /// model's do, and a contrast on them is neither flat nor a straight line.
    fn quiet_labels<B: Backend>(model: VideoDit<B>, f: f64) -> VideoDit<B> {
        map_params(model, |_, name, data| {
            if name.ends_with("embedding_table.weight") {
                data.iter_mut().for_each(|v| *v *= f as f32);
            }
        })
    }

    /// The model with `edit(k, name, values)` applied to its `k`-th named parameter.
    fn map_params<B: Backend>(
        model: VideoDit<B>,
        mut edit: impl FnMut(usize, &str, &mut [f32]),
    ) -> VideoDit<B> {
        let tensors: std::collections::HashMap<_, _> = crate::named::export(&model)
            .into_iter()
            .enumerate()
            .map(|(k, mut t)| {
                edit(k, &t.name, &mut t.data);
                (t.name.clone(), t)
            })
            .collect();
        crate::named::import(model, tensors, std::path::Path::new("test")).expect("import")
    }

    /// A small generator, so this crate's tests need no data crate.
    fn xorshift(seed: u64) -> impl FnMut() -> f64 {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        }
    }

    fn inputs<B: Backend>(c: &VideoDitConfig) -> (Tensor<B, 5>, Tensor<B, 1>, Tensor<B, 2, Int>) {
        let dev = Default::default();
        let x = Tensor::<B, 5>::random(
            [2, c.frames, 1, c.sample_size, c.sample_size],
            Distribution::Normal(0.0, 3.0),
            &dev,
        );
        let t = Tensor::<B, 1>::from_data([250.0, 800.0], &dev);
        let labels = Tensor::<B, 2, Int>::from_data([[3, 7], [1, 10]], &dev);
        (x, t, labels)
    }

    #[test]
    fn three_and_seven_is_seven_and_three() {
        let c = small(Attention::Factorised);
        let model = scrambled::<TB>(&c, 1);
        let (x, t, labels) = inputs::<TB>(&c);
        let swapped = labels.clone().flip([1]);
        let a = to_vec(model.forward(x.clone(), t.clone(), labels));
        let b = to_vec(model.forward(x, t, swapped));
        assert!(
            a.iter().any(|v| v.abs() > 1e-3),
            "a scrambled model says something"
        );
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-12 * (1.0 + u.abs()), "{u} vs {v}");
        }
    }

    /// Each clip's loss is the loss of that clip alone, and their mean is the batch's loss.
    #[test]
    fn per_clip_losses_are_each_clips_own_and_average_to_the_batch_loss() {
        let c = small(Attention::Factorised);
        let model = scrambled::<TB>(&c, 3);
        let (x, t, labels) = inputs::<TB>(&c);
        let noise = Tensor::<TB, 5>::random(
            x.dims(),
            Distribution::Normal(0.0, 1.0),
            &Default::default(),
        );
        let batch = |r: std::ops::Range<usize>| FlowBatch {
            x: x.clone().slice([r.clone()]),
            noise: noise.clone().slice([r.clone()]),
            t: t.clone().slice([r.clone()]) / 1000.0,
            labels: labels.clone().slice([r]),
        };
        let each = to_vec(model.flow_loss_per_clip(batch(0..2)));
        let whole = to_vec(model.flow_loss(batch(0..2)))[0];
        assert_eq!(each.len(), 2);
        for (k, v) in each.iter().enumerate() {
            let alone = to_vec(model.flow_loss(batch(k..k + 1)))[0];
            assert!(
                (v - alone).abs() <= 1e-12 * alone,
                "clip {k}: {v} vs {alone}"
            );
        }
        assert!(
            each[0] != each[1],
            "two different clips, two different losses"
        );
        let mean = (each[0] + each[1]) / 2.0;
        assert!((mean - whole).abs() <= 1e-12 * whole, "{mean} vs {whole}");
    }

    /// In the factorised model with one spatial block only, no frame can hear from another: the
    /// velocity of frame 0 does not move when frame 2 changes. Add the temporal block and it does.
    #[test]
    fn frames_meet_only_through_the_temporal_block() {
        for (layers, should_hear) in [(1, false), (2, true)] {
            let c = small(Attention::Factorised).with_num_layers(layers);
            let model = scrambled::<TB>(&c, 2);
            let (x, t, labels) = inputs::<TB>(&c);
            let frame0 = |x: Tensor<TB, 5>| {
                to_vec(
                    model
                        .forward(x, t.clone(), labels.clone())
                        .slice([0..2, 0..1]),
                )
            };
            let before = frame0(x.clone());
            let bumped = x.clone().slice_assign(
                [0..2, 2..3, 0..1, 0..8, 0..8],
                Tensor::ones([2, 1, 1, 8, 8], &Default::default()) * 5.0,
            );
            let after = frame0(bumped);
            let moved = before
                .iter()
                .zip(&after)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            if should_hear {
                assert!(
                    moved > 1e-3,
                    "the temporal block carries frame 2 to frame 0: {moved}"
                );
            } else {
                assert_eq!(moved, 0.0, "a spatial block alone keeps frames apart");
            }
        }
    }

    /// Full and factorised attention are one parameter layout: the same weights load into both,
    /// and they differ only in what the blocks let attend.
    #[test]
    fn full_and_factorised_share_weights_and_differ_in_output() {
        let f = scrambled::<TB>(&small(Attention::Factorised), 3);
        let full = scrambled::<TB>(&small(Attention::Full), 3);
        let (x, t, labels) = inputs::<TB>(&f.config);
        let a = to_vec(f.forward(x.clone(), t.clone(), labels.clone()));
        let b = to_vec(full.forward(x, t, labels));
        assert_eq!(a.len(), b.len());
        assert!(a.iter().zip(&b).any(|(u, v)| (u - v).abs() > 1e-6));
    }

    #[test]
    fn every_parameter_gets_a_gradient() {
        let c = small(Attention::Factorised);
        let model = scrambled::<AB>(&c, 4);
        let (x, t, labels) = inputs::<AB>(&c);
        let loss = model.forward(x, t, labels).square().mean();
        let grads = loss.backward();
        for g in crate::named::export_grads(&model, &grads) {
            if g.name.ends_with("attn1.to_k.bias") {
                // Adding one vector to every key shifts a whole row of scores, which softmax
                // cannot see: this gradient is zero (up to rounding) by design.
                assert!(g.data.iter().all(|v| v.abs() < 1e-9), "{}", g.name);
                continue;
            }
            assert!(
                g.data.iter().any(|&v| v != 0.0) && g.data.iter().all(|v| v.is_finite()),
                "{} has no gradient",
                g.name
            );
        }
    }

    /// `--attention` reads both spellings of factorised, and names what it cannot read.
    #[test]
    fn attention_is_read_by_name() {
        assert_eq!("factorised".parse(), Ok(Attention::Factorised));
        assert_eq!("factorized".parse(), Ok(Attention::Factorised));
        assert_eq!("full".parse(), Ok(Attention::Full));
        let e = "sparse".parse::<Attention>().unwrap_err();
        assert!(e.contains("`sparse`"), "{e}");
    }

    /// Factorised blocks alternate space, time, space, ...; full attention groups nothing. A
    /// spatial group is one frame's patches: (32 / 4)² = 64 of them in the default clip.
    #[test]
    fn blocks_alternate_space_and_time() {
        let c = VideoDitConfig::new();
        assert_eq!(c.patches(), 64);
        let axes: Vec<Option<Axis>> = (0..4).map(|i| c.grouping(i).map(|g| g.axis)).collect();
        assert_eq!(
            axes,
            [
                Some(Axis::Space),
                Some(Axis::Time),
                Some(Axis::Space),
                Some(Axis::Time)
            ]
        );
        let g = c.grouping(1).expect("factorised");
        assert_eq!((g.frames, g.patches), (8, 64));
        let full = c.with_attention(Attention::Full);
        assert!((0..4).all(|i| full.grouping(i).is_none()));
    }

    /// The output head emits p·p·C values a patch: a three-channel clip comes back in its own
    /// shape, each channel its own (every other test here is one channel, where p·p·C = p·p).
    #[test]
    fn a_colour_clip_comes_back_in_its_own_shape() {
        let c = small(Attention::Factorised).with_in_channels(3);
        let model = scrambled::<TB>(&c, 9);
        let dev = Default::default();
        let x = Tensor::<TB, 5>::random([1, 3, 3, 8, 8], Distribution::Normal(0.0, 3.0), &dev);
        let t = Tensor::<TB, 1>::from_data([400.0], &dev);
        let labels = Tensor::<TB, 2, Int>::from_data([[2, 5]], &dev);
        let v = model.forward(x, t, labels);
        assert_eq!(v.dims(), [1, 3, 3, 8, 8]);
        let channel = |k: usize| to_vec(v.clone().slice([0..1, 0..3, k..k + 1]));
        let (r, g) = (channel(0), channel(1));
        assert!(r.iter().all(|u| u.is_finite()), "finite velocity");
        assert!(
            r.iter().zip(&g).any(|(u, w)| (u - w).abs() > 1e-3),
            "the channels are distinct outputs"
        );
    }

    #[test]
    #[should_panic(expected = "patch size 3 does not divide the frame side 8")]
    fn a_patch_that_does_not_divide_the_frame_is_refused() {
        small(Attention::Full)
            .with_patch_size(3)
            .init::<TB>(&Default::default());
    }

    /// What the sampler integrates is the network at diffusers' 0..1000 timestep scale, and "no
    /// label" is the class after the last real one.
    #[test]
    fn the_velocity_is_the_network_at_a_thousand_times_t() {
        let c = small(Attention::Factorised);
        let model = scrambled::<TB>(&c, 5);
        assert_eq!(model.null_label(), 10);
        assert_eq!(
            scrambled::<TB>(&c.clone().with_classes(4), 5).null_label(),
            4
        );
        let (x, t, labels) = inputs::<TB>(&c);
        let got = to_vec(model.velocity(x.clone(), t.clone() / 1000.0, labels.clone()));
        let want = to_vec(model.forward(x.clone(), t.clone(), labels.clone()));
        assert_close("velocity", &got, &want, 1e-12);
        let other = to_vec(model.forward(x, t + 1.0, labels));
        assert!(worst_rel(&got, &other) > 1e-6, "the timestep matters");
    }

    /// The training and evaluation steps report the flow loss at `x_t = (1 − t)·x + t·noise`
    /// against `noise − x`, over every value of the clips (B·F·C·H·W).
    #[test]
    fn steps_report_the_flow_loss_over_every_value() {
        let c = small(Attention::Factorised);
        let model = scrambled::<AB>(&c, 6);
        let (x, t, labels) = inputs::<AB>(&c);
        let noise = x.clone().flip([3]) * 0.3 + 0.5;
        let s = (t.clone() / 1000.0).reshape([2, 1, 1, 1, 1]);
        let xt = x.clone() * (s.clone().neg() + 1.0) + noise.clone() * s;
        let by_hand = to_vec(
            (model.forward(xt, t.clone(), labels.clone()) - (noise.clone() - x.clone()))
                .square()
                .mean(),
        )[0];
        let batch = || FlowBatch {
            x: x.clone(),
            noise: noise.clone(),
            t: t.clone() / 1000.0,
            labels: labels.clone(),
        };
        let values = 2 * 3 * 8 * 8;
        let out = TrainStep::step(&model, batch().into());
        assert_eq!(out.item.count, values);
        assert_close("train step loss", &to_vec(out.item.loss), &[by_hand], 1e-12);
        let inner = burn::module::AutodiffModule::valid(&model);
        let b = batch();
        let out = InferenceStep::step(
            &inner,
            FlowBatch {
                x: b.x.inner(),
                noise: b.noise.inner(),
                t: b.t.inner(),
                labels: b.labels.inner(),
            },
        );
        assert_eq!(out.count, values);
        assert_close("eval step loss", &to_vec(out.loss), &[by_hand], 1e-12);
    }

    /// Two clips (values of standard deviation 3, noise levels 0.55 and 0.85), the first to be
    /// contrasted with (2, 2), the second with (5, 5).
    fn contrast_batch<B: Backend>(
        shape: [usize; 5],
        labels: [[i64; 2]; 2],
        contrast: f64,
    ) -> ClipBatch<B> {
        let dev = Default::default();
        let n = shape.iter().product::<usize>();
        let values = |seed, std| {
            Tensor::<B, 1>::from_data(
                TensorData::new(crate::compare::randn(seed, n, std), [n]),
                &dev,
            )
            .reshape(shape)
        };
        ClipBatch {
            flow: FlowBatch {
                x: values(21, 3.0),
                noise: values(22, 1.0),
                t: Tensor::from_data([0.55, 0.85], &dev),
                labels: Tensor::from_data(labels, &dev),
            },
            doubles: vec![Some([2, 2]), Some([5, 5])],
            double_contrast: contrast,
        }
    }

    /// The contrasted loss is the flow loss plus λ/B times the summed softplus of each contrasted
    /// clip's own loss minus its double's, each of those the clip's flow loss with those labels.
    #[test]
    fn the_double_contrast_adds_the_softplus_of_each_contrasted_clips_margin() {
        let c = small(Attention::Factorised);
        let model = quiet_labels(scrambled::<TB>(&c, 8), 0.01);
        let shape = [2, c.frames, 1, c.sample_size, c.sample_size];
        let mut batch = contrast_batch::<TB>(shape, [[2, 6], [5, 8]], 0.7);
        // Only the first clip is contrasted.
        batch.doubles[1] = None;
        let per_clip = |labels| {
            to_vec(model.flow_loss_per_clip(contrast_batch::<TB>(shape, labels, 0.0).flow))
        };
        let (own, double) = (per_clip([[2, 6], [5, 8]]), per_clip([[2, 2], [5, 8]]));
        let flow_loss = to_vec(model.flow_loss(batch.flow.clone()))[0];
        let s = DOUBLE_SCALE;
        let margin = own[0] - double[0];
        assert!(
            (0.05..5.0).contains(&(s * margin).abs()),
            "s·margin {}",
            s * margin
        );
        let by_hand = flow_loss + 0.7 / 2.0 * (1.0 + (s * margin).exp()).ln() / s;
        let (total, reported) = model.training_loss(batch.clone());
        assert_close("reported flow loss", &to_vec(reported), &[flow_loss], 1e-12);
        assert_close("training loss", &to_vec(total), &[by_hand], 1e-12);
        // λ = 0, or nothing contrasted: the flow loss itself, to the bit.
        let mut off = batch.clone();
        off.double_contrast = 0.0;
        for batch in [off, ClipBatch::from(batch.flow)] {
            let (total, reported) = model.training_loss(batch);
            assert_eq!(to_vec(total), [flow_loss]);
            assert_eq!(to_vec(reported), [flow_loss]);
        }
    }

    /// The contrast's gradient, by autodiff, against a central difference of the training loss
    /// along a random direction in the output layer's weights, and it is not the plain flow
    /// loss's gradient. Scrambled model, clip values of standard deviation 3, label tables scaled
    /// down so that each clip's margin times the scale is about ±1, where the softplus bends (a
    /// missing `s` or `λ` shows).
    #[test]
    fn the_double_contrasts_gradient_matches_a_numerical_difference() {
        let c = small(Attention::Factorised);
        let model = quiet_labels(scrambled::<AB>(&c, 9), 0.01);
        let shape = [2, c.frames, 1, c.sample_size, c.sample_size];
        let inner = burn::module::AutodiffModule::valid(&model);
        let per_clip = |labels| {
            to_vec(inner.flow_loss_per_clip(contrast_batch::<TB>(shape, labels, 0.0).flow))
        };
        let (own, double) = (per_clip([[2, 6], [5, 8]]), per_clip([[2, 2], [5, 5]]));
        for k in 0..2 {
            let bend = DOUBLE_SCALE * (own[k] - double[k]);
            assert!(
                (0.05..5.0).contains(&bend.abs()),
                "clip {k}: s·margin {bend} is where the softplus is flat or straight"
            );
        }
        let weight = inner.proj_out_2.weight.val();
        let dims = weight.dims();
        let direction = Tensor::<TB, 1>::from_data(
            TensorData::new(
                crate::compare::randn(23, dims[0] * dims[1], 1.0),
                [dims[0] * dims[1]],
            ),
            &Default::default(),
        )
        .reshape(dims);
        let along = |contrast: f64| {
            let grads = model
                .training_loss(contrast_batch::<AB>(shape, [[2, 6], [5, 8]], contrast))
                .0
                .backward();
            let g = model.proj_out_2.weight.grad(&grads).expect("a gradient");
            to_vec((g * direction.clone()).sum())[0]
        };
        let autodiff = along(1.3);
        let h = 1e-5;
        let at = |step: f64| {
            let mut m = inner.clone();
            m.proj_out_2.weight =
                burn::module::Param::from_tensor(weight.clone() + direction.clone() * step);
            to_vec(
                m.training_loss(contrast_batch::<TB>(shape, [[2, 6], [5, 8]], 1.3))
                    .0,
            )[0]
        };
        let numeric = (at(h) - at(-h)) / (2.0 * h);
        assert_close("directional derivative", &[autodiff], &[numeric], 1e-6);
        let plain = along(0.0);
        assert!(
            (plain - autodiff).abs() > 1e-3 * autodiff.abs(),
            "the contrast moves the gradient: {plain} vs {autodiff}"
        );
    }
}
