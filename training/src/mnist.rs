//! The MNIST classifier on the shared path: batches from a split, the per-epoch report, and the
//! keep-best save.

use crate::loader::BatchSource;
use crate::optim::OptimizerSpec;
use crate::options::KeepBest;
use crate::report::{Reporter, duration};
use crate::run::{RunConfig, TrainError, fit};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, EpochInfo, Score, Scored};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::ClassificationOutput;
use burn::train::metric::{AccuracyMetric, LearningRateMetric, LossMetric};
use nervus_datasets::mnist::{PIXELS, Split};
use nervus_datasets::rng::Rng;
use nervus_models::mlp::{ClassBatch, Mlp, MlpConfig};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

impl<B: Backend> Scored for ClassificationOutput<B> {
    fn score(&self, full: bool) -> Score {
        let n = self.targets.dims()[0] as f64;
        let loss = self.loss.clone().into_scalar().elem::<f64>();
        let correct = full.then(|| {
            self.output
                .clone()
                .argmax(1)
                .flatten::<1>(0, 1)
                .equal(self.targets.clone())
                .int()
                .sum()
                .into_scalar()
                .elem::<f64>()
        });
        Score {
            loss_sum: loss * n,
            count: n,
            correct,
        }
    }
}

/// Batches of one MNIST split, reshuffled every epoch by a seed of their own (or in file order).
pub struct MnistSource {
    split: Arc<Split>,
    batch: usize,
    shuffle: Option<u64>,
    order: Mutex<Option<(usize, Arc<Vec<usize>>)>>,
}

impl MnistSource {
    pub fn new(split: Arc<Split>, batch: usize, shuffle: Option<u64>) -> Self {
        assert!(batch > 0, "batch size must be positive");
        Self {
            split,
            batch,
            shuffle,
            order: Mutex::new(None),
        }
    }

    fn order(&self, epoch: usize) -> Arc<Vec<usize>> {
        let mut cache = self.order.lock().expect("order cache");
        if let Some((e, o)) = &*cache
            && *e == epoch
        {
            return o.clone();
        }
        let mut idx: Vec<usize> = (0..self.split.len()).collect();
        if let Some(seed) = self.shuffle {
            Rng::stream(seed, epoch as u64).shuffle(&mut idx);
        }
        let idx = Arc::new(idx);
        *cache = Some((epoch, idx.clone()));
        idx
    }
}

/// Images as `[n, 784]` in 0..1 and labels as `[n]`.
pub fn class_batch<B: Backend>(
    split: &Split,
    indices: &[usize],
    device: &B::Device,
) -> ClassBatch<B> {
    let n = indices.len();
    let pixels: Vec<f32> = indices
        .iter()
        .flat_map(|&i| split.image(i).iter().map(|&p| p as f32 / 255.0))
        .collect();
    let labels: Vec<i64> = indices.iter().map(|&i| split.labels[i] as i64).collect();
    ClassBatch {
        inputs: Tensor::from_data(TensorData::new(pixels, [n, PIXELS]), device),
        targets: Tensor::from_data(TensorData::new(labels, [n]), device),
    }
}

impl<B: Backend> BatchSource<B> for MnistSource {
    type Batch = ClassBatch<B>;

    fn batches(&self, _epoch: usize) -> usize {
        self.split.len().div_ceil(self.batch)
    }

    fn items_per_batch(&self) -> usize {
        self.batch
    }

    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> ClassBatch<B> {
        let order = self.order(epoch);
        let end = ((index + 1) * self.batch).min(order.len());
        class_batch(&self.split, &order[index * self.batch..end], device)
    }
}

/// Everything the MNIST run needs.
#[derive(Clone, Debug)]
pub struct MnistOptions {
    pub hidden: usize,
    pub optimizer: OptimizerSpec,
    pub lr: f64,
    pub epochs: usize,
    pub batch: usize,
    pub seed: u64,
    /// Where the best model (by test loss) is written; `None` saves nothing.
    pub save: Option<PathBuf>,
    /// Burn's working directory (resume checkpoints, metric logs).
    pub run_dir: PathBuf,
    /// Start afresh over a model already at `save` and another run's checkpoints.
    pub overwrite: bool,
}

/// What a run measured, epoch by epoch.
#[derive(Clone, Debug, Default)]
pub struct MnistReport {
    /// Per epoch: (train loss, test loss, test accuracy).
    pub epochs: Vec<(f64, f64, f64)>,
    pub seconds: f64,
}

