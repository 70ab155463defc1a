//! The training crate's integration tests, one binary: every file here links the same Burn code
//! and the whole training path, and one binary compiles them once (a binary per file took most
//! of CI's time, each instantiating Burn's generics anew). `lm_bf16.rs` stays apart: it sets
//! flex's float type to bf16, which a device takes once per process, before its first use.
//!
//! Run one file's tests with a filter: `cargo test --release -p nervus-training --test suite
//! optim_parity`.

mod backend_check;
mod engine_journey;
mod gpt_training;
mod lm_training;
mod optim_parity;
mod safekeeping;
mod shard;
mod video_training;

use std::path::PathBuf;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Burn draws initial weights from one process-wide generator, and lazily, at a parameter's
/// first use, while the tests run on parallel threads: a test that needs the same weights on
/// every run makes its model, and touches every parameter, while it holds this lock.
pub static INIT: Mutex<()> = Mutex::new(());

/// Taken by the tests in `shard.rs` that compare gradients, for their whole length: Burn 0.21 ends
/// each backward pass by sweeping every graph in the process, which can cost a graph another
/// test is still building part of its gradient (burn#5573, the race `shard::step` keeps its own
/// parts out of), so those tests run with no other test beside them.
static ALONE: RwLock<()> = RwLock::new(());

/// No other test runs while the guard lives (see [`ALONE`]).
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    ALONE.write().unwrap_or_else(|e| e.into_inner())
}

/// Taken by every other test for its whole length: any number of them run side by side, but
/// never beside a test holding [`alone`].
pub fn beside_others() -> RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|e| e.into_inner())
}

/// A scratch directory `nervus-<name>-<pid>` under the temporary directory, emptied (not made).
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nervus-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
