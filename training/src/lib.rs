//! The one training path every model here uses, built on burn-train's learner: batch sources
//! addressed by position, the warm-up + cosine schedule, SGD and matrices-only AdamW behind
//! global-norm clipping, a strategy with averaging accumulation and per-epoch hooks, atomic
//! checkpoints, and plain or TUI output. Model-specific glue (what a batch is, what to print and
//! save after an epoch) lives in one module per model.

pub mod alloc;
pub mod atomic;
pub mod backend;
pub mod backend_check;
pub mod bench;
pub mod checkpoint;
pub mod checks;
// Not in this crate's unit-test build, which does not use it (see the module's text).
#[cfg(not(test))]
pub mod chosen;
pub mod dit;
pub mod error;
pub mod experiment;
pub mod gpt;
pub mod lm;
pub mod loader;
pub mod mnist;
pub mod muon;
// Runs on the chosen backend ([`chosen`]): not in the unit-test build either.
#[cfg(not(test))]
pub mod named;
pub mod optim;
pub mod options;
pub mod renderer;
pub mod report;
pub mod run;
pub mod schedule;
pub mod shard;
pub mod strategy;
pub mod video;