impl MnistReport {
    pub fn final_accuracy(&self) -> f64 {
        self.epochs.last().map_or(f64::NAN, |e| e.2)
    }
}

/// What an MNIST run was, saved beside the model as `training.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MnistSettings {
    pub hidden: usize,
    pub optimizer: OptimizerSpec,
    pub lr: f64,
    pub epochs: usize,
    pub batch: usize,
    pub seed: u64,
    pub backend: String,
    /// The epoch this model was saved at (`step`, the name every model's `training.json` uses),
    /// and its test loss.
    pub step: usize,
    pub valid_loss: Option<f64>,
}

crate::options::record_step_and_loss!(MnistSettings);

struct MnistHook {
    report: Reporter,
    keep: KeepBest<MnistSettings>,
    out: Arc<Mutex<MnistReport>>,
}

impl<B: Backend> EpochHook<Mlp<B>> for MnistHook {
    fn after_epoch(&mut self, info: &EpochInfo, model: &Mlp<B>) -> Result<(), String> {
        let acc = info.valid.accuracy().unwrap_or(f64::NAN);
        let saved = self
            .keep
            .offer(info.epoch, info.valid.loss(), |settings, dir| {
                crate::checkpoint::replace_dir(dir, |staging| {
                    std::fs::create_dir_all(staging)
                        .map_err(|e| nervus_models::checkpoint::CheckpointError::io(staging, e))?;
                    model.save(staging)?;
                    nervus_models::checkpoint::write_json(&staging.join("training.json"), settings)
                })
            })?;
        self.report.line(format!(
            "epoch {:>2}/{}  train loss {:.4}  test loss {:.4}  test accuracy {:.2}%  ({}){saved}",
            info.epoch,
            info.epochs,
            info.train.loss(),
            info.valid.loss(),
            acc * 100.0,
            duration(info.elapsed)
        ));
        let mut out = self.out.lock().expect("report");
        out.epochs.push((info.train.loss(), info.valid.loss(), acc));
        out.seconds = info.elapsed;
        Ok(())
    }
}

/// Trains the MLP on `train`, testing on `test` after every epoch, on backend `B`.
pub fn train<B: AutodiffBackend>(
    opts: &MnistOptions,
    train: Arc<Split>,
    test: Arc<Split>,
    report: Reporter,
    device: &B::Device,
) -> Result<(Mlp<B::InnerBackend>, MnistReport), TrainError> {
    crate::checks::at_least_one("--hidden", opts.hidden)?;
    crate::checks::positive("--lr", opts.lr)?;
    crate::checks::at_least_one("--epochs", opts.epochs)?;
    crate::checks::at_least_one("--batch", opts.batch)?;
    if let Some(save) = &opts.save {
        crate::checkpoint::check_fresh_save(save, None, false, opts.overwrite)?;
    }
    B::seed(device, opts.seed);
    let model = MlpConfig::new().with_hidden(opts.hidden).init::<B>(device);
    let out = Arc::new(Mutex::new(MnistReport::default()));
    let settings = MnistSettings {
        hidden: opts.hidden,
        optimizer: opts.optimizer.clone(),
        lr: opts.lr,
        epochs: opts.epochs,
        batch: opts.batch,
        seed: opts.seed,
        backend: crate::backend::NAME.into(),
        step: 0,
        valid_loss: None,
    };
    let hook = MnistHook {
        report: report.clone(),
        keep: KeepBest::new(f64::INFINITY, opts.save.clone(), settings),
        out: out.clone(),
    };
    let run = RunConfig {
        dir: opts.run_dir.clone(),
        epochs: opts.epochs,
        accumulation: 1,
        parts: 1,
        resume: false,
        baseline: false,
        overwrite: opts.overwrite,
        settings: serde_json::json!({
            "hidden": opts.hidden, "optimizer": opts.optimizer, "lr": opts.lr,
            "epochs": opts.epochs, "batch": opts.batch, "seed": opts.seed,
        }),
        report,
        unit: Some((opts.batch as f64, "images".into())),
    };
    let model = fit(
        run,
        model,
        opts.optimizer.build(None),
        WarmupCosine::constant(opts.lr),
        MnistSource::new(train, opts.batch, Some(opts.seed)),
        MnistSource::new(test, 500, None),
        |t| {
            t.metrics((AccuracyMetric::new(), LossMetric::new()))
                .metric_train_numeric(LearningRateMetric::new())
        },
        Box::new(hook),
    )?;
    let report = out.lock().expect("report").clone();
    Ok((model, report))
}
