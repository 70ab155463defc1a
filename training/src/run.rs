//! One entry point for every model: [`fit`] wires a model, its optimizer, the schedule, two batch
//! sources and a hook into Burn's `SupervisedTraining` and launches it with [`StepStrategy`].

use crate::loader::{BatchSource, EpochCursor, SourceLoader};
use crate::optim::TrainOptim;
use crate::renderer::PlainRenderer;
use crate::report::{Reporter, Ui};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, Scored, StepStrategy};
use burn::record::{
    FileRecorder, FullPrecisionSettings, NamedMpkFileRecorder, Recorder, RecorderError,
};
use burn::tensor::backend::AutodiffBackend;
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::{
    InferenceStep, Learner, LearningComponentsMarker, SupervisedTraining, TrainStep,
    TrainingStrategy,
};
use nervus_models::output::Objective;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The learner's component types for a model `M` on backend `B`.
pub type Components<B, M> = LearningComponentsMarker<B, WarmupCosine, M, TrainOptim<M, B>>;

/// Why a run stopped without finishing.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{0}")]
    Hook(String),
    #[error("{path}: {problem}")]
    Resume { path: PathBuf, problem: String },
    /// The training or validation loss became NaN or infinite: the run stopped at that epoch's
    /// end. An outcome an experiment records (a learning rate too high), not a broken run.
    #[error(
        "training diverged by step {step}: training loss {train:.4}, validation loss {valid:.4}; \
         stopped; the best model and the last checkpoint saved so far are unchanged"
    )]
    Diverged { step: usize, train: f64, valid: f64 },
}

/// How to run.
pub struct RunConfig {
    /// Burn's working directory for this run: resume checkpoints, metric logs, `log.txt`.
    pub dir: PathBuf,
    pub epochs: usize,
    /// Micro-batches per optimizer step.
    pub accumulation: usize,
    /// Threads each batch is cut across ([`crate::shard`]; 1 = none).
    pub parts: usize,
    /// Continue from the newest checkpoint in `dir` if there is one.
    pub resume: bool,
    /// Measure the starting model before the first step (for continuations).
    pub baseline: bool,
    pub report: Reporter,
    /// For the plain renderer's rate line: units per batch and their name.
    pub unit: Option<(f64, String)>,
}

/// A file recorder that writes through a temporary file and a rename, so that a checkpoint on
/// disk is always a whole one. (Burn's file recorders delete the old file, then write the new one
/// in place.)
#[derive(Debug, Default, Clone)]
pub struct AtomicRecorder(NamedMpkFileRecorder<FullPrecisionSettings>);

impl<B: burn::prelude::Backend> Recorder<B> for AtomicRecorder {
    type Settings = FullPrecisionSettings;
    type RecordArgs = PathBuf;
    type RecordOutput = ();
    type LoadArgs = PathBuf;

    fn save_item<I: serde::Serialize>(&self, item: I, file: PathBuf) -> Result<(), RecorderError> {
        let ext = <Self as FileRecorder<B>>::file_extension();
        let target = file.with_extension(ext);
        // The inner recorder replaces the extension; "x" is the part it replaces.
        let staging = PathBuf::from(format!("{}.partial.x", file.display()));
        <NamedMpkFileRecorder<FullPrecisionSettings> as Recorder<B>>::save_item(
            &self.0,
            item,
            staging.clone(),
        )?;
        std::fs::rename(staging.with_extension(ext), &target)
            .map_err(|e| RecorderError::Unknown(e.to_string()))
    }

    fn load_item<I: serde::de::DeserializeOwned>(
        &self,
        file: &mut PathBuf,
    ) -> Result<I, RecorderError> {
        <NamedMpkFileRecorder<FullPrecisionSettings> as Recorder<B>>::load_item(&self.0, file)
    }
}

impl<B: burn::prelude::Backend> FileRecorder<B> for AtomicRecorder {
    fn file_extension() -> &'static str {
        "mpk"
    }
}

