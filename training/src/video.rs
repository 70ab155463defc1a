//! The video DiT on the shared path: clips of two digits moving apart as flow-matching batches,
//! a validation loss on fixed clips and fixed noise, the label gap, flicker, and a judge that
//! reads the drawn clips frame by frame.
//!
//! What each measurement is for. Validation loss says the model is learning something; the label
//! gap (the same validation with wrong labels, minus the right one) says it is learning to use
//! its labels, which a model of scattered digits in the reference crate barely did. Flicker (the
//! mean change from frame to frame) says whether the drawn digits move as much as real ones. And
//! the judge says whether they are the digits asked for, all the way through: every pair of digits
//! (55 of them) is drawn and read back in frames 2–7; "mostly right" is the digit read most often
//! in each place being the ones asked for (either way round: a model that adds its two labels
//! cannot know which goes where), "held" is each place read as one digit in every judged frame.
//! Real clips are judged the same way first, and set the ceiling.

use crate::checkpoint::replace_dir;
use crate::dit::{DrawSettings, TimeSampling, flow_batch};
use crate::loader::BatchSource;
use crate::mnist::MnistOptions;
use crate::optim::OptimizerSpec;
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{LearningRateMetric, LossMetric};
use nervus_datasets::mnist::{SIDE, Split};
use nervus_datasets::moving::{self, Clip, Clips, FRAME, FRAMES, WINDOW};
use nervus_datasets::rng::Rng;
use nervus_inference::flow::{Churn, Guide};
use nervus_inference::render::{clips_gif, grid_png};
use nervus_models::checkpoint::{CheckpointError, write_json};
use nervus_models::flow::Velocity;
use nervus_models::flow::{FlowBatch, noised};
use nervus_models::mlp::Mlp;
use nervus_models::video_dit::{ClipBatch, VideoDit};
use nervus_models::video_pipeline;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const EVAL_SEED: u64 = 0xC1_1B5;
const DRAW_SEED: u64 = 0x6E1F;
/// Seed of the fresh noise a stochastic walk takes in ([`churn_noise`]).
const CHURN_SEED: u64 = 0xC8A2;
const GUESS_SEED: u64 = 0x6E55;
/// Noise levels validation is measured at (1/16, 3/16, … 15/16).
pub const EVAL_LEVELS: usize = 8;
/// Frames the judge reads: before frame 2 the two windows still overlap.
pub const JUDGED: std::ops::Range<usize> = 2..FRAMES;
/// The pairs shown in the sheet and the GIF (the reference crate's).
pub const SHOWCASE: [(u8, u8); 8] = [
    (3, 7),
    (0, 1),
    (2, 5),
    (4, 9),
    (6, 8),
    (1, 1),
    (2, 7),
    (3, 8),
];
const CLIP: usize = FRAMES * FRAME * FRAME;

fn to_model(v: f32) -> f32 {
    v * 2.0 - 1.0
}

/// A batch of `b` clips in the model's shape.
fn clip_shape(b: usize) -> [usize; 5] {
    [b, FRAMES, 1, FRAME, FRAME]
}

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

/// A 14×14 window blown up to 28×28 (each pixel doubled), as bytes: the MNIST classifier's input.
pub fn window_as_digit(w: &[f32]) -> Vec<u8> {
    (0..SIDE * SIDE)
        .map(|k| {
            let (y, x) = (k / SIDE / 2, (k % SIDE) / 2);
            (w[y * WINDOW + x].clamp(0.0, 1.0) * 255.0).round() as u8
        })
        .collect()
}

/// Windows around both digits in every frame of `n` random clips, labelled with the digit meant
/// to be there; frame `f`'s windows only if `frame` is `None` or `Some(f)`.
pub fn window_split(clips: &Clips, n: usize, seed: u64, frame: Option<usize>) -> Split {
    let mut rng = Rng::new(seed);
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let c = clips.random(&mut rng);
        for f in (0..FRAMES).filter(|&f| frame.is_none_or(|g| g == f)) {
            for which in 0..2 {
                images.extend(window_as_digit(&c.window(f, which)));
                labels.push(c.digits[which]);
            }
        }
    }
    Split { images, labels }
}

/// What the judge read in one batch of windows.
fn read_windows<B: Backend>(judge: &Mlp<B>, windows: &[Vec<f32>]) -> Vec<u8> {
    let device = judge.fc1.weight.device();
    let flat: Vec<f32> = windows
        .iter()
        .flat_map(|w| window_as_digit(w).into_iter().map(|p| p as f32 / 255.0))
        .collect();
    let x = Tensor::<B, 2>::from_data(TensorData::new(flat, [windows.len(), SIDE * SIDE]), &device);
    judge
        .forward(x)
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .map(|v| v as u8)
        .collect()
}

/// The judge and how well it reads real clips, frame by frame.
pub struct Judge<B: Backend> {
    pub model: Mlp<B>,
    /// Share of real test windows read right, per frame.
    pub per_frame: Vec<f64>,
    pub seconds: f64,
}

/// How the judge is trained: on the windows of `clips` random training clips (both digits in
/// every frame, so 16 windows a clip), for `epochs` epochs, with `hidden` hidden units, from the
/// initial weights and shuffle of `seed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JudgeOptions {
    pub clips: usize,
    pub epochs: usize,
    pub hidden: usize,
    pub seed: u64,
}

impl Default for JudgeOptions {
    fn default() -> Self {
        Self {
            clips: 6000,
            epochs: 6,
            hidden: 128,
            seed: 1,
        }
    }
}

/// The judge's training and test windows.
fn judge_splits(train: &Clips, test: &Clips, options: JudgeOptions) -> (Split, Split) {
    (
        window_split(train, options.clips, 11, None),
        window_split(test, 200, 12, None),
    )
}

/// The MNIST run that trains the judge.
fn judge_mnist_options(options: JudgeOptions, save: &Path, run_dir: PathBuf) -> MnistOptions {
    MnistOptions {
        hidden: options.hidden,
        optimizer: OptimizerSpec::Sgd { momentum: 0.9 },
        lr: 0.02,
        epochs: options.epochs,
        batch: 32,
        seed: options.seed,
        save: Some(save.to_path_buf()),
        run_dir,
        // The judge is a deterministic by-product, trained again where it is asked for.
        overwrite: true,
    }
}

