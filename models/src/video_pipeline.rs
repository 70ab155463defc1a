//! The video DiT's pipeline directory. diffusers has no class for a DiT over clips, so the
//! directory is our own, laid out as diffusers lays out a pipeline: `model_index.json`,
//! `transformer/config.json` (the [`VideoDitConfig`] fields and a class name),
//! `transformer/diffusion_pytorch_model.safetensors` with the image model's tensor names and
//! layouts ([`crate::diffusers::write_weights`]), and the flow-matching scheduler's config.

use crate::checkpoint::{CheckpointError, read_json, write_json};
use crate::diffusers::{read_weights, write_weights};
use crate::video_dit::{VideoDit, VideoDitConfig};
use burn::prelude::*;
use std::path::Path;

/// `_class_name` of the transformer's config.
pub const CLASS: &str = "NervusVideoDiTTransformerModel";

/// Writes the pipeline into `dir` (which must be fresh or replaceable: callers stage it).
pub fn save_pipeline<B: Backend>(model: &VideoDit<B>, dir: &Path) -> Result<(), CheckpointError> {
    let t = dir.join("transformer");
    write_weights(
        model,
        model.config.patch_shape(),
        &t.join("diffusion_pytorch_model.safetensors"),
    )?;
    let mut config = serde_json::to_value(&model.config)
        .map_err(|e| CheckpointError::format(t.join("config.json"), e.to_string()))?;
    config["_class_name"] = CLASS.into();
    write_json(&t.join("config.json"), &config)?;
    write_json(
        &dir.join("model_index.json"),
        &serde_json::json!({
            "_class_name": "NervusVideoDiTPipeline",
            "transformer": ["nervus", CLASS],
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
            "frames": model.config.frames,
            "labels_per_clip": 2
        }),
    )?;
    write_json(
        &dir.join("scheduler/scheduler_config.json"),
        &serde_json::json!({
            "_class_name": "FlowMatchEulerDiscreteScheduler",
            "num_train_timesteps": 1000,
            "shift": 1.0,
            "use_dynamic_shifting": false
        }),
    )
}

/// Reads a pipeline written by [`save_pipeline`].
pub fn load_pipeline<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<VideoDit<B>, CheckpointError> {
    let t = dir.join("transformer");
    let path = t.join("config.json");
    let mut value: serde_json::Value = read_json(&path)?;
    let class = value
        .get("_class_name")
        .and_then(|v| v.as_str())
        .unwrap_or("(none)")
        .to_string();
    if class != CLASS {
        return Err(CheckpointError::format(
            path,
            format!("this is a {class}, not a nervus video DiT ({CLASS})"),
        ));
    }
    if let Some(o) = value.as_object_mut() {
        o.remove("_class_name");
    }
    let config: VideoDitConfig = serde_json::from_value(value)
        .map_err(|e| CheckpointError::format(path.clone(), e.to_string()))?;
    if config.d_model() == 0 || !config.sample_size.is_multiple_of(config.patch_size.max(1)) {
        return Err(CheckpointError::format(
            path,
            "the config describes no model (zero width, or a patch that does not divide the frame)",
        ));
    }
    read_weights(
        config.init::<B>(device),
        config.patch_shape(),
        &t.join("diffusion_pytorch_model.safetensors"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TB, to_vec};
    use crate::video_dit::Attention;
    use burn::tensor::Distribution;

    #[test]
    fn a_saved_pipeline_loads_back_with_identical_output() {
        let dev = Default::default();
        let config = VideoDitConfig::new()
            .with_frames(2)
            .with_sample_size(8)
            .with_num_layers(2)
            .with_num_attention_heads(2)
            .with_attention_head_dim(4)
            .with_attention(Attention::Full);
        let model = config.init::<TB>(&dev);
        // Move the zero-initialised maps so the output is not trivially zero.
        let model = crate::named::import(
            model.clone(),
            crate::named::export(&model)
                .into_iter()
                .map(|mut t| {
                    for (k, v) in t.data.iter_mut().enumerate() {
                        *v += ((k as f32) * 0.7).sin() * 0.3;
                    }
                    (t.name.clone(), t)
                })
                .collect(),
            Path::new("test"),
        )
        .expect("import");
        let dir = std::env::temp_dir().join(format!("nervus-video-pipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        save_pipeline(&model, &dir).expect("save");
        let back = load_pipeline::<TB>(&dir, &dev).expect("load");
        assert_eq!(back.config, config);
        let x = Tensor::<TB, 5>::random([1, 2, 1, 8, 8], Distribution::Normal(0.0, 1.0), &dev);
        let t = Tensor::<TB, 1>::from_data([500.0], &dev);
        let l = Tensor::<TB, 2, Int>::from_data([[2, 9]], &dev);
        let a = to_vec(model.forward(x.clone(), t.clone(), l.clone()));
        assert!(a.iter().any(|v| v.abs() > 1e-3));
        // The file holds f32; the model here is f64 rounded to f32 on the way out.
        let b = to_vec(back.forward(x, t, l));
        let worst = a
            .iter()
            .zip(&b)
            .map(|(u, v)| (u - v).abs() / (1.0 + u.abs()))
            .fold(0.0, f64::max);
        assert!(worst < 1e-5, "worst {worst}");
        // A wrong class name is refused by name.
        let cfg = dir.join("transformer/config.json");
        let text = std::fs::read_to_string(&cfg).expect("read");
        std::fs::write(&cfg, text.replace(CLASS, "DiTTransformer2DModel")).expect("write");
        let err = load_pipeline::<TB>(&dir, &dev).expect_err("wrong class");
        assert!(err.to_string().contains("DiTTransformer2DModel"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A config that describes no model is refused before any tensor is read: zero width alone,
    /// or a patch that does not divide the frame alone.
    #[test]
    fn a_config_that_describes_no_model_is_refused() {
        let dev = Default::default();
        let config = VideoDitConfig::new()
            .with_frames(2)
            .with_sample_size(8)
            .with_num_layers(1)
            .with_num_attention_heads(2)
            .with_attention_head_dim(4);
        let dir = std::env::temp_dir().join(format!("nervus-video-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        save_pipeline(&config.init::<TB>(&dev), &dir).expect("save");
        assert!(load_pipeline::<TB>(&dir, &dev).is_ok());
        let cfg = dir.join("transformer/config.json");
        let good: serde_json::Value = read_json(&cfg).unwrap();
        for (key, value) in [("num_attention_heads", 0), ("patch_size", 3)] {
            let mut bad = good.clone();
            bad[key] = value.into();
            std::fs::write(&cfg, bad.to_string()).unwrap();
            let e = load_pipeline::<TB>(&dir, &dev)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains("describes no model"), "{key} = {value}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
