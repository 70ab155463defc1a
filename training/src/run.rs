//! One entry point for every model: [`fit`] wires a model, its optimizer, the schedule, two batch
//! sources and a hook into Burn's `SupervisedTraining` and launches it with [`StepStrategy`].

use crate::loader::{BatchSource, EpochCursor, SourceLoader};
use crate::optim::TrainOptim;
use crate::renderer::PlainRenderer;
use crate::report::{Reporter, Ui};
use crate::schedule::WarmupCosine;
use crate::strategy::{EpochHook, Scored, StepStrategy};
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

pub use crate::error::TrainError;

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
    /// Start afresh even where `dir` holds another run's checkpoints (which are then removed).
    pub overwrite: bool,
    /// What a resumed run must share with the run it continues (the model's configuration and
    /// the settings that shape its steps), written to `dir/run.json` when a run starts; a
    /// `resume` with other settings is refused, naming them.
    pub settings: serde_json::Value,
    pub report: Reporter,
    /// For the plain renderer's rate line: units per batch and their name.
    pub unit: Option<(f64, String)>,
}

pub use crate::atomic::{AtomicRecorder, hold_the_write_open, write_atomically};

/// What a run's checkpoint directory (`dir/checkpoint`) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkpoints {
    /// No checkpoint file at all.
    None,
    /// The newest epoch whose model, optimizer and scheduler files are all there.
    Complete(usize),
    /// Checkpoint files, but no epoch with all three (their names).
    Broken(Vec<String>),
}

/// The state of the resume checkpoints in the run directory `dir`.
pub fn checkpoints(dir: &Path) -> Checkpoints {
    let ckpt = dir.join("checkpoint");
    let Ok(entries) = std::fs::read_dir(&ckpt) else {
        return Checkpoints::None;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".mpk"))
        .collect();
    names.sort();
    let complete = names
        .iter()
        .filter_map(|n| n.strip_prefix("model-")?.strip_suffix(".mpk")?.parse().ok())
        .filter(|e: &usize| {
            ["optim", "scheduler"]
                .iter()
                .all(|p| ckpt.join(format!("{p}-{e}.mpk")).is_file())
        })
        .max();
    match complete {
        Some(e) => Checkpoints::Complete(e),
        None if names.is_empty() => Checkpoints::None,
        None => Checkpoints::Broken(names),
    }
}

/// What a resumed run must share with the run it continues: `settings` (a run's `training.json`)
/// less what may change between sessions (the backend, the threads a batch is cut across), and
/// the model's configuration under `model`.
pub fn fingerprint(
    settings: &impl serde::Serialize,
    model: &impl serde::Serialize,
) -> serde_json::Value {
    let mut v = serde_json::to_value(settings).expect("settings are JSON");
    if let Some(o) = v.as_object_mut() {
        o.remove("backend");
        o.remove("parts");
        o.insert(
            "model".into(),
            serde_json::to_value(model).expect("a config is JSON"),
        );
    }
    v
}

