//! Saving a model directory so that a reader sees the old one or the new one, never half of each.

use crate::run::AtomicRecorder;
use burn::module::Module;
use burn::prelude::Backend;
use burn::record::Recorder;
use nervus_models::checkpoint::CheckpointError;
use std::path::{Path, PathBuf};

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
}
