//! Training under a name, into the engine's model home (`engine train`): the gpt example's run
//! ([`crate::gpt::run`]) with its directories chosen by name.
//!
//! `--name NAME` saves into `models/NAME`; `--from NAME` starts from that model (scored on the new
//! text first, and replaced only by a better one) and saves over it unless `--name` says
//! otherwise. Burn's checkpoints go to `runs/NAME`. A continuation or `--overwrite` moves the last
//! run's checkpoints to `runs/NAME.previous` (one generation kept) rather than refuse to bury
//! them, so `train --from` can follow a finished run; a fresh `--name` over a killed run's
//! checkpoints is refused by name, as the gpt example's is (`--resume` continues it).

use crate::error::TrainError;
use crate::gpt::{GptOutcome, GptRun};
use crate::options::RunArgs;
use crate::report::{Reporter, Ui};
use nervus_inference::engine::store::Store;
use nervus_inference::generate::SampleOptions;
use std::path::PathBuf;

/// What `engine train` was asked.
pub struct NamedTrain {
    /// The UTF-8 text to train on.
    pub data: PathBuf,
    /// The model's name (default: `from`).
    pub name: Option<String>,
    /// The trained model to continue.
    pub from: Option<String>,
    /// The size preset of a fresh model.
    pub size: String,
    /// The run flags every example shares (`--save` and `--load` are set from the names).
    pub flags: RunArgs,
}

/// Trains as `spec` says; returns the model's directory and what the run did.
pub fn train(store: &Store, spec: NamedTrain) -> Result<(PathBuf, GptOutcome), TrainError> {
    let store_err = |e: nervus_inference::engine::store::StoreError| TrainError::Input(Box::new(e));
    let name = spec
        .name
        .clone()
        .or(spec.from.clone())
        .ok_or_else(|| TrainError::Hook("train needs --name NAME or --from NAME".into()))?;
    let mut flags = spec.flags;
    let save = store.trained(&name).map_err(store_err)?;
    flags.save = Some(save.clone());
    flags.load = match &spec.from {
        Some(f) => Some(store.trained(f).map_err(store_err)?),
        None => None,
    };
    let runs = store.root.join("runs");
    let run_dir = runs.join(&name);
    let mut moved = None;
    if !flags.resume && (spec.from.is_some() || flags.overwrite) && run_dir.exists() {
        let previous = runs.join(format!("{name}.previous"));
        let _ = std::fs::remove_dir_all(&previous);
        std::fs::rename(&run_dir, &previous).map_err(|e| TrainError::Resume {
            path: run_dir.clone(),
            problem: format!("cannot move the last run's checkpoints aside: {e}"),
        })?;
        moved = Some(previous);
    }
    // After the move: the log goes into the new run's directory.
    let report = Reporter::new(
        Ui::plain_or_auto(flags.plain),
        Some(run_dir.join("log.txt")),
    );
    if let Some(previous) = moved {
        report.line(format!(
            "the last run's checkpoints: {}",
            previous.display()
        ));
    }
    let mut run = flags.options(run_dir)?;
    run.save = flags.save.clone();
    let gpt = GptRun {
        run,
        size: spec.size,
        layers: None,
        heads: None,
        d_model: None,
        context: None,
        eval_windows: None,
        sample: SampleOptions {
            length: 200,
            temperature: 0.8,
            top_k: None,
        },
        prompt: String::new(),
        download: None,
        data: Some(spec.data),
    };
    let outcome = crate::chosen::gpt(&gpt, &report)?;
    Ok((save, outcome))
}