/// The settings in `saved` that `now` gives another value, as `name: now (saved run: then)`,
/// nested objects' keys joined by dots.
pub fn differences(now: &serde_json::Value, saved: &serde_json::Value) -> Vec<String> {
    fn walk(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(
                        &name,
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("{prefix} {a} (saved run: {b})")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", now, saved, &mut out);
    out
}

/// Gets `run.dir` ready for a run: a resume finds its checkpoint and checks the saved run's
/// settings; a fresh start refuses to bury another run's checkpoints unless told to, and records
/// its own settings. Returns the epoch to resume after, if any.
fn prepare_dir(run: &RunConfig) -> Result<Option<usize>, TrainError> {
    let fail = |path: &Path, problem: String| TrainError::Resume {
        path: path.to_path_buf(),
        problem,
    };
    let record = run.dir.join("run.json");
    let found = checkpoints(&run.dir);
    if run.resume {
        match found {
            Checkpoints::Complete(epoch) => {
                if let Ok(text) = std::fs::read_to_string(&record) {
                    let saved: serde_json::Value = serde_json::from_str(&text)
                        .map_err(|e| fail(&record, format!("not the JSON a run writes ({e})")))?;
                    let diff = differences(&run.settings, &saved);
                    if !diff.is_empty() {
                        return Err(fail(
                            &record,
                            format!(
                                "--resume continues a run with its own settings; these differ: {}",
                                diff.join(", ")
                            ),
                        ));
                    }
                } else {
                    run.report.line(format!(
                        "note: {} has no run.json (a run from before it was written): its settings are not checked",
                        run.dir.display()
                    ));
                }
                if epoch >= run.epochs {
                    // Killed after its last checkpoint (its model saved before it): nothing
                    // is left to train, and the model comes back from the checkpoint.
                    run.report.line(format!(
                        "the run in {} already finished ({epoch} of {} epochs): nothing left to train",
                        run.dir.display(),
                        run.epochs
                    ));
                }
                return Ok(Some(epoch));
            }
            Checkpoints::Broken(names) => {
                // Only the first checkpoint can be caught half-written with no whole one before
                // it (two are kept): nothing was lost but its epoch.
                let ckpt = run.dir.join("checkpoint");
                run.report.line(format!(
                    "no whole checkpoint in {} (a kill inside the first one left {}): starting from the first step",
                    ckpt.display(),
                    names.join(", ")
                ));
                std::fs::remove_dir_all(&ckpt).map_err(|e| {
                    fail(&ckpt, format!("cannot remove the broken checkpoint: {e}"))
                })?;
            }
            Checkpoints::None => run.report.line(format!(
                "nothing to resume in {}: starting from the first step",
                run.dir.display()
            )),
        }
    } else if found != Checkpoints::None {
        if !run.overwrite {
            let what = match &found {
                Checkpoints::Complete(e) => format!("checkpoints of a run (epoch {e})"),
                _ => "checkpoint files".into(),
            };
            return Err(fail(
                &run.dir.join("checkpoint"),
                format!(
                    "holds {what}: continue it with --resume where the model offers it, or pass --overwrite to start afresh"
                ),
            ));
        }
        let ckpt = run.dir.join("checkpoint");
        std::fs::remove_dir_all(&ckpt)
            .map_err(|e| fail(&ckpt, format!("cannot remove the old checkpoints: {e}")))?;
    }
    std::fs::create_dir_all(&run.dir)
        .map_err(|e| fail(&run.dir, format!("cannot create the run directory: {e}")))?;
    let text = serde_json::to_string_pretty(&run.settings).expect("settings are JSON");
    write_atomically(&record, text.as_bytes()).map_err(|e| fail(&record, e.to_string()))?;
    Ok(None)
}

/// What a recorder's error says, in one line: Burn's display is its `Debug` form, and a record
/// cut short comes with a paragraph about a format change in Burn 0.14 that misleads here.
fn unreadable(e: burn::record::RecorderError) -> String {
    use burn::record::RecorderError::*;
    let (FileNotFound(m) | DeserializeError(m) | Unknown(m)) = e;
    let first = m.lines().next().unwrap_or_default();
    format!("cannot be read, damaged or cut short ({first})")
}

/// The weights of the learner checkpoint `file` (`model-E.mpk`) in `model`'s structure, each
/// checked against `model`'s shape: Burn's `load_record` takes a record of another shape without a
/// word, and the model then fails at its first step.
pub fn load_model_record<B, M>(model: &M, file: &Path) -> Result<M, TrainError>
where
    B: burn::prelude::Backend,
    M: burn::module::Module<B>,
{
    use burn::record::Recorder;
    let damaged = |problem: String| TrainError::Resume {
        path: file.to_path_buf(),
        problem,
    };
    let device = model.devices()[0].clone();
    let record = Recorder::<B>::load(&AtomicRecorder::default(), file.to_path_buf(), &device)
        .map_err(|e| damaged(unreadable(e)))?;
    let loaded = model.clone().load_record(record);
    let want = nervus_models::named::shapes(model);
    let got = nervus_models::named::shapes(&loaded);
    if let Some(((name, w), (_, g))) = want.iter().zip(&got).find(|(w, g)| w != g) {
        return Err(damaged(format!(
            "holds {name} of shape {g:?}, where the model's is {w:?}"
        )));
    }
    Ok(loaded)
}

/// Loads the resume checkpoint of `epoch` in `dir` once before Burn does, so that a damaged file
/// (a copy cut short, bytes overwritten in its structure) is an error naming it: Burn's learner panics on
/// a checkpoint it cannot load ("Can load model checkpoint."), and loads a model record of
/// another shape without a word, to fail at the first step.
fn check_checkpoint<B, M>(
    dir: &Path,
    epoch: usize,
    model: &M,
    optim: &TrainOptim<M, B>,
    schedule: &WarmupCosine,
) -> Result<(), TrainError>
where
    B: AutodiffBackend,
    M: burn::module::AutodiffModule<B>,
{
    use burn::lr_scheduler::LrScheduler;
    use burn::optim::Optimizer;
    use burn::record::Recorder;
    let device = model.devices()[0].clone();
    let recorder = AtomicRecorder::default();
    let file = |what: &str| dir.join("checkpoint").join(format!("{what}-{epoch}.mpk"));
    let damaged = |path: PathBuf, problem: String| TrainError::Resume { path, problem };
    load_model_record(model, &file("model"))?;
    let path = file("optim");
    let record = Recorder::<B>::load(&recorder, path.clone(), &device)
        .map_err(|e| damaged(path.clone(), unreadable(e)))?;
    let _ = optim.clone().load_record(record);
    let path = file("scheduler");
    let record = Recorder::<B>::load(&recorder, path.clone(), &device)
        .map_err(|e| damaged(path.clone(), unreadable(e)))?;
    let _ = LrScheduler::load_record::<B>(schedule.clone(), record);
    Ok(())
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
        // Two: the model, optimizer and scheduler files are written and their old ones deleted
        // on three threads, so a kill inside a checkpoint can leave the newest epoch without
        // one of them; the epoch before is whole.
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(2))
        .with_application_logger(None)
        .num_epochs(run.epochs);
    training = metrics(training);
    if run.report.ui() == Ui::Plain {
        let mut r = PlainRenderer::new(run.report.clone(), 30.0);
        r.unit = run.unit.clone();
        training = training.renderer(r);
    }
    if let Some(epoch) = prepare_dir(&run)? {
        check_checkpoint(&run.dir, epoch, &model, &optim, &schedule)?;
        run.report.line(format!(
            "resuming after epoch {epoch} from {}",
            run.dir.display()
        ));
        training = training.checkpoint(epoch);
    }
    let interrupter = training.interrupter();
    let result = training.launch(Learner::new(model, optim, schedule));
    drop(result.renderer);
    run.report.flush();
    if let Some(e) = error.lock().expect("error slot").take() {
        return Err(e);
    }
    // Burn's checkpoint writers stop the run through the interrupter when a write fails.
    if let Some(why) = interrupter.get_message()
        && !crate::strategy::OWN_STOPS.contains(&why.as_str())
    {
        // Burn hands the recorder's error on as `Recorder error: `Unknown("...")``: keep the
        // recorder's own words.
        let inner = why
            .split_once("Unknown(\"")
            .and_then(|(_, rest)| rest.rsplit_once("\")"))
            .map(|(m, _)| m.replace("\\\"", "\""));
        return Err(TrainError::Checkpoint(inner.unwrap_or(why)));
    }
    Ok(result.model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nervus-run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("checkpoint")).unwrap();
        d
    }

    fn touch(dir: &Path, names: &[&str]) {
        for n in names {
            std::fs::write(dir.join("checkpoint").join(n), b"x").unwrap();
        }
    }

    #[test]
    fn the_newest_whole_epoch_is_found_and_a_set_with_none_is_broken() {
        let d = scratch("sets");
        assert_eq!(checkpoints(&d), Checkpoints::None);
        // A kill inside epoch 13's checkpoint: its scheduler file never written.
        touch(&d, &["model-12.mpk", "optim-12.mpk", "scheduler-12.mpk"]);
        touch(&d, &["model-13.mpk", "optim-13.mpk"]);
        assert_eq!(checkpoints(&d), Checkpoints::Complete(12));
        std::fs::remove_file(d.join("checkpoint/model-12.mpk")).unwrap();
        assert_eq!(
            checkpoints(&d),
            Checkpoints::Broken(vec![
                "model-13.mpk".into(),
                "optim-12.mpk".into(),
                "optim-13.mpk".into(),
                "scheduler-12.mpk".into()
            ])
        );
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn differences_name_each_changed_setting_with_its_saved_value() {
        let saved = serde_json::json!({"steps": 6, "model": {"d_model": 8, "heads": 2}, "lr": 0.1});
        let now = serde_json::json!({"steps": 6, "model": {"d_model": 16, "heads": 2}, "lr": 0.2});
        assert_eq!(
            differences(&now, &saved),
            vec!["lr 0.2 (saved run: 0.1)", "model.d_model 16 (saved run: 8)"]
        );
        assert!(differences(&saved, &saved).is_empty());
        let extra = serde_json::json!({"steps": 6, "seed": 1});
        let fewer = serde_json::json!({"steps": 6});
        assert_eq!(
            differences(&extra, &fewer),
            vec!["seed 1 (saved run: null)"]
        );
    }

    /// The write error Burn's own recorder drops (its buffered writer is never flushed by hand)
    /// is seen: here the temporary file is /dev/full.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_that_fails_is_an_error_and_leaves_no_file() {
        let d = scratch("full");
        let target = d.join("model-1.mpk");
        std::os::unix::fs::symlink("/dev/full", d.join("model-1.mpk.partial")).unwrap();
        let err = write_atomically(&target, &[7u8; 100]).unwrap_err();
        assert!(err.to_string().contains("model-1.mpk"), "{err}");
        assert!(!target.exists());
        // Through the recorder the learner uses (the failed write removed the link).
        std::os::unix::fs::symlink("/dev/full", d.join("model-1.mpk.partial")).unwrap();
        let record = burn::record::Recorder::<burn::backend::Flex>::record(
            &AtomicRecorder::default(),
            vec![1.0f32; 64],
            d.join("model-1"),
        );
        assert!(record.is_err(), "{record:?}");
        assert!(!target.exists());
        // And a write that can succeed, does, whole.
        assert!(!d.join("model-1.mpk.partial").exists());
        write_atomically(&target, &[7u8; 100]).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), vec![7u8; 100]);
        let _ = std::fs::remove_dir_all(d);
    }
}
