//! Saving a model directory so that a reader sees the old one or the new one, never half of each.

use crate::atomic::AtomicRecorder;
use burn::module::Module;
use burn::prelude::Backend;
use burn::record::Recorder;
use nervus_models::checkpoint::CheckpointError;
use std::path::{Path, PathBuf};

/// The hidden working names [`replace_dir`] uses beside `dir`: `.NAME.partial-PID` while it is
/// written, `.NAME.new-PID` once whole, `.NAME.old-PID` for the model it replaces.
fn siblings(dir: &Path) -> (PathBuf, String) {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    (parent, name)
}

/// Whether process `pid` is alive (a leftover of a live run is not touched).
fn alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    #[cfg(unix)]
    {
        // kill(pid, 0) probes without signalling; EPERM means it exists under another user.
        // SAFETY: no signal is sent; the call only reads the process table.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        // No cheap probe: leave every working copy alone.
        true
    }
}

/// Puts a model directory back where a run killed inside [`replace_dir`]'s two renames left it
/// missing: the whole new one if it got that far, else the old one. Then removes the working
/// copies of runs that are no longer alive. Returns what it restored, if anything.
pub fn recover_dir(dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    let (parent, name) = siblings(dir);
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return Ok(None);
    };
    // (kind rank, modified, path, pid): a whole new copy first, then the old model.
    let mut found: Vec<(u8, std::time::SystemTime, PathBuf, u32)> = Vec::new();
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&format!(".{name}.")) else {
            continue;
        };
        let Some((kind, pid)) = rest.split_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let rank = match kind {
            "new" => 0,
            "old" => 1,
            "partial" => 2,
            _ => continue,
        };
        if alive(pid) {
            continue;
        }
        let modified = e
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        found.push((rank, modified, e.path(), pid));
    }
    // Best first: lowest rank, then newest.
    found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut restored = None;
    if !dir.exists()
        && let Some((_, _, from, _)) = found.iter().find(|f| f.0 < 2)
    {
        std::fs::rename(from, dir).map_err(|e| CheckpointError::io(from, e))?;
        restored = Some(from.clone());
    }
    for (_, _, path, _) in &found {
        if Some(path) != restored.as_ref() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
    Ok(restored)
}

