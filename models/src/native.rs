//! nervus's own checkpoint layout for any [`Gpt`], modern options included: `model.safetensors`
//! with every parameter under its Burn path in Burn's layout (Linear weights `[in, out]`), and
//! `config.json` holding the [`GptConfig`] itself under a format tag. GPT-2-shaped models can
//! also be written in transformers' layout ([`crate::gpt2`]); this one covers what GPT-2's does
//! not (RMSNorm, rotary positions, SwiGLU, QK-norm, soft-capping, grouped-query attention).

use crate::checkpoint::{CheckpointError, TensorFile, read_json, write_json, write_safetensors};
use crate::gpt::{Gpt, GptConfig};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The tag in `config.json` that says which layout the directory holds.
pub const FORMAT: &str = "nervus-gpt-1";

#[derive(Serialize, Deserialize)]
struct NativeConfig {
    format: String,
    config: GptConfig,
}

/// Writes `config.json` and `model.safetensors` into `dir` (each atomically).
pub fn save<B: Backend>(model: &Gpt<B>, dir: &Path) -> Result<(), CheckpointError> {
    let tensors = crate::named::export(model);
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), FORMAT.to_string());
    write_safetensors(&dir.join("model.safetensors"), &tensors, Some(meta))?;
    write_json(
        &dir.join("config.json"),
        &NativeConfig {
            format: FORMAT.to_string(),
            config: model.config.clone(),
        },
    )
}

/// Whether `dir` holds this layout (rather than, say, a GPT-2 directory).
pub fn is_native(dir: &Path) -> bool {
    read_json::<NativeConfig>(&dir.join("config.json")).is_ok_and(|c| c.format == FORMAT)
}

/// Reads a directory written by [`save`]; a missing, extra or misshapen tensor is an error naming
/// the file and the tensor.
pub fn load<B: Backend>(dir: &Path, device: &B::Device) -> Result<Gpt<B>, CheckpointError> {
    let config_path = dir.join("config.json");
    let native: NativeConfig = read_json(&config_path)?;
    if native.format != FORMAT {
        return Err(CheckpointError::format(
            &config_path,
            format!(
                "format `{}` is not the one this version reads (`{FORMAT}`)",
                native.format
            ),
        ));
    }
    native
        .config
        .check()
        .map_err(|e| CheckpointError::format(&config_path, e.to_string()))?;
    let file = TensorFile::read(&dir.join("model.safetensors"))?;
    let model = native.config.init::<B>(device);
    crate::named::import(model, file.tensors, &file.path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpt::GptConfig;
    use crate::testing::{TB, to_vec};

    fn modern() -> GptConfig {
        GptConfig::new(50)
            .with_context(16)
            .with_d_model(32)
            .with_heads(4)
            .with_kv_heads(Some(2))
            .modern()
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("nervus-native-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_modern_model_saves_and_loads_to_the_same_logits() {
        let dev = Default::default();
        let dir = scratch("roundtrip");
        // The test backend is f64 and files hold f32: the first save rounds the weights, after
        // which a save → load must change nothing at all.
        save(&modern().init::<TB>(&dev), &dir).unwrap();
        let model = load::<TB>(&dir, &dev).unwrap();
        save(&model, &dir).unwrap();
        assert!(is_native(&dir));
        let back = load::<TB>(&dir, &dev).unwrap();
        assert_eq!(back.config, model.config);
        let ids = Tensor::<TB, 2, Int>::from_data([[1, 7, 3, 49, 0, 12]], &dev);
        let a = to_vec(model.forward(ids.clone()));
        let b = to_vec(back.forward(ids));
        assert!(a.iter().all(|v| v.is_finite()));
        assert_eq!(a, b);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_checkpoint_for_another_shape_is_refused_naming_the_tensor() {
        let dev = Default::default();
        let dir = scratch("shape");
        save(&modern().init::<TB>(&dev), &dir).unwrap();
        // Same config file, tensors of a wider model: every shape differs.
        let wider = modern().with_d_model(64).init::<TB>(&dev);
        write_safetensors(
            &dir.join("model.safetensors"),
            &crate::named::export(&wider),
            None,
        )
        .unwrap();
        let e = load::<TB>(&dir, &dev).unwrap_err().to_string();
        assert!(e.contains("model.safetensors"), "{e}");
        assert!(e.contains("shape") || e.contains("expected"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Only a directory written by `save` counts as this layout: not a GPT-2 directory, not an
    /// empty one; and a config under another format tag is refused by `load`, naming the tag.
    #[test]
    fn only_this_layout_is_native_and_another_format_is_refused() {
        let dev = Default::default();
        let dir = scratch("formats");
        assert!(!is_native(&dir), "an empty directory");
        let gpt2_shaped = GptConfig::new(11)
            .with_context(8)
            .with_d_model(16)
            .with_heads(2);
        crate::gpt2::save(&gpt2_shaped.init::<TB>(&dev), &dir).unwrap();
        assert!(!is_native(&dir), "a GPT-2 directory");
        save(&modern().init::<TB>(&dev), &dir).unwrap();
        assert!(is_native(&dir));
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(FORMAT, "nervus-gpt-0")).unwrap();
        assert!(!is_native(&dir));
        let e = load::<TB>(&dir, &dev).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("`nervus-gpt-0`"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