/// Trains the MNIST MLP on windows cut from real training clips, keeps the epoch with the best
/// test loss in `save` and returns that network, read back from `save` (so the judge a run uses
/// is the one `--judge save` loads later), measured frame by frame on windows from test clips.
pub fn train_judge<B: AutodiffBackend>(
    train: &Clips,
    test: &Clips,
    options: JudgeOptions,
    save: &Path,
    run_dir: PathBuf,
    device: &B::Device,
) -> Result<Judge<B::InnerBackend>, TrainError> {
    let start = std::time::Instant::now();
    let (train_split, test_split) = judge_splits(train, test, options);
    crate::mnist::train::<B>(
        &judge_mnist_options(options, save, run_dir),
        Arc::new(train_split),
        Arc::new(test_split),
        Reporter::silent(),
        device,
    )?;
    let model = Mlp::load(save, device).map_err(|e| {
        TrainError::Hook(format!(
            "reading back the judge saved in {}: {e}",
            save.display()
        ))
    })?;
    let per_frame = judge_frames(&model, test);
    Ok(Judge {
        model,
        per_frame,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Trains a panel of `count` judges alike but for their seeds (`options.seed`, `options.seed + 1`,
/// …), each saved in `dir/seed-N` ([`train_judge`]); [`load_judges`] reads the panel back.
pub fn train_judges<B: AutodiffBackend>(
    train: &Clips,
    test: &Clips,
    options: JudgeOptions,
    count: usize,
    dir: &Path,
    run_dir: &Path,
    device: &B::Device,
) -> Result<Vec<Judge<B::InnerBackend>>, TrainError> {
    (0..count as u64)
        .map(|k| {
            let seed = options.seed + k;
            let name = format!("seed-{seed}");
            train_judge::<B>(
                train,
                test,
                JudgeOptions { seed, ..options },
                &dir.join(&name),
                run_dir.join(&name),
                device,
            )
        })
        .collect()
}

/// A saved judge (`dir` holds `config.json`) or a panel of them (`dir/seed-N/`, as
/// [`train_judges`] writes), in seed order.
pub fn load_judges<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<Vec<Mlp<B>>, CheckpointError> {
    if dir.join("config.json").exists() {
        return Ok(vec![Mlp::load(dir, device)?]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::io(dir, e))?;
    let mut seeds = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io(dir, e))?;
        let name = entry.file_name();
        if let Some(seed) = name
            .to_str()
            .and_then(|n| n.strip_prefix("seed-"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            seeds.push((seed, entry.path()));
        }
    }
    if seeds.is_empty() {
        return Err(CheckpointError::format(
            dir,
            "not a judge: no config.json and no seed-N/ judges in it",
        ));
    }
    seeds.sort();
    seeds
        .iter()
        .map(|(_, path)| Mlp::load(path, device))
        .collect()
}

/// Share of real test windows the judge reads right, frame by frame (400 windows a frame).
pub fn judge_frames<B: Backend>(judge: &Mlp<B>, test: &Clips) -> Vec<f64> {
    (0..FRAMES)
        .map(|f| {
            let s = window_split(test, 200, 13, Some(f));
            let windows: Vec<Vec<f32>> = (0..s.len())
                .map(|i| window_from_digit(s.image(i)))
                .collect();
            let read = read_windows(judge, &windows);
            read.iter().zip(&s.labels).filter(|(r, l)| r == l).count() as f64 / s.len() as f64
        })
        .collect()
}

/// The inverse of [`window_as_digit`]: a 28×28 doubled window back to 14×14 in 0..1.
fn window_from_digit(d: &[u8]) -> Vec<f32> {
    (0..WINDOW * WINDOW)
        .map(|k| d[(k / WINDOW) * 2 * SIDE + (k % WINDOW) * 2] as f32 / 255.0)
        .collect()
}

/// The centres of both digits in frame `f` if they move apart along `angle`.
fn centres(angle: f64, f: usize) -> [(f64, f64); 2] {
    let mid = FRAME as f64 / 2.0;
    let d = moving::SPEED * f as f64;
    let (uy, ux) = (angle.sin(), angle.cos());
    [(mid + d * uy, mid + d * ux), (mid - d * uy, mid - d * ux)]
}

/// Where a clip's digits went: every clip makes the same journey but in its own direction, so the
/// direction (one of 180, half a turn: the other half swaps the digits) is the one that puts the
/// most ink near the two centres over the judged frames. "Near" is a Gaussian of 3 pixels around
/// each centre: MNIST centres every digit on its centre of mass, so the ink peaks there, where a
/// flat window's sum would plateau over a range of directions.
pub fn find_direction(pixels: &[f32]) -> f64 {
    let score = |angle: f64| -> f64 {
        let mut s = 0.0;
        for f in JUDGED {
            let frame = &pixels[f * FRAME * FRAME..(f + 1) * FRAME * FRAME];
            for (cy, cx) in centres(angle, f) {
                let (y0, y1) = (
                    (cy - 7.0).max(0.0) as usize,
                    (cy + 8.0).min(FRAME as f64) as usize,
                );
                let (x0, x1) = (
                    (cx - 7.0).max(0.0) as usize,
                    (cx + 8.0).min(FRAME as f64) as usize,
                );
                for y in y0..y1 {
                    for x in x0..x1 {
                        // Pixel (y, x) sits at (y + 0.5, x + 0.5).
                        let d2 = (y as f64 + 0.5 - cy).powi(2) + (x as f64 + 0.5 - cx).powi(2);
                        s += frame[y * FRAME + x].clamp(0.0, 1.0) as f64 * (-d2 / 18.0).exp();
                    }
                }
            }
        }
        s
    };
    (0..180)
        .map(|k| k as f64 * std::f64::consts::PI / 180.0)
        .map(|angle| (angle, score(angle)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0.0, |(a, _)| a)
}

/// The judge's reading of clips asked for `pairs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClipVerdict {
    /// Clips whose most-read digit in each place are the two asked for.
    pub mostly_right: usize,
    /// Clips where each place reads as one digit in every judged frame.
    pub held: usize,
    pub clips: usize,
    /// Clips of two different digits that are not mostly right because both places read as the
    /// same one of the two (a 3 and a 7 drawn as two 3s); 0 in verdicts older than the count.
    #[serde(default)]
    pub doubled: usize,
    /// Clips not mostly right, nor doubled, with one place reading as a digit asked for.
    #[serde(default)]
    pub one_right: usize,
}

impl ClipVerdict {
    /// Counts one clip asked for `(a, b)`, whose two places read `p0` and `p1` frame by frame.
    fn count(&mut self, (a, b): (u8, u8), p0: &[u8], p1: &[u8]) {
        let mut modes = [mode(p0), mode(p1)];
        modes.sort();
        let mut asked = [a, b];
        asked.sort();
        if modes == asked {
            self.mostly_right += 1;
        } else if a != b && modes[0] == modes[1] && asked.contains(&modes[0]) {
            self.doubled += 1;
        } else if modes.iter().any(|m| asked.contains(m)) {
            self.one_right += 1;
        }
        if p0.iter().all(|&d| d == p0[0]) && p1.iter().all(|&d| d == p1[0]) {
            self.held += 1;
        }
    }

    /// Clips that are not mostly right, by what went wrong: "doubled 20, one right 12, neither 5".
    pub fn failures(&self) -> String {
        let neither = self.clips - self.mostly_right - self.doubled - self.one_right;
        format!(
            "doubled {}, one right {}, neither {neither}",
            self.doubled, self.one_right
        )
    }
}

/// Reads every clip (0..1 pixels, `CLIP` each) asked for `pairs`, in frames 2–7 of the direction
/// [`find_direction`] finds.
pub fn judge_clips<B: Backend>(
    judge: &Mlp<B>,
    clips: &[Vec<f32>],
    pairs: &[(u8, u8)],
) -> ClipVerdict {
    let mut windows = Vec::new();
    for c in clips {
        let angle = find_direction(c);
        for f in JUDGED {
            let frame = &c[f * FRAME * FRAME..(f + 1) * FRAME * FRAME];
            windows.extend(centres(angle, f).map(|p| moving::window(frame, p)));
        }
    }
    let read = read_windows(judge, &windows);
    let per_clip = JUDGED.len() * 2;
    let mut v = ClipVerdict {
        clips: clips.len(),
        ..Default::default()
    };
    for (k, &pair) in pairs.iter().enumerate() {
        let r = &read[k * per_clip..(k + 1) * per_clip];
        let place =
            |which: usize| -> Vec<u8> { r.iter().skip(which).step_by(2).copied().collect() };
        v.count(pair, &place(0), &place(1));
    }
    v
}

/// The most frequent value (the smallest on a tie).
fn mode(v: &[u8]) -> u8 {
    let mut count = [0usize; 256];
    for &d in v {
        count[d as usize] += 1;
    }
    (0..=255u8)
        .max_by_key(|&d| (count[d as usize], std::cmp::Reverse(d)))
        .unwrap_or(0)
}

/// Several judges' readings of the same clips, one verdict a judge (judges trained alike but for
/// their seed). One judge's count moves by several clips with its seed, so counts are quoted with
/// every judge's figure beside the median.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PanelVerdict {
    pub verdicts: Vec<ClipVerdict>,
}

impl PanelVerdict {
    /// Every judge of `judges` reads `clips` asked for `pairs` ([`judge_clips`]).
    pub fn of<B: Backend>(judges: &[Mlp<B>], clips: &[Vec<f32>], pairs: &[(u8, u8)]) -> Self {
        Self {
            verdicts: judges
                .iter()
                .map(|j| judge_clips(j, clips, pairs))
                .collect(),
        }
    }
    pub fn mostly_right(&self) -> Vec<usize> {
        self.verdicts.iter().map(|v| v.mostly_right).collect()
    }
    pub fn held(&self) -> Vec<usize> {
        self.verdicts.iter().map(|v| v.held).collect()
    }
    /// The median judge's "mostly right" (the lower of the two middle ones for an even panel).
    pub fn median_mostly_right(&self) -> usize {
        self.median_judge().map_or(0, |v| v.mostly_right)
    }
    /// The median judge's "mostly right" as a share of the clips.
    pub fn median_mostly_right_share(&self) -> f64 {
        self.median_mostly_right() as f64 / self.clips().max(1) as f64
    }
    pub fn median_held(&self) -> usize {
        median(self.held())
    }
    pub fn clips(&self) -> usize {
        self.verdicts.first().map_or(0, |v| v.clips)
    }
    /// The verdict of the judge whose "mostly right" is the median (the lower middle one for an
    /// even panel; the first of equals).
    pub fn median_judge(&self) -> Option<&ClipVerdict> {
        let mut order: Vec<&ClipVerdict> = self.verdicts.iter().collect();
        order.sort_by_key(|v| v.mostly_right);
        order.get(order.len().saturating_sub(1) / 2).copied()
    }
    /// "mostly right 22/55 (judges 23, 22, 17), held 6/55 (judges 6, 9, 4)"; one judge's counts
    /// alone when the panel has one.
    pub fn summary(&self) -> String {
        let n = self.clips();
        let each = |v: Vec<usize>| -> String {
            if v.len() < 2 {
                return String::new();
            }
            let list: Vec<String> = v.iter().map(usize::to_string).collect();
            format!(" (judges {})", list.join(", "))
        };
        format!(
            "mostly right {}/{n}{}, held {}/{n}{}",
            self.median_mostly_right(),
            each(self.mostly_right()),
            self.median_held(),
            each(self.held())
        )
    }
}

/// The lower median (0 for none).
fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// Real test clips of `pairs`, one each, reproducibly: the ceiling for the judge's table.
pub fn real_clips(test: &Clips, pairs: &[(u8, u8)]) -> Vec<Clip> {
    let mut rng = Rng::new(DRAW_SEED ^ 0x5EA1);
    pairs
        .iter()
        .map(|&(a, b)| test.of(a, b, &mut rng))
        .collect()
}

/// The noise clip `k` of noise set `set` is drawn from. Set 0 is the fixed set every run judges
/// with; sets 1, 2, … are independent others, for measuring how much a count owes to one draw.
pub fn draw_noise(set: u64, k: usize) -> Vec<f32> {
    candidate_noise(set, 0, k)
}

/// The noise clip `k` of noise set `set` is drawn from as candidate `candidate` of a
/// [`draw_best_of`]; candidate 0's is [`draw_noise`]`(set, k)`, so candidate 0 is the plain draw.
fn candidate_noise(set: u64, candidate: u64, k: usize) -> Vec<f32> {
    let mut rng = Rng::stream(
        DRAW_SEED ^ set.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        (candidate << 32) | k as u64,
    );
    (0..CLIP).map(|_| rng.normal() as f32).collect()
}

/// The fresh noise clip `k` of noise set `set` (as candidate `candidate`) takes in at step `step`
/// of a stochastic walk ([`ClipGuidance::churn`]): independent of [`draw_noise`] and of every other
/// step's.
fn churn_noise(set: u64, candidate: u64, k: usize, step: usize) -> Vec<f32> {
    let mut rng = Rng::stream(
        CHURN_SEED ^ set.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        (candidate << 48) | ((step as u64) << 32) | k as u64,
    );
    (0..CLIP).map(|_| rng.normal() as f32).collect()
}

/// Draws one clip for each pair, clip `k` from [`draw_noise`]`(set, k)`, in chunks of `chunk`
/// clips; pixels in 0..1.
pub fn draw<B: Backend>(
    model: &VideoDit<B>,
    pairs: &[(u8, u8)],
    settings: DrawSettings,
    more: &ClipGuidance<'_, B>,
    set: u64,
    chunk: usize,
) -> Vec<Vec<f32>> {
    walk_clips(model, pairs, None, settings, more, (set, 0), chunk)
}

/// Noise levels at which [`self_check`] compares a clip's fit to the labels asked for with its fit
/// to the wrong answers.
pub const CHECK_LEVELS: [f32; 4] = [0.2, 0.4, 0.6, 0.8];
const CHECK_SEED: u64 = 0xC4EC;

/// The model's own check of clips (0..1 pixels, `CLIP` each) asked for `pairs`: each clip's
/// flow-matching loss (mean over [`CHECK_LEVELS`], fixed noise that depends only on the clip's
/// place `k` in `pairs` and the level) with the labels of the nearest wrong answer, minus its loss
/// with the labels asked for. For two different digits `(a, b)` the wrong answers are the doubles
/// `(a, a)` and `(b, b)` (the drawing's commonest failure: both places draw one of the two digits);
/// for `(a, a)` it is no labels at all. Higher is better: a clip the model itself explains better
/// by the pair asked for than by either double. No judge is consulted. `chunk` clips go through
/// the model at a time.
pub fn self_check<B: Backend>(
    model: &VideoDit<B>,
    clips: &[Vec<f32>],
    pairs: &[(u8, u8)],
    chunk: usize,
) -> Vec<f64> {
    self_check_at(model, clips, pairs, chunk, &CHECK_LEVELS)
}

/// [`self_check`] at other noise levels (the noise of the `l`-th level depends on `l` and the
/// clip's place alone: the first levels share [`CHECK_LEVELS`]' noise).
pub fn self_check_at<B: Backend>(
    model: &VideoDit<B>,
    clips: &[Vec<f32>],
    pairs: &[(u8, u8)],
    chunk: usize,
    levels: &[f32],
) -> Vec<f64> {
    let device = model.proj_out_2.weight.device();
    let null = Velocity::<B, 5>::null_label(model);
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(pairs.len());
    for (c, part) in pairs.chunks(chunk).enumerate() {
        let n = part.len();
        let first = c * chunk;
        let pixels: Vec<&[f32]> = clips[first..first + n].iter().map(Vec::as_slice).collect();
        let x = model_pixels::<B>(&pixels, &device);
        let pairs_of = |labels: Vec<i64>| -> Tensor<B, 2, Int> {
            Tensor::from_data(TensorData::new(labels, [n, 2]), &device)
        };
        let asked = pairs_of(
            part.iter()
                .flat_map(|&(a, b)| [a as i64, b as i64])
                .collect(),
        );
        let wrong = |which: usize| {
            pairs_of(
                part.iter()
                    .flat_map(|&(a, b)| {
                        let d = if a == b { null } else { [a, b][which] as i64 };
                        [d, d]
                    })
                    .collect(),
            )
        };
        let labels = [asked, wrong(0), wrong(1)];
        let mut sums = [vec![0.0; n], vec![0.0; n], vec![0.0; n]];
        for (l, &t) in levels.iter().enumerate() {
            let noise: Vec<f32> = (0..n)
                .flat_map(|k| {
                    let mut rng = Rng::stream(CHECK_SEED ^ l as u64, (first + k) as u64);
                    (0..CLIP).map(move |_| rng.normal() as f32)
                })
                .collect();
            let noise = Tensor::<B, 5>::from_data(TensorData::new(noise, clip_shape(n)), &device);
            let t = Tensor::<B, 1>::full([n], t, &device);
            for (sum, labels) in sums.iter_mut().zip(&labels) {
                let per_clip = model.flow_loss_per_clip(FlowBatch {
                    x: x.clone(),
                    noise: noise.clone(),
                    t: t.clone(),
                    labels: labels.clone(),
                });
                for (s, v) in sum.iter_mut().zip(per_clip.into_data().iter::<f64>()) {
                    *s += v;
                }
            }
        }
        let levels = levels.len() as f64;
        out.extend((0..n).map(|k| (sums[1][k].min(sums[2][k]) - sums[0][k]) / levels));
    }
    out
}

/// [`draw_best_of`]'s answer: the clip chosen for each pair, and every candidate with its
/// [`self_check`] score.
pub struct BestOf {
    /// The chosen clip of each pair (0..1 pixels).
    pub clips: Vec<Vec<f32>>,
    /// `candidates[j][k]`: candidate `j`'s clip of pair `k`; candidate 0 is the plain [`draw`].
    pub candidates: Vec<Vec<Vec<f32>>>,
    /// `scores[j][k]`: the model's own check of `candidates[j][k]`.
    pub scores: Vec<Vec<f64>>,
    /// The candidate chosen for each pair: the highest score, the lowest index on a tie.
    pub chosen: Vec<usize>,
}

/// Draws `candidates` clips of each pair (candidate 0 from [`draw_noise`]`(set, k)`, so it is the
/// plain [`draw`]; the others from noise of their own) and keeps, for each pair, the one the model
/// itself scores highest ([`self_check`]): about `candidates` times the cost of a draw, plus the
/// check (three model calls a level, [`CHECK_LEVELS`]).
pub fn draw_best_of<B: Backend>(
    model: &VideoDit<B>,
    pairs: &[(u8, u8)],
    settings: DrawSettings,
    more: &ClipGuidance<'_, B>,
    set: u64,
    chunk: usize,
    candidates: usize,
) -> BestOf {
    let mut all = Vec::new();
    let mut scores = Vec::new();
    for j in 0..candidates.max(1) {
        let drawn = walk_clips(model, pairs, None, settings, more, (set, j as u64), chunk);
        scores.push(self_check(model, &drawn, pairs, chunk));
        all.push(drawn);
    }
    let chosen = choose(&scores);
    BestOf {
        clips: chosen
            .iter()
            .enumerate()
            .map(|(k, &j)| all[j][k].clone())
            .collect(),
        candidates: all,
        scores,
        chosen,
    }
}

/// For each pair `k`, the candidate `j` with the highest `scores[j][k]` (the lowest `j` on a tie;
/// a score that is not a number loses to every other).
fn choose(scores: &[Vec<f64>]) -> Vec<usize> {
    let key = |s: f64| if s.is_nan() { f64::NEG_INFINITY } else { s };
    let pairs = scores.first().map_or(0, Vec::len);
    (0..pairs)
        .map(|k| {
            (0..scores.len()).fold(0, |best, j| {
                if key(scores[j][k]) > key(scores[best][k]) {
                    j
                } else {
                    best
                }
            })
        })
        .collect()
}

/// Real clips noised to level `start` in (0, 1] with [`draw_noise`]`(set, k)` and drawn back from
/// there ([`DrawSettings::redraw_pixels_guided`]), each asked for its own two digits: how much
/// of a real clip's layout (which digit went where) the drawing keeps; pixels in 0..1.
pub fn redraw<B: Backend>(
    model: &VideoDit<B>,
    real: &[Clip],
    start: f64,
    settings: DrawSettings,
    more: &ClipGuidance<'_, B>,
    set: u64,
    chunk: usize,
) -> Vec<Vec<f32>> {
    let pairs: Vec<(u8, u8)> = real.iter().map(|c| (c.digits[0], c.digits[1])).collect();
    walk_clips(
        model,
        &pairs,
        Some((real, start)),
        settings,
        more,
        (set, 0),
        chunk,
    )
}

/// [`draw`] from noise, or with `from = Some((real, start))` [`redraw`] (`real[k]` is pair k's).
fn walk_clips<B: Backend>(
    model: &VideoDit<B>,
    pairs: &[(u8, u8)],
    from: Option<(&[Clip], f64)>,
    settings: DrawSettings,
    more: &ClipGuidance<'_, B>,
    (set, candidate): (u64, u64),
    chunk: usize,
) -> Vec<Vec<f32>> {
    let device = model.proj_out_2.weight.device();
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(pairs.len());
    for (c, part) in pairs.chunks(chunk).enumerate() {
        let n = part.len();
        let x1: Vec<f32> = (0..n)
            .flat_map(|k| candidate_noise(set, candidate, c * chunk + k))
            .collect();
        let labels: Vec<i64> = part
            .iter()
            .flat_map(|&(a, b)| [a as i64, b as i64])
            .collect();
        let x1 = Tensor::<B, 5>::from_data(TensorData::new(x1, clip_shape(n)), &device);
        let labels = Tensor::<B, 2, Int>::from_data(TensorData::new(labels, [n, 2]), &device);
        let guides = more.guides(part, settings.guidance, &device);
        let first = c * chunk;
        let px = match (from, more.churn > 0.0) {
            (None, false) => settings.draw_pixels_guided(model, guides, x1, labels),
            (from, churned) => {
                let (xt, start) = match from {
                    None => (x1, 1.0),
                    Some((real, start)) => {
                        let x0 = model_clips::<B>(&real[first..first + n], &device);
                        (noised(x0, x1, Tensor::full([n], start, &device)).0, start)
                    }
                };
                let mut fresh = |step: usize| {
                    let z: Vec<f32> = (first..first + n)
                        .flat_map(|k| churn_noise(set, candidate, k, step))
                        .collect();
                    Tensor::<B, 5>::from_data(TensorData::new(z, clip_shape(n)), &device)
                };
                let churn = churned.then_some(Churn {
                    eta: more.churn,
                    fresh: &mut fresh,
                });
                settings.redraw_pixels_guided(model, guides, xt, start, labels, churn)
            }
        };
        out.extend(px.chunks(CLIP).map(|c| c.to_vec()));
    }
    out
}

/// Corrections beyond classifier-free guidance when drawing clips ([`Guide`]), and how stochastic
/// the walk is ([`Churn`]); the default adds none and walks deterministically.
pub struct ClipGuidance<'a, B: Backend> {
    /// Weight of the push away from what the model draws when asked for each digit of the pair
    /// twice, `(a, a)` and `(b, b)`: the failure where both places draw one of the two digits
    /// (1: off; for a pair of equal digits the push is zero).
    pub doubles: f64,
    /// A weaker model and the weight of the push away from its answer (autoguidance).
    pub weaker: Option<(&'a VideoDit<B>, f64)>,
    /// Classifier-free guidance in the frames before [`JUDGED`] (0 and 1, where the two digits
    /// are still one shape), in place of the drawing's own guidance there (none: the same
    /// guidance in every frame).
    pub overlap: Option<f64>,
    /// The share of the noise every step re-draws ([`Churn`]'s `η`, in 0..=1; 0: the plain,
    /// deterministic walk). The fresh noise of clip `k`'s step depends on the noise set, the
    /// candidate, `k` and the step alone (`churn_noise`), so a drawing is the same in any chunks.
    pub churn: f64,
}

impl<B: Backend> Default for ClipGuidance<'_, B> {
    fn default() -> Self {
        Self {
            doubles: 1.0,
            weaker: None,
            overlap: None,
            churn: 0.0,
        }
    }
}

impl<'a, B: Backend> ClipGuidance<'a, B> {
    /// The guides for drawing `pairs` beside classifier-free guidance at `guidance`.
    pub fn guides(
        &self,
        pairs: &[(u8, u8)],
        guidance: f64,
        device: &B::Device,
    ) -> Vec<Guide<'a, B, VideoDit<B>, 5>> {
        let mut out = Vec::new();
        if let Some(g0) = self.overlap.filter(|&g0| g0 != guidance) {
            let mask: Vec<f32> = (0..FRAMES)
                .map(|f| if f < JUDGED.start { 1.0 } else { 0.0 })
                .collect();
            out.push(Guide::UnlabelledWhere {
                mask: Tensor::from_data(TensorData::new(mask, [1, FRAMES, 1, 1, 1]), device),
                weight: 1.0 + g0 - guidance,
            });
        }
        if self.doubles != 1.0 {
            for first in [true, false] {
                let labels: Vec<i64> = pairs
                    .iter()
                    .flat_map(|&(a, b)| {
                        let d = if first { a } else { b } as i64;
                        [d, d]
                    })
                    .collect();
                out.push(Guide::Labels {
                    labels: Tensor::from_data(TensorData::new(labels, [pairs.len(), 2]), device),
                    weight: self.doubles,
                });
            }
        }
        if let Some((model, weight)) = self.weaker {
            out.push(Guide::Weaker { model, weight });
        }
        out
    }
}

/// Real clips as the model sees them (pixels in its range). Shapes: `n` clips → `[n, FRAMES, 1,
/// FRAME, FRAME]`.
fn model_clips<B: Backend>(clips: &[Clip], device: &B::Device) -> Tensor<B, 5> {
    let pixels: Vec<&[f32]> = clips.iter().map(|c| c.pixels.as_slice()).collect();
    model_pixels(&pixels, device)
}

/// Clips of 0..1 pixels (`CLIP` each) as the model sees them. Shapes: `n` clips → `[n, FRAMES,
/// 1, FRAME, FRAME]`.
fn model_pixels<B: Backend>(pixels: &[&[f32]], device: &B::Device) -> Tensor<B, 5> {
    let x: Vec<f32> = pixels
        .iter()
        .flat_map(|p| p.iter().map(|&v| to_model(v)))
        .collect();
    Tensor::from_data(TensorData::new(x, clip_shape(pixels.len())), device)
}

/// The model's one-step guess at half-noised real clips: rows of (real, noised, guess) for each
/// clip, frames left to right; values in 0..1.
pub fn guesses<B: Backend>(model: &VideoDit<B>, real: &[Clip]) -> Vec<Vec<f32>> {
    let device = model.proj_out_2.weight.device();
    let n = real.len();
    let mut rng = Rng::new(GUESS_SEED);
    let x = model_clips::<B>(real, &device);
    let noise: Vec<f32> = (0..n * CLIP).map(|_| rng.normal() as f32).collect();
    let noise = Tensor::<B, 5>::from_data(TensorData::new(noise, clip_shape(n)), &device);
    let t = Tensor::<B, 1>::full([n], 0.5, &device);
    let (xt, _) = noised(x, noise, t.clone());
    let labels: Vec<i64> = real
        .iter()
        .flat_map(|c| c.digits.map(|d| d as i64))
        .collect();
    let labels = Tensor::<B, 2, Int>::from_data(TensorData::new(labels, [n, 2]), &device);
    let v = model.forward(xt.clone(), t * 1000.0, labels);
    let guess = xt.clone() - v * 0.5;
    let unit = |t: Tensor<B, 5>| -> Vec<f32> {
        t.into_data()
            .iter::<f32>()
            .map(|v| ((v + 1.0) / 2.0).clamp(0.0, 1.0))
            .collect()
    };
    let (noised_px, guess_px) = (unit(xt), unit(guess));
    let mut rows = Vec::new();
    for (k, clip) in real.iter().enumerate() {
        let span = k * CLIP..(k + 1) * CLIP;
        for src in [&clip.pixels[..], &noised_px[span.clone()], &guess_px[span]] {
            rows.extend(src.chunks(FRAME * FRAME).map(<[f32]>::to_vec));
        }
    }
    rows
}

/// Writes a sheet (one clip a row, frames left to right) and a GIF of `clips`.
pub fn write_clips(clips: &[Vec<f32>], sheet: &Path, gif: &Path) -> Result<(), String> {
    let frames: Vec<Vec<f32>> = clips
        .iter()
        .flat_map(|c| c.chunks(FRAME * FRAME).map(|f| f.to_vec()))
        .collect();
    grid_png(&frames, clips.len(), FRAMES, FRAME, 2, sheet)?;
    let as_frames: Vec<Vec<Vec<f32>>> = clips
        .iter()
        .map(|c| c.chunks(FRAME * FRAME).map(|f| f.to_vec()).collect())
        .collect();
    clips_gif(&as_frames, 4, FRAME, 3, 125, gif)
}

/// What a video run was, saved beside the pipeline as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VideoSettings {
    pub data: String,
    pub steps: usize,
    pub batch: usize,
    /// Threads each batch was cut across (runs older than the option: 1).
    #[serde(default = "crate::shard::one")]
    pub parts: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub seed: u64,
    pub label_dropout: f64,
    pub time: TimeSampling,
    /// The double contrast's weight λ (runs older than it: 0).
    #[serde(default)]
    pub double_contrast: f64,
    pub draw: DrawSettings,
    pub backend: String,
    pub step: usize,
    pub valid_loss: Option<f64>,
    pub label_gap: Option<f64>,
    /// Share of the 55 pairs the median judge of the panel read as mostly right.
    pub mostly_right: Option<f64>,
}