/// The newest epoch with a complete resume checkpoint (model, optimizer and scheduler) in `dir`.
pub fn latest_checkpoint(dir: &Path) -> Option<usize> {
    let ckpt = dir.join("checkpoint");
    let entries = std::fs::read_dir(&ckpt).ok()?;
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("model-")?
                .strip_suffix(".mpk")?
                .parse::<usize>()
                .ok()
        })
        .filter(|e| {
            ["optim", "scheduler"]
                .iter()
                .all(|p| ckpt.join(format!("{p}-{e}.mpk")).exists())
        })
        .max()
}

/// Trains `model` for `run.epochs` epochs of `train`, validating on `valid` after each, and
/// returns the final model. `metrics` registers Burn metrics for the TUI and the metric logs;
/// `hook` is called after every validation.
#[allow(clippy::too_many_arguments)]
pub fn fit<B, M, TS, VS>(
    run: RunConfig,
    model: M,
    optim: TrainOptim<M, B>,
    schedule: WarmupCosine,
    train: TS,
    valid: VS,
    metrics: impl FnOnce(SupervisedTraining<Components<B, M>>) -> SupervisedTraining<Components<B, M>>,
    hook: Box<dyn EpochHook<M::InnerModule>>,
) -> Result<M::InnerModule, TrainError>
where
    B: AutodiffBackend,
    M: Objective<B> + TrainStep<Input = TS::Batch> + core::fmt::Display + 'static,
    M::InnerModule: InferenceStep<Input = VS::Batch>,
    <M as TrainStep>::Output: Scored + crate::shard::Merge + Send,
    <M::InnerModule as InferenceStep>::Output: Scored,
    TS: BatchSource<B> + 'static,
    VS: BatchSource<B::InnerBackend> + 'static,
    TS::Batch: crate::shard::Shard + Send + 'static,
    VS::Batch: 'static,
{
    let device = model.devices()[0].clone();
    let cursor = EpochCursor::default();
    let batches: Vec<usize> = (1..=run.epochs).map(|e| train.batches(e)).collect();
    assert!(
        batches.iter().all(|b| b % run.accumulation.max(1) == 0),
        "batches per epoch ({batches:?}) must be multiples of the accumulation ({})",
        run.accumulation
    );
    let train = Arc::new(SourceLoader::<B, TS>::new(
        train,
        cursor.clone(),
        device.clone(),
    ));
    let valid = Arc::new(SourceLoader::<B::InnerBackend, VS>::new(
        valid,
        cursor.clone(),
        device.clone(),
    ));
    let error = Arc::new(Mutex::new(None));
    let strategy = StepStrategy::<Components<B, M>> {
        device,
        cursor,
        accumulation: run.accumulation.max(1),
        parts: run.parts.max(1),
        batches,
        hook: Arc::new(Mutex::new(hook)),
        baseline: run.baseline,
        error: error.clone(),
    };
    let mut training = SupervisedTraining::new(&run.dir, train, valid)
        .with_training_strategy(TrainingStrategy::Custom(Arc::new(strategy)))
        .with_file_checkpointer(AtomicRecorder::default())
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(1))
        .with_application_logger(None)
        .num_epochs(run.epochs);
    training = metrics(training);
    if run.report.ui() == Ui::Plain {
        let mut r = PlainRenderer::new(run.report.clone(), 30.0);
        r.unit = run.unit.clone();
        training = training.renderer(r);
    }
    if run.resume
        && let Some(epoch) = latest_checkpoint(&run.dir)
    {
        if epoch >= run.epochs {
            return Err(TrainError::Resume {
                path: run.dir.clone(),
                problem: format!(
                    "the run already finished ({epoch} of {} epochs)",
                    run.epochs
                ),
            });
        }
        run.report.line(format!(
            "resuming after epoch {epoch} from {}",
            run.dir.display()
        ));
        training = training.checkpoint(epoch);
    }
    let result = training.launch(Learner::new(model, optim, schedule));
    drop(result.renderer);
    run.report.flush();
    if let Some(e) = error.lock().expect("error slot").take() {
        return Err(e);
    }
    Ok(result.model)
}