/// Writes a fresh directory beside `dir` with `write`, then swaps it into `dir`'s place (the old
/// one is moved aside first and removed last). A failure while writing leaves `dir` untouched; a
/// kill between the renames leaves both copies, which [`recover_dir`] (run by the next save or
/// load) puts back.
pub fn replace_dir(
    dir: &Path,
    write: impl FnOnce(&Path) -> Result<(), CheckpointError>,
) -> Result<(), CheckpointError> {
    recover_dir(dir)?;
    let (parent, name) = siblings(dir);
    std::fs::create_dir_all(&parent).map_err(|e| CheckpointError::io(&parent, e))?;
    let pid = std::process::id();
    let staging = parent.join(format!(".{name}.partial-{pid}"));
    let whole = parent.join(format!(".{name}.new-{pid}"));
    let old = parent.join(format!(".{name}.old-{pid}"));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(e) = write(&staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    crate::atomic::hold_the_write_open();
    std::fs::rename(&staging, &whole).map_err(|e| CheckpointError::io(&whole, e))?;
    if dir.exists() {
        std::fs::rename(dir, &old).map_err(|e| CheckpointError::io(dir, e))?;
    }
    crate::atomic::hold_the_write_open();
    std::fs::rename(&whole, dir).map_err(|e| CheckpointError::io(dir, e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Why a run may not write where it was asked to.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct Occupied {
    pub path: PathBuf,
    pub problem: String,
}

/// A fresh run must not bury a model already saved at `save` (it would replace it at its first
/// checkpoint, better or not): refused unless `overwrite`. A continuation of `save` itself
/// (`continued_from`) and a resumed run only ever replace it with a better model, and pass.
pub fn check_fresh_save(
    save: &Path,
    continued_from: Option<&Path>,
    resume: bool,
    overwrite: bool,
) -> Result<(), Occupied> {
    recover_dir(save).map_err(|e| Occupied {
        path: save.to_path_buf(),
        problem: e.to_string(),
    })?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    };
    if resume || overwrite || continued_from.is_some_and(|c| same(c, save)) {
        return Ok(());
    }
    let occupied = if save.is_dir() {
        std::fs::read_dir(save)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    } else {
        save.exists()
    };
    if !occupied {
        return Ok(());
    }
    let figures = std::fs::read_to_string(save.join("training.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|v| {
            let loss = ["valid_loss", "validation_loss"]
                .iter()
                .find_map(|k| v.get(*k)?.as_f64());
            match (loss, v.get("step").and_then(|s| s.as_u64())) {
                (Some(l), Some(s)) => format!(" (validation loss {l:.4} at step {s})"),
                (Some(l), None) => format!(" (validation loss {l:.4})"),
                _ => String::new(),
            }
        })
        .unwrap_or_default();
    Err(Occupied {
        path: save.to_path_buf(),
        problem: format!(
            "already holds a model{figures}, which a fresh run would replace: pass --overwrite, \
             choose another --save, or continue it with --load"
        ),
    })
}

/// Where a run may save, and what a checkpoint must beat to replace the model there: a fresh
/// run is refused over a saved model unless `overwrite` ([`check_fresh_save`]); a resumed run
/// must beat the validation loss the model saved before it was killed (its `training.json`),
/// anything else beats infinity.
pub fn claim_save(
    save: Option<&Path>,
    continued_from: Option<&Path>,
    resume: bool,
    overwrite: bool,
) -> Result<f64, Occupied> {
    let Some(save) = save else {
        return Ok(f64::INFINITY);
    };
    check_fresh_save(save, continued_from, resume, overwrite)?;
    let saved = || -> Option<f64> {
        let text = std::fs::read_to_string(save.join("training.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()?
            .get("valid_loss")?
            .as_f64()
    };
    Ok(if resume { saved() } else { None }.unwrap_or(f64::INFINITY))
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

/// The mean, weight by weight, of the learner's checkpoint files `files` (`model-N.mpk`, written
/// by a run of `model`'s architecture), put into `model`. Averaging the last checkpoints of a run
/// (Polyak averaging) takes out the step-to-step noise of the weights, which a model's samples
/// show and its loss hides. A missing file, a file of another architecture (a name or a shape
/// that differs) and a non-finite mean are errors naming the file.
pub fn average_checkpoints<B: Backend, M: Module<B>>(
    model: M,
    files: &[PathBuf],
    device: &B::Device,
) -> Result<M, CheckpointError> {
    let Some(first) = files.first() else {
        return Err(CheckpointError::format(
            "(no files)",
            "averaging needs at least one checkpoint file",
        ));
    };
    let expected = nervus_models::named::export(&model);
    let mut sums: Vec<Vec<f64>> = expected.iter().map(|t| vec![0.0; t.data.len()]).collect();
    for file in files {
        if !file.is_file() {
            return Err(CheckpointError::io(
                file,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such checkpoint file"),
            ));
        }
        let record = Recorder::<B>::load(&AtomicRecorder::default(), file.clone(), device)
            .map_err(|e| CheckpointError::format(file, e.to_string()))?;
        let tensors = nervus_models::named::export(&model.clone().load_record(record));
        // Same module, so the same names in the same order; a record of another width changes shapes.
        for ((want, got), sum) in expected.iter().zip(tensors).zip(sums.iter_mut()) {
            if want.shape != got.shape {
                return Err(CheckpointError::Shape {
                    file: file.clone(),
                    name: got.name,
                    expected: want.shape.clone(),
                    got: got.shape,
                });
            }
            for (s, v) in sum.iter_mut().zip(got.data) {
                *s += f64::from(v);
            }
        }
    }
    let n = files.len() as f64;
    let mut mean = std::collections::HashMap::new();
    for (want, sum) in expected.into_iter().zip(sums) {
        let data: Vec<f32> = sum.into_iter().map(|s| (s / n) as f32).collect();
        if data.iter().any(|v| !v.is_finite()) {
            return Err(CheckpointError::format(
                first,
                format!(
                    "the mean of tensor `{}` over the {} files is not finite (a diverged checkpoint among them)",
                    want.name,
                    files.len()
                ),
            ));
        }
        mean.insert(
            want.name.clone(),
            nervus_models::checkpoint::NamedTensor::new(want.name, want.shape, data),
        );
    }
    nervus_models::named::import(model, mean, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::record::FileRecorder;
    use burn::tensor::{Tensor, TensorData};

    type NB = burn_ndarray::NdArray<f32>;

    #[derive(Module, Debug)]
    struct Two<B: Backend> {
        a: Linear<B>,
        b: Linear<B>,
    }

    fn two(width: usize, seed: u64) -> Two<NB> {
        let dev = Default::default();
        <NB as Backend>::seed(&dev, seed);
        let m = Two {
            a: LinearConfig::new(3, width).init(&dev),
            b: LinearConfig::new(width, 2).init(&dev),
        };
        // Burn's parameters are drawn on first use, and a clone of an undrawn one draws its own:
        // draw them now, under this seed.
        values(&m);
        m
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("nervus-average-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn save(model: &Two<NB>, file: &Path) -> PathBuf {
        Recorder::<NB>::record(
            &AtomicRecorder::default(),
            model.clone().into_record(),
            file.into(),
        )
        .unwrap();
        file.with_extension(<AtomicRecorder as FileRecorder<NB>>::file_extension())
    }

    fn values(m: &Two<NB>) -> Vec<f32> {
        nervus_models::named::export(m)
            .into_iter()
            .flat_map(|t| t.data)
            .collect()
    }

    #[test]
    fn the_average_of_three_checkpoints_is_their_mean_weight_by_weight() {
        let dir = scratch("mean");
        let models = [two(4, 1), two(4, 2), two(4, 3)];
        let files: Vec<PathBuf> = models
            .iter()
            .enumerate()
            .map(|(i, m)| save(m, &dir.join(format!("model-{i}"))))
            .collect();
        // The base model's own weights must play no part.
        let avg = average_checkpoints(two(4, 99), &files, &Default::default()).unwrap();
        let v: Vec<Vec<f32>> = models.iter().map(values).collect();
        let got = values(&avg);
        assert_eq!(got.len(), v[0].len());
        assert!(v[0] != v[1], "the seeds must give different models");
        for (i, g) in got.iter().enumerate() {
            let want = (v[0][i] + v[1][i] + v[2][i]) / 3.0;
            assert!((g - want).abs() <= 1e-6, "weight {i}: {g} vs {want}");
        }
        // One file is that file.
        let one = average_checkpoints(two(4, 99), &files[1..2], &Default::default()).unwrap();
        assert_eq!(values(&one), v[1]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_checkpoint_of_another_shape_or_a_missing_one_is_an_error_naming_it() {
        let dir = scratch("bad");
        let good = save(&two(4, 1), &dir.join("model-1"));
        let wide = save(&two(5, 2), &dir.join("model-2"));
        let err = average_checkpoints(
            two(4, 9),
            &[good.clone(), wide.clone()],
            &Default::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Shape { file, name, .. } if file == &wide && name == "a.weight"),
            "{err}"
        );
        let gone = dir.join("model-3.mpk");
        let err =
            average_checkpoints(two(4, 9), &[good, gone.clone()], &Default::default()).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Io { file, .. } if file == &gone),
            "{err}"
        );
        assert!(average_checkpoints(two(4, 9), &[], &Default::default()).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_non_finite_weight_in_any_checkpoint_is_an_error() {
        let dir = scratch("nan");
        let mut bad = two(4, 2);
        let w = bad.a.weight.val();
        let mut data: Vec<f32> = w.to_data().to_vec().unwrap();
        data[5] = f32::NAN;
        bad.a.weight = burn::module::Param::from_tensor(Tensor::from_data(
            TensorData::new(data, w.dims()),
            &Default::default(),
        ));
        let files = [
            save(&two(4, 1), &dir.join("model-1")),
            save(&bad, &dir.join("model-2")),
        ];
        let err = average_checkpoints(two(4, 9), &files, &Default::default()).unwrap_err();
        assert!(err.to_string().contains("a.weight"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn model_dir(at: &Path, marker: &str) {
        std::fs::create_dir_all(at).unwrap();
        std::fs::write(at.join("marker"), marker).unwrap();
    }

    fn marker(at: &Path) -> String {
        std::fs::read_to_string(at.join("marker")).unwrap()
    }

    /// A pid no process has (above Linux's largest).
    const DEAD: u32 = 4_194_399;

    #[test]
    fn a_kill_between_the_renames_is_undone_by_the_next_save_or_load() {
        let dir = scratch("recover");
        let model = dir.join("model");
        // Killed after the old model was moved aside, before the new one took its place.
        model_dir(&dir.join(format!(".model.old-{DEAD}")), "old");
        model_dir(&dir.join(format!(".model.new-{DEAD}")), "new");
        model_dir(&dir.join(format!(".model.partial-{DEAD}")), "half");
        assert!(recover_dir(&model).unwrap().is_some());
        assert_eq!(marker(&model), "new", "the whole new model wins");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("model")],
            "working copies removed"
        );

        // Killed before the new copy was whole: the old model comes back.
        std::fs::remove_dir_all(&model).unwrap();
        model_dir(&dir.join(format!(".model.old-{DEAD}")), "old");
        model_dir(&dir.join(format!(".model.partial-{DEAD}")), "half");
        check_fresh_save(&model, None, false, true).unwrap();
        assert_eq!(marker(&model), "old");

        // A live run's working copies are left alone.
        let mine = dir.join(format!(".model.partial-{}", std::process::id()));
        model_dir(&mine, "mine");
        assert!(recover_dir(&model).unwrap().is_none());
        assert!(mine.exists());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_fresh_save_over_a_model_is_refused_naming_its_figures() {
        let dir = scratch("occupied");
        let model = dir.join("model");
        check_fresh_save(&model, None, false, false).unwrap();
        std::fs::create_dir_all(&model).unwrap();
        check_fresh_save(&model, None, false, false).unwrap();
        std::fs::write(
            model.join("training.json"),
            r#"{"valid_loss": 2.4712, "step": 500}"#,
        )
        .unwrap();
        let err = check_fresh_save(&model, None, false, false).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("validation loss 2.4712 at step 500"), "{msg}");
        assert!(msg.contains("--overwrite"), "{msg}");
        check_fresh_save(&model, None, false, true).unwrap();
        check_fresh_save(&model, None, true, false).unwrap();
        check_fresh_save(&model, Some(&model), false, false).unwrap();
        let elsewhere = dir.join("other");
        assert!(check_fresh_save(&model, Some(&elsewhere), false, false).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