/// Everything a video run needs besides the data, the judge and the model.
#[derive(Clone, Debug)]
pub struct VideoOptions {
    pub steps: usize,
    pub batch: usize,
    /// Threads each batch is cut across ([`crate::shard`]).
    pub parts: usize,
    pub lr: f64,
    pub warmup: usize,
    pub decay_to: f64,
    pub clip: Option<f64>,
    pub weight_decay: f64,
    pub seed: u64,
    pub eval_every: usize,
    pub eval_clips: usize,
    pub label_dropout: f64,
    pub time: TimeSampling,
    /// λ of the double contrast ([`ClipSource::with_double_contrast`]); 0 trains by flow
    /// matching alone.
    pub double_contrast: f64,
    pub draw: DrawSettings,
    /// Judge all 55 pairs at every checkpoint (else only the showcase pairs, and all 55 at the end).
    pub judge_every: bool,
    pub save: Option<PathBuf>,
    pub out: PathBuf,
    pub run_dir: PathBuf,
    pub resume: bool,
    /// End the run cleanly (checkpoint written) at the first evaluation at or after this step,
    /// to be continued with `resume`: training in sessions.
    pub stop_after: Option<usize>,
    pub data_name: String,
    /// The pipeline the starting model came from (a continuation: only a checkpoint better than
    /// the start replaces a model).
    pub continued_from: Option<PathBuf>,
    /// Start afresh over a model already at `save` and another run's checkpoints.
    pub overwrite: bool,
}

