//! Why a run stopped without finishing: one error type for the whole training path.

use std::path::PathBuf;

/// Why a run stopped without finishing.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{0}")]
    Hook(String),
    #[error("{path}: {problem}")]
    Resume { path: PathBuf, problem: String },
    #[error(transparent)]
    Occupied(#[from] crate::checkpoint::Occupied),
    #[error(transparent)]
    BadValue(#[from] crate::checks::BadValue),
    #[error(transparent)]
    Config(#[from] nervus_models::gpt::ConfigError),
    #[error(transparent)]
    Draw(#[from] nervus_inference::drawing::DrawSettingsError),
    #[error(transparent)]
    Data(#[from] nervus_datasets::DataError),
    /// Any other error of the data, shown as it is (a text too short for the context).
    #[error(transparent)]
    Input(Box<dyn std::error::Error + Send + Sync>),
    /// A shape flag given with `--load`.
    #[error("{0} cannot change a model given with --load: its shape comes from its directory")]
    ShapeWithLoad(&'static str),
    /// `--steps 0`, which uses a saved model, without one: what it would do and with what.
    #[error("--steps 0 means \"just {0}\": give a {1} with --load DIR")]
    NothingLoaded(&'static str, &'static str),
    /// Something the run reads could not be used: a saved model, a judge, data.
    #[error("{what}: {source}")]
    Read {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A checkpoint could not be written (a full disk, a directory that went away): the run
    /// stopped there; what was saved before is unchanged.
    #[error("training stopped: a checkpoint could not be written: {0}")]
    Checkpoint(String),
    /// The training or validation loss became NaN or infinite: the run stopped at that epoch's
    /// end. An outcome an experiment records (a learning rate too high), not a broken run.
    #[error(
        "training diverged by step {step}: training loss {train:.4}, validation loss {valid:.4}; \
         stopped; the best model and the last checkpoint saved so far are unchanged"
    )]
    Diverged { step: usize, train: f64, valid: f64 },
}

impl TrainError {
    /// Refuses any shape flag given (`Some`) beside `--load`: a loaded model keeps its shape.
    pub fn refuse_shape_with_load(flags: &[(&'static str, Option<usize>)]) -> Result<(), Self> {
        match flags.iter().find(|(_, given)| given.is_some()) {
            Some(&(flag, _)) => Err(Self::ShapeWithLoad(flag)),
            None => Ok(()),
        }
    }

    /// A [`TrainError::Read`] of `what` (a file or directory named in it) that failed with
    /// `source`.
    pub fn read(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Read {
            what: what.into(),
            source: source.into(),
        }
    }
}
