//! Saving a model directory so that a reader sees the old one or the new one, never half of each.

use nervus_models::checkpoint::CheckpointError;
use std::path::Path;

/// Writes a fresh directory beside `dir` with `write`, then swaps it into `dir`'s place (the old
/// one is moved aside first and removed last). A failure while writing leaves `dir` untouched.
pub fn replace_dir(
    dir: &Path,
    write: impl FnOnce(&Path) -> Result<(), CheckpointError>,
) -> Result<(), CheckpointError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| CheckpointError::io(parent, e))?;
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(e) = write(&staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if dir.exists() {
        std::fs::rename(dir, &old).map_err(|e| CheckpointError::io(dir, e))?;
    }
    std::fs::rename(&staging, dir).map_err(|e| CheckpointError::io(dir, e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// A model directory's tokenizer must have one token per row of the model's embedding.
pub fn check_vocab(
    tokenizer_file: &Path,
    tokens: usize,
    rows: usize,
) -> Result<(), CheckpointError> {
    if tokens == rows {
        return Ok(());
    }
    Err(CheckpointError::format(
        tokenizer_file,
        format!("{tokens} tokens, but the model has {rows} rows"),
    ))
}

/// A model directory's `training.json`, if it has one.
pub fn read_settings<T: serde::de::DeserializeOwned>(
    dir: &Path,
) -> Result<Option<T>, CheckpointError> {
    let path = dir.join("training.json");
    if path.exists() {
        nervus_models::checkpoint::read_json(&path).map(Some)
    } else {
        Ok(None)
    }
}