/// One checkpoint's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VideoCheckpoint {
    pub step: usize,
    pub train_loss: f64,
    pub valid_loss: f64,
    pub label_gap: f64,
    /// The label gap's standard error over the validation clips (0 in runs older than it).
    #[serde(default)]
    pub label_gap_se: f64,
    pub flicker: f64,
    /// The judges' verdicts on all 55 pairs, where they were drawn (runs older than the panel
    /// wrote one judge's verdict as `verdict`, which is not read back).
    pub verdicts: Option<PanelVerdict>,
    pub seconds: f64,
}

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct VideoReport {
    pub checkpoints: Vec<VideoCheckpoint>,
    pub best: Option<(usize, f64)>,
    pub seconds: f64,
}

/// Writes the pipeline and `training.json` into `dir`, replacing what was there in one move.
pub fn save_pipeline<B: Backend>(
    model: &VideoDit<B>,
    settings: &VideoSettings,
    dir: &Path,
) -> Result<(), CheckpointError> {
    replace_dir(dir, |staging| {
        video_pipeline::save_pipeline(model, staging)?;
        write_json(&staging.join("training.json"), settings)
    })
}

struct VideoHook<I: Backend> {
    report: Reporter,
    opts: VideoOptions,
    judges: Vec<Mlp<I>>,
    eval: Arc<FixedClips>,
    guess_clips: Vec<Clip>,
    settings: VideoSettings,
    best: f64,
    last_step: usize,
    out: Arc<Mutex<VideoReport>>,
}

