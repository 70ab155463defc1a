//! Each model's run on the backend the cargo features chose ([`crate::backend`]), as functions
//! that are not generic: the examples call these, so the training path (the learner, the model,
//! the fused ops, all instantiated for one backend) is compiled once, in this crate. Called
//! generically, each example binary compiled its own copy: 70–90 s of a release build per example,
//! and CI's time is compile time.
//!
//! This module is left out of this crate's own unit-test build, which does not use it, so that
//! build does not compile the training path a second time.

use crate::backend::{Infer, Train, device};
#[cfg(feature = "flex")]
use crate::backend_check::{self, CheckOptions, Trace};
use crate::dit::{DitReport, DitRun};
use crate::gpt::{GptOutcome, GptRun};
use crate::lm::{LmError, LmOutcome, LmRun};
use crate::mnist::{MnistOptions, MnistReport};
use crate::report::Reporter;
use crate::run::TrainError;
use crate::video::draw::{DrawOptions, Drawn};
use crate::video::{VideoReport, VideoRun};
use nervus_datasets::mnist::{Mnist, Split};
#[cfg(feature = "flex")]
use nervus_datasets::moving::Clips;
use nervus_models::mlp::Mlp;
use std::sync::Arc;

/// [`crate::gpt::run`] on the chosen backend.
pub fn gpt(spec: &GptRun, report: &Reporter) -> Result<GptOutcome, TrainError> {
    crate::gpt::run::<Train>(spec, report, &device())
}

/// [`crate::lm::run`] on the chosen backend.
pub fn lm(spec: &LmRun, report: &Reporter) -> Result<LmOutcome, LmError> {
    crate::lm::run::<Train>(spec, report, &device())
}

/// [`crate::dit::run`] on the chosen backend.
pub fn dit(spec: &DitRun, report: &Reporter) -> Result<Option<DitReport>, TrainError> {
    crate::dit::run::<Train>(spec, report, &device())
}

/// [`crate::video::run`] on the chosen backend.
pub fn video(spec: &VideoRun, report: Reporter) -> Result<VideoReport, TrainError> {
    crate::video::run::<Train>(spec, report, &device())
}

/// [`crate::video::draw::draw_saved`] on the chosen backend.
pub fn video_draw(
    opts: &DrawOptions,
    data: &Mnist,
    report: &Reporter,
) -> Result<Drawn, TrainError> {
    crate::video::draw::draw_saved::<Train>(opts, data, report, &device())
}

/// [`crate::mnist::train`] on the chosen backend.
pub fn mnist(
    opts: &MnistOptions,
    train: Arc<Split>,
    test: Arc<Split>,
    report: Reporter,
) -> Result<(Mlp<Infer>, MnistReport), TrainError> {
    crate::mnist::train::<Train>(opts, train, test, report, &device())
}

/// The backend check's two runs from the same start: the reference on flex and the tested one on
/// the chosen backend (the same backend again when that is flex).
#[cfg(feature = "flex")]
pub fn backend_check(opts: &CheckOptions, clips: Arc<Clips>) -> Result<(Trace, Trace), String> {
    use burn::backend::{Autodiff, Flex};
    let cpu = Default::default();
    let weights = backend_check::initial_weights::<Autodiff<Flex>>(opts, &cpu);
    let reference =
        backend_check::trace::<Autodiff<Flex>>(opts, &weights, clips.clone(), "flex", &cpu)?;
    let tested =
        backend_check::trace::<Train>(opts, &weights, clips, crate::backend::NAME, &device())?;
    Ok((reference, tested))
}
