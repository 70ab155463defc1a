//! The judge: the MNIST classifier trained on windows cut around the digits of real clips, alone
//! or as a panel of judges alike but for their seeds, and how well it reads real clips frame by
//! frame.

use crate::checks::{BadValue, at_least_one};
use crate::mnist::MnistOptions;
use crate::optim::OptimizerSpec;
use crate::report::{Reporter, duration};
use crate::run::TrainError;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use nervus_datasets::mnist::{SIDE, Split};
use nervus_datasets::moving::{Clips, FRAMES, WINDOW};
use nervus_datasets::rng::Rng;
use nervus_models::checkpoint::CheckpointError;
use nervus_models::mlp::Mlp;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
pub(crate) fn read_windows<B: Backend>(judge: &Mlp<B>, windows: &[Vec<f32>]) -> Vec<u8> {
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

/// The judge flags of the video examples.
#[derive(clap::Args, Clone, Debug)]
pub struct JudgeArgs {
    /// A saved judge or panel (a run saves its panel in <out>/judge; default: train the panel
    /// first, about 15 s a judge).
    #[arg(long)]
    pub judge: Option<PathBuf>,
    /// Judges in the panel, alike but for their seeds (1, 2, …): every count is given for each.
    #[arg(long, default_value_t = 3)]
    pub judges: usize,
    /// Real training clips each trained judge's windows are cut from (16 windows a clip; the
    /// --judge-* flags shape judges trained here, not those --judge loads).
    #[arg(long, default_value_t = JudgeOptions::default().clips)]
    pub judge_clips: usize,
    /// Epochs each judge trains for (the best by test loss is kept).
    #[arg(long, default_value_t = JudgeOptions::default().epochs)]
    pub judge_epochs: usize,
    /// Hidden units of each judge's MLP.
    #[arg(long, default_value_t = JudgeOptions::default().hidden)]
    pub judge_hidden: usize,
}

impl JudgeArgs {
    pub fn choice(&self) -> JudgeChoice {
        JudgeChoice {
            load: self.judge.clone(),
            count: self.judges,
            options: JudgeOptions {
                clips: self.judge_clips,
                epochs: self.judge_epochs,
                hidden: self.judge_hidden,
                ..JudgeOptions::default()
            },
        }
    }
}

/// Where a run's or a drawing's judges come from: a saved judge or panel (`load`), or else
/// `count` judges trained here with `options` (seeds `options.seed`, `options.seed + 1`, …).
#[derive(Clone, Debug)]
pub struct JudgeChoice {
    pub load: Option<PathBuf>,
    pub count: usize,
    pub options: JudgeOptions,
}

impl JudgeChoice {
    /// Refuses a panel of no judges and judges of no clips, epochs or hidden units.
    pub fn check(&self) -> Result<(), BadValue> {
        at_least_one("--judges", self.count)?;
        at_least_one("--judge-clips", self.options.clips)?;
        at_least_one("--judge-epochs", self.options.epochs)?;
        at_least_one("--judge-hidden", self.options.hidden)
    }
}

/// The panel `choice` names, trained panels saved in `out/judge` (their runs in
/// `out/judge-train`); reports how it was made and the share of real test windows each judge
/// reads right, frame by frame (the lowest and highest judge).
pub fn panel<B: AutodiffBackend>(
    choice: &JudgeChoice,
    train: &Clips,
    test: &Clips,
    out: &Path,
    report: &Reporter,
    device: &B::Device,
) -> Result<Vec<Mlp<B::InnerBackend>>, TrainError> {
    choice.check()?;
    let (judges, per_frame): (Vec<_>, Vec<_>) = match &choice.load {
        Some(dir) => load_judges(dir, device)
            .map_err(|e| TrainError::read(format!("loading the judge from {}", dir.display()), e))?
            .into_iter()
            .map(|j| {
                let per_frame = judge_frames(&j, test);
                (j, per_frame)
            })
            .unzip(),
        None => {
            let o = choice.options;
            let dir = out.join("judge");
            let panel = train_judges::<B>(
                train,
                test,
                o,
                choice.count,
                &dir,
                &out.join("judge-train"),
                device,
            )?;
            report.line(format!(
                "judges: {} MNIST MLPs (seeds {}–{}) trained on 14×14 windows of {} real clips in {} (each its best epoch, saved in {})",
                panel.len(),
                o.seed,
                o.seed + panel.len() as u64 - 1,
                o.clips,
                duration(panel.iter().map(|j| j.seconds).sum()),
                dir.display()
            ));
            panel.into_iter().map(|j| (j.model, j.per_frame)).unzip()
        }
    };
    let frames: Vec<String> = (0..FRAMES)
        .map(|f| {
            let (lo, hi) = per_frame
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), p: &Vec<f64>| {
                    (lo.min(p[f]), hi.max(p[f]))
                });
            let (lo, hi) = (format!("{:.0}", lo * 100.0), format!("{:.0}", hi * 100.0));
            if lo == hi {
                format!("{lo}%")
            } else {
                format!("{lo}–{hi}%")
            }
        })
        .collect();
    report.line(format!(
        "judges on real test windows, frames 0–7 (lowest–highest judge): {}",
        frames.join(" ")
    ));
    Ok(judges)
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

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_datasets::mnist::Mnist;

    #[test]
    fn windows_blow_up_and_shrink_back_exactly() {
        let w: Vec<f32> = (0..WINDOW * WINDOW)
            .map(|k| (k % 256) as f32 / 255.0)
            .collect();
        assert_eq!(window_from_digit(&window_as_digit(&w)), w);
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
}