impl<I: Backend> EpochHook<VideoDit<I>> for VideoHook<I> {
    fn stop_requested(&self) -> bool {
        self.opts
            .stop_after
            .is_some_and(|s| self.last_step >= s && self.last_step < self.opts.steps)
    }

    fn baseline(&mut self, valid: Score, _model: &VideoDit<I>) -> Result<(), String> {
        self.best = self.best.min(valid.loss());
        Ok(())
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &VideoDit<I>) -> Result<(), String> {
        self.last_step = info.step;
        let last = info.epoch == info.epochs;
        let pairs = if self.opts.judge_every || last {
            moving::pairs()
        } else {
            SHOWCASE.to_vec()
        };
        let drawn = draw(
            model,
            &pairs,
            self.opts.draw,
            &ClipGuidance::default(),
            0,
            16,
        );
        let flicker = moving::flicker(&drawn.concat());
        let verdict = (pairs.len() == 55).then(|| PanelVerdict::of(&self.judges, &drawn, &pairs));
        let showcase: Vec<Vec<f32>> = SHOWCASE
            .iter()
            .map(|&(a, b)| {
                let key = (a.min(b), a.max(b));
                let k = pairs
                    .iter()
                    .position(|&p| p == key || p == (a, b))
                    .unwrap_or(0);
                drawn[k].clone()
            })
            .collect();
        let name = format!("step{:05}", info.step);
        write_clips(
            &showcase,
            &self.opts.out.join(format!("clips-{name}.png")),
            &self.opts.out.join(format!("clips-{name}.gif")),
        )?;
        let g = guesses(model, &self.guess_clips);
        grid_png(
            &g,
            g.len() / FRAMES,
            FRAMES,
            FRAME,
            2,
            &self.opts.out.join(format!("guess-{name}.png")),
        )?;
        let valid = info.valid.loss();
        let label_gap = self.eval.label_gap(model);
        let gap = label_gap.mean;
        let mut note = String::new();
        if valid < self.best {
            self.best = valid;
            self.out.lock().expect("report").best = Some((info.step, valid));
            if let Some(dir) = &self.opts.save {
                self.settings.step = info.step;
                self.settings.valid_loss = Some(valid);
                self.settings.label_gap = Some(gap);
                self.settings.mostly_right = verdict
                    .as_ref()
                    .map(PanelVerdict::median_mostly_right_share);
                save_pipeline(model, &self.settings, dir).map_err(|e| e.to_string())?;
                note = "  saved".into();
            }
        }
        let judged = match &verdict {
            Some(v) => format!("  judge: {}", v.summary()),
            None => String::new(),
        };
        self.report.line(format!(
            "step {:>5}  train loss {:.4}  validation loss {:.4}  label gap {:+.4} ± {:.4}  flicker {:.3}{judged}  ({}){note}",
            info.step,
            info.train.loss(),
            valid,
            gap,
            label_gap.standard_error,
            flicker,
            duration(info.elapsed)
        ));
        let mut out = self.out.lock().expect("report");
        out.checkpoints.push(VideoCheckpoint {
            step: info.step,
            train_loss: info.train.loss(),
            valid_loss: valid,
            label_gap: gap,
            label_gap_se: label_gap.standard_error,
            flicker,
            verdicts: verdict,
            seconds: info.elapsed,
        });
        out.seconds = info.elapsed;
        write_json(&self.opts.out.join("checkpoints.json"), &out.checkpoints)
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Trains `model` on clips from `train`, validating on clips from `test`, judged by the panel
/// `judges`.
pub fn train<B: AutodiffBackend>(
    opts: &VideoOptions,
    train: Arc<Clips>,
    test: &Clips,
    judges: Vec<Mlp<B::InnerBackend>>,
    model: VideoDit<B>,
    report: Reporter,
) -> Result<(VideoReport, VideoDit<B::InnerBackend>), TrainError> {
    let classes = model.config.classes;
    crate::checks::diffusion(
        opts.steps,
        opts.batch,
        opts.parts,
        opts.lr,
        opts.decay_to,
        opts.clip,
        opts.weight_decay,
        opts.eval_every,
        opts.label_dropout,
        opts.draw.steps,
        opts.draw.guidance,
    )?;
    crate::checks::at_least_one("--eval-clips", opts.eval_clips)?;
    crate::checks::non_negative("--double-contrast", opts.double_contrast)?;
    let best = crate::checkpoint::claim_save(
        opts.save.as_deref(),
        opts.continued_from.as_deref(),
        opts.resume,
        opts.overwrite,
    )?;
    let settings = VideoSettings {
        data: opts.data_name.clone(),
        steps: opts.steps,
        batch: opts.batch,
        parts: opts.parts,
        lr: opts.lr,
        warmup: opts.warmup,
        decay_to: opts.decay_to,
        clip: opts.clip,
        seed: opts.seed,
        label_dropout: opts.label_dropout,
        time: opts.time,
        double_contrast: opts.double_contrast,
        draw: opts.draw,
        backend: crate::backend::NAME.into(),
        step: 0,
        valid_loss: None,
        label_gap: None,
        mostly_right: None,
    };
    let mut fingerprint = crate::run::fingerprint(&settings, &model.config);
    if let Some(o) = fingerprint.as_object_mut() {
        o.insert("eval_every".into(), opts.eval_every.into());
        o.insert("eval_clips".into(), opts.eval_clips.into());
        o.insert("weight_decay".into(), opts.weight_decay.into());
    }
    let eval = Arc::new(FixedClips::new(test, opts.eval_clips));
    let mut rng = Rng::new(GUESS_SEED);
    let guess_clips = [(3, 7), (0, 1), (4, 9)]
        .iter()
        .map(|&(a, b)| test.of(a, b, &mut rng))
        .collect();
    let out = Arc::new(Mutex::new(VideoReport::default()));
    let hook = VideoHook {
        report: report.clone(),
        opts: opts.clone(),
        judges,
        eval: eval.clone(),
        guess_clips,
        settings,
        best,
        last_step: 0,
        out: out.clone(),
    };
    let source = ClipSource::new(
        train,
        opts.batch,
        opts.seed,
        opts.label_dropout,
        opts.time,
        classes,
        crate::loader::epoch_lengths(opts.steps, opts.eval_every),
    )
    .with_double_contrast(opts.double_contrast);
    let run = RunConfig {
        dir: opts.run_dir.clone(),
        epochs: source.epochs.len(),
        accumulation: 1,
        parts: opts.parts,
        resume: opts.resume,
        baseline: opts.continued_from.is_some(),
        overwrite: opts.overwrite,
        settings: fingerprint,
        report: report.clone(),
        unit: Some((opts.batch as f64, "clips".into())),
    };
    let eval_source = FixedClips::new(test, opts.eval_clips);
    let last = fit(
        run,
        model,
        OptimizerSpec::adamw(opts.weight_decay).build(opts.clip),
        WarmupCosine::new(opts.lr, opts.warmup, opts.steps, opts.decay_to),
        source,
        eval_source,
        |t| {
            t.metrics((LossMetric::new(),))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let out = out.lock().expect("report").clone();
    Ok((out, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_datasets::mnist::Mnist;

    /// Noise set 0 is the stream every run has judged with (so earlier counts are drawn again
    /// unchanged), and other sets are different noise, each the same every time.
    #[test]
    fn noise_set_zero_is_the_fixed_noise_and_other_sets_differ() {
        let old: Vec<f32> = {
            let mut rng = Rng::stream(DRAW_SEED, 3);
            (0..CLIP).map(|_| rng.normal() as f32).collect()
        };
        assert_eq!(draw_noise(0, 3), old);
        assert_eq!(draw_noise(2, 3), draw_noise(2, 3));
        for set in 1..4 {
            assert_ne!(draw_noise(set, 3), old, "set {set}");
            assert_ne!(draw_noise(set, 3), draw_noise(set + 1, 3), "set {set}");
        }
    }

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
    fn the_direction_finder_finds_a_real_clips_direction() {
        let data = Mnist::vendored();
        let clips = Clips::new(&data.test);
        let mut rng = Rng::new(5);
        let mut right = 0;
        for _ in 0..40 {
            let c = clips.random(&mut rng);
            let found = find_direction(&c.pixels);
            // The true direction modulo half a turn, against the found one.
            let truth = (c.centres[7][0].0 - 16.0).atan2(c.centres[7][0].1 - 16.0);
            let diff = (found - truth).rem_euclid(std::f64::consts::PI);
            if diff.min(std::f64::consts::PI - diff) < 0.1 {
                right += 1;
            }
        }
        assert!(right >= 36, "found {right} of 40 directions");
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
    fn windows_blow_up_and_shrink_back_exactly() {
        let w: Vec<f32> = (0..WINDOW * WINDOW)
            .map(|k| (k % 256) as f32 / 255.0)
            .collect();
        assert_eq!(window_from_digit(&window_as_digit(&w)), w);
    }

    #[test]
    fn the_mode_prefers_the_most_frequent_then_the_smallest() {
        assert_eq!(mode(&[3, 7, 7, 3, 7]), 7);
        assert_eq!(mode(&[9, 2]), 2);
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

    /// The doubles guides ask for each digit of every pair twice, first digits then second, and
    /// weight 1 (the default) and no weaker model add no guide at all.
    #[test]
    fn the_doubles_ask_for_each_digit_of_the_pair_twice() {
        use burn::backend::Flex;
        let device = Default::default();
        assert!(
            ClipGuidance::<Flex>::default()
                .guides(&[(3, 7)], 5.0, &device)
                .is_empty()
        );
        let more = ClipGuidance::<Flex> {
            doubles: 2.5,
            ..ClipGuidance::default()
        };
        let guides = more.guides(&[(3, 7), (1, 1), (0, 9)], 5.0, &device);
        let asked: Vec<(Vec<i64>, f64)> = guides
            .into_iter()
            .map(|g| match g {
                Guide::Labels { labels, weight } => {
                    assert_eq!(labels.dims(), [3, 2]);
                    (labels.into_data().iter::<i64>().collect(), weight)
                }
                _ => panic!("the doubles are label guides"),
            })
            .collect();
        assert_eq!(
            asked,
            vec![(vec![3, 3, 1, 1, 0, 0], 2.5), (vec![7, 7, 1, 1, 9, 9], 2.5)]
        );
    }

    /// Guidance in the overlapped frames is one masked unlabelled push: 1 in frames 0 and 1, 0 in
    /// the judged ones, weighted so that those frames are guided at their own strength; asking
    /// for the drawing's own guidance there adds nothing.
    #[test]
    fn overlap_guidance_masks_the_frames_before_the_judged_ones() {
        use burn::backend::Flex;
        let device = Default::default();
        let at = |g0| ClipGuidance::<Flex> {
            overlap: Some(g0),
            ..Default::default()
        };
        assert!(at(5.0).guides(&[(3, 7)], 5.0, &device).is_empty());
        let guides = at(1.5).guides(&[(3, 7), (0, 9)], 5.0, &device);
        assert_eq!(guides.len(), 1);
        match &guides[0] {
            Guide::UnlabelledWhere { mask, weight } => {
                assert_eq!(mask.dims(), [1, FRAMES, 1, 1, 1]);
                let m: Vec<f32> = mask.clone().into_data().iter::<f32>().collect();
                assert_eq!(m, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
                assert_eq!(*weight, 1.0 + 1.5 - 5.0);
            }
            _ => panic!("overlap guidance is a masked unlabelled push"),
        }
    }

    /// Every clip lands in one of four kinds (mostly right, doubled, one right, neither), and
    /// "held" is counted beside them.
    #[test]
    fn a_verdict_says_what_went_wrong() {
        let mut v = ClipVerdict {
            clips: 7,
            ..Default::default()
        };
        // Asked for 3 and 7: right either way round (one misread does not change the mode)...
        v.count((3, 7), &[3, 3, 3, 3, 3, 3], &[7, 7, 1, 7, 7, 7]); // not held
        v.count((3, 7), &[7; 6], &[3; 6]);
        // ...doubled: both places a 3, or both a 7...
        v.count((3, 7), &[3; 6], &[3, 3, 3, 3, 7, 7]); // not held
        v.count((7, 3), &[7; 6], &[7; 6]);
        // ...one right: a 3 and a 5; neither: two 5s.
        v.count((3, 7), &[3; 6], &[5; 6]);
        v.count((3, 7), &[5; 6], &[5; 6]);
        // Asked for two 1s and drawn as two 1s is right, not doubled.
        v.count((1, 1), &[1; 6], &[1; 6]);
        assert_eq!(
            (v.mostly_right, v.doubled, v.one_right, v.held),
            (3, 2, 1, 5)
        );
        assert_eq!(v.failures(), "doubled 2, one right 1, neither 1");
        let panel = PanelVerdict {
            verdicts: vec![
                ClipVerdict {
                    mostly_right: 9,
                    doubled: 1,
                    ..v.clone()
                },
                ClipVerdict {
                    mostly_right: 2,
                    doubled: 2,
                    ..v.clone()
                },
                ClipVerdict {
                    mostly_right: 5,
                    doubled: 3,
                    ..v.clone()
                },
            ],
        };
        assert_eq!(panel.median_judge().map(|j| j.doubled), Some(3));
    }

    /// Redrawing real clips from a low noise level gives each clip back (in its own place in the
    /// order, across chunks), and from level 1 it is drawing from the same noise.
    #[test]
    fn a_redraw_keeps_its_real_clips_and_from_one_is_a_draw() {
        use burn::backend::Flex;
        use nervus_models::video_dit::VideoDitConfig;
        let data = Mnist::vendored();
        let test = Clips::new(&data.test);
        let pairs = [(3, 7), (0, 1), (5, 5)];
        let real = real_clips(&test, &pairs);
        let device = Default::default();
        let model = VideoDitConfig::new()
            .with_num_layers(1)
            .with_num_attention_heads(1)
            .with_attention_head_dim(8)
            .init::<Flex>(&device);
        let settings = DrawSettings {
            steps: 20,
            guidance: 3.0,
            shift: 1.0,
            guidance_below: 1.0,
            guidance_above: 1.0,
        };
        let none = ClipGuidance::default();
        let mad = |a: &[f32], b: &[f32]| -> f32 {
            a.iter().zip(b).map(|(p, q)| (p - q).abs()).sum::<f32>() / a.len() as f32
        };
        let near = redraw(&model, &real, 0.02, settings, &none, 4, 2);
        assert_eq!(near.len(), 3);
        for (k, got) in near.iter().enumerate() {
            let own = mad(got, &real[k].pixels);
            assert!(own < 0.05, "clip {k}: {own} from its real clip");
            for (j, other) in real.iter().enumerate() {
                if j != k {
                    let d = mad(got, &other.pixels);
                    assert!(own < d, "clip {k}: {own} from its own, {d} from clip {j}");
                }
            }
        }
        let from_one = redraw(&model, &real, 1.0, settings, &none, 4, 2);
        let drawn = draw(&model, &pairs, settings, &none, 4, 2);
        for (a, b) in from_one.iter().zip(&drawn) {
            let d = mad(a, b);
            assert!(d < 1e-5, "from level 1 differs from a draw by {d}");
        }
        assert!(mad(&from_one[0], &real[0].pixels) > 0.1);
    }

    /// A one-block model whose weights are scrambled: a fresh model's conditioning starts at
    /// zero, so that its labels change nothing.
    fn tiny_with_labels() -> VideoDit<burn::backend::Flex> {
        use nervus_models::named;
        use nervus_models::video_dit::VideoDitConfig;
        let fresh = VideoDitConfig::new()
            .with_num_layers(1)
            .with_num_attention_heads(1)
            .with_attention_head_dim(8)
            .init(&Default::default());
        let mut rng = Rng::new(7);
        let weights = named::export(&fresh)
            .into_iter()
            .map(|mut t| {
                t.data
                    .iter_mut()
                    .for_each(|v| *v += (rng.normal() * 0.3) as f32);
                (t.name.clone(), t)
            })
            .collect();
        named::import(fresh, weights, Path::new("test")).expect("import")
    }

    /// The self-check, recomputed one clip and one label pair at a time: the loss of the nearer
    /// double (no labels for a pair of equal digits) minus the loss of the pair asked for, with
    /// the noise of the clip's place; the same for either order of the pair and any chunking.
    #[test]
    fn the_self_check_is_the_nearer_doubles_loss_minus_the_asked_pairs() {
        let data = Mnist::vendored();
        let test = Clips::new(&data.test);
        let pairs = [(3, 7), (0, 1), (5, 5)];
        let clips: Vec<Vec<f32>> = real_clips(&test, &pairs)
            .into_iter()
            .map(|c| c.pixels)
            .collect();
        let device = Default::default();
        let model = tiny_with_labels();
        let got = self_check(&model, &clips, &pairs, 2);
        let loss = |k: usize, labels: [i64; 2]| -> f64 {
            let x: Vec<f32> = clips[k].iter().map(|&v| to_model(v)).collect();
            let mut sum = 0.0;
            for (l, &t) in CHECK_LEVELS.iter().enumerate() {
                let mut rng = Rng::stream(CHECK_SEED ^ l as u64, k as u64);
                let noise: Vec<f32> = (0..CLIP).map(|_| rng.normal() as f32).collect();
                let batch = flow_batch(
                    x.clone(),
                    noise,
                    vec![t],
                    labels.to_vec(),
                    clip_shape(1),
                    &device,
                );
                sum += model.flow_loss_per_clip(batch).into_scalar() as f64;
            }
            sum / CHECK_LEVELS.len() as f64
        };
        for (k, &(a, b)) in pairs.iter().enumerate() {
            let (a, b) = (a as i64, b as i64);
            let wrong = if a == b {
                loss(k, [10, 10])
            } else {
                loss(k, [a, a]).min(loss(k, [b, b]))
            };
            let want = wrong - loss(k, [a, b]);
            assert!(
                (got[k] - want).abs() < 1e-6,
                "pair {k}: {} against {want}",
                got[k]
            );
            assert!(want != 0.0, "pair {k}: the labels change nothing");
        }
        let swapped: Vec<(u8, u8)> = pairs.iter().map(|&(a, b)| (b, a)).collect();
        let again = self_check(&model, &clips, &swapped, 1);
        for (k, (x, y)) in got.iter().zip(&again).enumerate() {
            assert!((x - y).abs() < 1e-6, "pair {k}: {x} one way, {y} swapped");
        }
    }

    #[test]
    fn the_choice_is_the_highest_score_the_first_on_a_tie_and_never_a_nan() {
        let nan = f64::NAN;
        let scores = vec![
            vec![0.1, nan, 0.5, 0.2, nan],
            vec![0.3, 0.0, 0.5, -1.0, nan],
            vec![0.2, -2.0, 0.1, nan, nan],
        ];
        assert_eq!(choose(&scores), vec![1, 1, 0, 0, 0]);
    }

    /// Candidate 0 of a best-of drawing is the plain draw; the others differ; each pair keeps the
    /// candidate with the highest score.
    #[test]
    fn a_best_of_drawing_keeps_each_pairs_best_scored_candidate() {
        let pairs = [(3, 7), (0, 1), (5, 5)];
        let model = tiny_with_labels();
        let settings = four_steps();
        let none = ClipGuidance::default();
        let best = draw_best_of(&model, &pairs, settings, &none, 4, 2, 3);
        assert_eq!(best.candidates.len(), 3);
        assert_eq!(
            best.candidates[0],
            draw(&model, &pairs, settings, &none, 4, 2)
        );
        for j in 1..3 {
            for k in 0..pairs.len() {
                assert_ne!(best.candidates[j][k], best.candidates[0][k], "{j}, {k}");
            }
        }
        for k in 0..pairs.len() {
            let scores: Vec<f64> = best.scores.iter().map(|s| s[k]).collect();
            assert!(scores.iter().all(|s| s.is_finite()), "pair {k}: {scores:?}");
            let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            assert!(
                scores.iter().any(|&s| s != top),
                "pair {k}: a tie {scores:?}"
            );
            assert_eq!(scores[best.chosen[k]], top, "pair {k}: {scores:?}");
            assert_eq!(best.clips[k], best.candidates[best.chosen[k]][k]);
        }
    }

    /// Drawing settings for the tiny models' tests: 4 Euler steps at guidance 3, nothing else.
    fn four_steps() -> DrawSettings {
        DrawSettings {
            steps: 4,
            guidance: 3.0,
            shift: 1.0,
            guidance_below: 1.0,
            guidance_above: 1.0,
        }
    }

    /// A churned drawing takes its fresh noise by clip and step, not by chunk: the same clips in
    /// chunks of 1 or 3; it is not the plain drawing, and another noise set gives other clips.
    #[test]
    fn a_churned_drawing_is_the_same_in_any_chunks() {
        let pairs = [(3, 7), (0, 1), (5, 5)];
        let model = tiny_with_labels();
        let settings = four_steps();
        let churned = ClipGuidance {
            churn: 0.6,
            ..ClipGuidance::default()
        };
        let whole = draw(&model, &pairs, settings, &churned, 4, 3);
        let single = draw(&model, &pairs, settings, &churned, 4, 1);
        let plain = draw(&model, &pairs, settings, &ClipGuidance::default(), 4, 3);
        let other = draw(&model, &pairs, settings, &churned, 5, 3);
        let mad = |a: &[f32], b: &[f32]| -> f32 {
            a.iter().zip(b).map(|(p, q)| (p - q).abs()).sum::<f32>() / a.len() as f32
        };
        for k in 0..pairs.len() {
            let d = mad(&whole[k], &single[k]);
            assert!(d < 1e-6, "clip {k}: chunks of 3 and 1 differ by {d}");
            let d = mad(&whole[k], &plain[k]);
            assert!(d > 1e-3, "clip {k}: churned and plain differ by only {d}");
            let d = mad(&whole[k], &other[k]);
            assert!(d > 1e-3, "clip {k}: noise sets 4 and 5 differ by only {d}");
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

    #[test]
    fn the_judge_a_run_uses_is_the_one_it_saves() {
        use burn::backend::{Autodiff, Flex};
        type B = Autodiff<Flex>;
        let data = Mnist::vendored();
        let (train, test) = (Clips::new(&data.train), Clips::new(&data.test));
        // Few clips, many epochs: the network overfits, so its best test loss comes before the
        // last epoch and the saved network is not the last one.
        let options = JudgeOptions {
            clips: 12,
            epochs: 8,
            hidden: 32,
            seed: 3,
        };
        let dir = std::env::temp_dir().join(format!("nervus-judge-{}", std::process::id()));
        let device = Default::default();
        let (train_split, test_split) = judge_splits(&train, &test, options);
        let (last, report) = crate::mnist::train::<B>(
            &judge_mnist_options(options, &dir.join("plain"), dir.join("plain-run")),
            Arc::new(train_split),
            Arc::new(test_split),
            Reporter::silent(),
            &device,
        )
        .unwrap();
        let losses: Vec<f64> = report.epochs.iter().map(|e| e.1).collect();
        let best = (0..losses.len())
            .min_by(|&a, &b| losses[a].total_cmp(&losses[b]))
            .unwrap();
        assert!(
            best + 1 < losses.len(),
            "the test needs a best epoch before the last: test losses {losses:?}"
        );
        let judge = train_judge::<B>(
            &train,
            &test,
            options,
            &dir.join("judge"),
            dir.join("judge-run"),
            &device,
        )
        .unwrap();
        let saved = Mlp::<Flex>::load(&dir.join("judge"), &device).unwrap();
        let bits = |m: &Mlp<Flex>| -> Vec<u32> {
            [
                m.fc1.weight.val().flatten::<1>(0, 1),
                m.fc1.bias.as_ref().unwrap().val(),
                m.fc2.weight.val().flatten::<1>(0, 1),
                m.fc2.bias.as_ref().unwrap().val(),
            ]
            .into_iter()
            .flat_map(|t| {
                t.into_data()
                    .iter::<f32>()
                    .map(f32::to_bits)
                    .collect::<Vec<_>>()
            })
            .collect()
        };
        assert_eq!(
            bits(&judge.model),
            bits(&saved),
            "the run's judge is not the saved one"
        );
        assert_ne!(
            bits(&judge.model),
            bits(&last),
            "the run's judge is the last epoch's network, not the best"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_panel_reads_back_in_seed_order_and_a_wrong_dir_is_named() {
        use burn::backend::Flex;
        use nervus_models::mlp::MlpConfig;
        let device = Default::default();
        let dir = std::env::temp_dir().join(format!("nervus-panel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Hidden sizes tell the judges apart; seed 10 must come after seed 2 (numbers, not text).
        for (seed, hidden) in [(10, 7), (1, 3), (2, 5)] {
            MlpConfig::new()
                .with_hidden(hidden)
                .init::<Flex>(&device)
                .save(&dir.join(format!("seed-{seed}")))
                .unwrap();
        }
        std::fs::create_dir_all(dir.join("seed-x")).unwrap();
        let panel = load_judges::<Flex>(&dir, &device).unwrap();
        let hidden: Vec<usize> = panel.iter().map(|m| m.fc1.weight.dims()[1]).collect();
        assert_eq!(hidden, [3, 5, 7]);
        // One judge saved on its own is a panel of one.
        assert_eq!(
            load_judges::<Flex>(&dir.join("seed-2"), &device)
                .unwrap()
                .len(),
            1
        );
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = load_judges::<Flex>(&empty, &device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("empty") && err.contains("not a judge"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_panel_quotes_its_median_and_every_judge() {
        let v = |mostly_right, held| ClipVerdict {
            mostly_right,
            held,
            clips: 55,
            ..Default::default()
        };
        let panel = PanelVerdict {
            verdicts: vec![v(23, 6), v(17, 9), v(22, 4)],
        };
        assert_eq!(panel.median_mostly_right(), 22);
        assert_eq!(panel.median_held(), 6);
        assert_eq!(
            panel.summary(),
            "mostly right 22/55 (judges 23, 17, 22), held 6/55 (judges 6, 9, 4)"
        );
        let one = PanelVerdict {
            verdicts: vec![v(15, 1)],
        };
        assert_eq!(one.summary(), "mostly right 15/55, held 1/55");
        let even = PanelVerdict {
            verdicts: vec![v(4, 0), v(9, 0)],
        };
        assert_eq!(even.median_mostly_right(), 4);
    }
}
