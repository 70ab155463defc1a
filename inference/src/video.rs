//! Drawing clips from a video DiT: two digits moving apart, drawn for a pair of labels from fixed
//! noise sets ([`draw`]), optionally pushed away from the pair's doubles ([`doubles_guides`]), the
//! model's own check of a drawing ([`self_check`]) and the best of several candidates by it
//! ([`draw_best_of`]), the model's one-step guesses, and sheets and GIFs of the results.

use crate::drawing::DrawSettings;
use crate::flow::Guide;
use crate::render::{clips_gif, grid_png};
use burn::prelude::*;
use nervus_datasets::moving::{Clip, Clips, FRAME, FRAMES};
use nervus_datasets::rng::Rng;
use nervus_models::flow::{FlowBatch, Velocity, noised};
use nervus_models::video_dit::VideoDit;
use std::path::Path;

const DRAW_SEED: u64 = 0x6E1F;
/// Seed of [`guesses`]' noise (and of the choice of clips a training run shows them for).
pub const GUESS_SEED: u64 = 0x6E55;

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

/// Values in one clip: frames × pixels.
pub const CLIP: usize = FRAMES * FRAME * FRAME;

/// A 0..1 pixel to the model's −1..1.
pub fn to_model(v: f32) -> f32 {
    v * 2.0 - 1.0
}

/// A batch of `b` clips in the model's shape.
pub fn clip_shape(b: usize) -> [usize; 5] {
    [b, FRAMES, 1, FRAME, FRAME]
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

/// Draws one clip for each pair, clip `k` from [`draw_noise`]`(set, k)`, in chunks of `chunk`
/// clips, pushed away from each pair's doubles with weight `doubles` (1: not at all;
/// [`doubles_guides`]); pixels in 0..1.
pub fn draw<B: Backend>(
    model: &VideoDit<B>,
    pairs: &[(u8, u8)],
    settings: DrawSettings,
    doubles: f64,
    set: u64,
    chunk: usize,
) -> Vec<Vec<f32>> {
    walk_clips(model, pairs, settings, doubles, (set, 0), chunk)
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
    doubles: f64,
    set: u64,
    chunk: usize,
    candidates: usize,
) -> BestOf {
    let mut all = Vec::new();
    let mut scores = Vec::new();
    for j in 0..candidates.max(1) {
        let drawn = walk_clips(model, pairs, settings, doubles, (set, j as u64), chunk);
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

/// [`draw`] as candidate `candidate` of a [`draw_best_of`] (candidate 0: the plain draw).
fn walk_clips<B: Backend>(
    model: &VideoDit<B>,
    pairs: &[(u8, u8)],
    settings: DrawSettings,
    doubles: f64,
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
        let guides = doubles_guides(part, doubles, &device);
        let px = settings.draw_pixels_guided(model, guides, x1, labels);
        out.extend(px.chunks(CLIP).map(|c| c.to_vec()));
    }
    out
}

/// The push away from what the model draws when asked for each digit of the pair twice, `(a, a)`
/// and `(b, b)`: the drawing's commonest failure, both places drawing one of the two digits. Two
/// label guides of weight `doubles` (for a pair of equal digits they push nowhere), or none at
/// weight 1.
pub fn doubles_guides<B: Backend>(
    pairs: &[(u8, u8)],
    doubles: f64,
    device: &B::Device,
) -> Vec<Guide<B>> {
    if doubles == 1.0 {
        return Vec::new();
    }
    [true, false]
        .into_iter()
        .map(|first| {
            let labels: Vec<i64> = pairs
                .iter()
                .flat_map(|&(a, b)| {
                    let d = if first { a } else { b } as i64;
                    [d, d]
                })
                .collect();
            Guide::Labels {
                labels: Tensor::from_data(TensorData::new(labels, [pairs.len(), 2]), device),
                weight: doubles,
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_datasets::mnist::Mnist;
    type Cpu = burn_ndarray::NdArray<f32>;

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

    /// The doubles guides ask for each digit of every pair twice, first digits then second, and
    /// weight 1 (the default) adds no guide at all.
    #[test]
    fn the_doubles_ask_for_each_digit_of_the_pair_twice() {
        let device = Default::default();
        assert!(doubles_guides::<Cpu>(&[(3, 7)], 1.0, &device).is_empty());
        let guides = doubles_guides::<Cpu>(&[(3, 7), (1, 1), (0, 9)], 2.5, &device);
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

    /// A one-block model whose weights are scrambled: a fresh model's conditioning starts at
    /// zero, so that its labels change nothing.
    fn tiny_with_labels() -> VideoDit<Cpu> {
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
                let batch = FlowBatch {
                    x: Tensor::from_data(TensorData::new(x.clone(), clip_shape(1)), &device),
                    noise: Tensor::from_data(TensorData::new(noise, clip_shape(1)), &device),
                    t: Tensor::from_data(TensorData::new(vec![t], [1]), &device),
                    labels: Tensor::from_data(TensorData::new(labels.to_vec(), [1, 2]), &device),
                };
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
        let best = draw_best_of(&model, &pairs, settings, 1.0, 4, 2, 3);
        assert_eq!(best.candidates.len(), 3);
        assert_eq!(
            best.candidates[0],
            draw(&model, &pairs, settings, 1.0, 4, 2)
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

    /// A drawing takes clip `k`'s noise by its place, not by chunk: the same clips in chunks of 1
    /// or 3, plainly and pushed from the doubles; the push changes the clips, and another noise
    /// set gives other clips.
    #[test]
    fn a_drawing_is_the_same_in_any_chunks() {
        let pairs = [(3, 7), (0, 1), (5, 5)];
        let model = tiny_with_labels();
        let settings = four_steps();
        let mad = |a: &[f32], b: &[f32]| -> f32 {
            a.iter().zip(b).map(|(p, q)| (p - q).abs()).sum::<f32>() / a.len() as f32
        };
        for doubles in [1.0, 3.0] {
            let whole = draw(&model, &pairs, settings, doubles, 4, 3);
            let single = draw(&model, &pairs, settings, doubles, 4, 1);
            let other = draw(&model, &pairs, settings, doubles, 5, 3);
            for k in 0..pairs.len() {
                let d = mad(&whole[k], &single[k]);
                assert!(d < 1e-6, "clip {k}: chunks of 3 and 1 differ by {d}");
                let d = mad(&whole[k], &other[k]);
                assert!(d > 1e-3, "clip {k}: noise sets 4 and 5 differ by only {d}");
            }
        }
        let plain = draw(&model, &pairs, settings, 1.0, 4, 3);
        let pushed = draw(&model, &pairs, settings, 3.0, 4, 3);
        // A pair of equal digits has no double to push from: only the others change.
        for k in 0..2 {
            let d = mad(&plain[k], &pushed[k]);
            assert!(d > 1e-4, "clip {k}: the push changed it by only {d}");
        }
        assert!(
            mad(&plain[2], &pushed[2]) < 1e-6,
            "(5, 5) pushed from itself"
        );
    }
}
