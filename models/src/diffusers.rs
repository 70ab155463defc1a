//! The diffusers checkpoint contract: a pipeline directory whose `transformer/` diffusers'
//! `DiTTransformer2DModel` loads, with a flow-matching scheduler and no VAE (the model draws pixels,
//! not latents).
//!
//! Names are the model's own paths except `attn1.to_out` (diffusers' `to_out.0`) and the feed
//! forward's `c_fc`/`c_proj` (diffusers' `ff.net.0.proj`/`ff.net.2`). Layouts: every linear weight is
//! PyTorch's `[out, in]` (Burn keeps `[in, out]`), and the patch embedding is a conv kernel
//! `[D, C, p, p]`, which is the transposed `[C·p·p, D]` matrix reshaped.

use crate::checkpoint::{
    CheckpointError, NamedTensor, TensorFile, read_json, write_json, write_safetensors,
};
use crate::dit::{Dit, DitConfig};
pub use crate::patch_embed::PatchShape;
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// `transformer/config.json` as diffusers writes it for a DiT.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DitTransformerConfig {
    #[serde(rename = "_class_name")]
    pub class_name: String,
    #[serde(rename = "_diffusers_version", default)]
    pub diffusers_version: Option<String>,
    #[serde(default = "gelu_approximate")]
    pub activation_fn: String,
    #[serde(default = "yes")]
    pub attention_bias: bool,
    pub attention_head_dim: usize,
    #[serde(default)]
    pub dropout: f64,
    pub in_channels: usize,
    #[serde(default)]
    pub norm_elementwise_affine: bool,
    #[serde(default = "eps")]
    pub norm_eps: f64,
    #[serde(default = "groups")]
    pub norm_num_groups: usize,
    pub norm_type: String,
    pub num_attention_heads: usize,
    pub num_embeds_ada_norm: usize,
    pub num_layers: usize,
    #[serde(default)]
    pub out_channels: Option<usize>,
    pub patch_size: usize,
    pub sample_size: usize,
    #[serde(default)]
    pub upcast_attention: bool,
}

fn gelu_approximate() -> String {
    "gelu-approximate".into()
}
fn yes() -> bool {
    true
}
fn eps() -> f64 {
    1e-5
}
fn groups() -> usize {
    32
}

impl DitTransformerConfig {
    pub fn from_model(c: &DitConfig) -> Self {
        Self {
            class_name: "DiTTransformer2DModel".into(),
            diffusers_version: Some("0.42.1".into()),
            activation_fn: gelu_approximate(),
            attention_bias: true,
            attention_head_dim: c.attention_head_dim,
            dropout: 0.0,
            in_channels: c.in_channels,
            norm_elementwise_affine: false,
            norm_eps: c.norm_eps,
            norm_num_groups: 32,
            norm_type: "ada_norm_zero".into(),
            num_attention_heads: c.num_attention_heads,
            num_embeds_ada_norm: c.classes,
            num_layers: c.num_layers,
            out_channels: Some(c.in_channels),
            patch_size: c.patch_size,
            sample_size: c.sample_size,
            upcast_attention: false,
        }
    }

    /// The model configuration, refusing what this model does not implement.
    pub fn to_model(&self, file: &Path) -> Result<DitConfig, CheckpointError> {
        let refuse = |what: String| Err(CheckpointError::format(file, what));
        if self.class_name != "DiTTransformer2DModel" {
            return refuse(format!(
                "_class_name `{}` is not DiTTransformer2DModel",
                self.class_name
            ));
        }
        if self.norm_type != "ada_norm_zero" {
            return refuse(format!(
                "norm_type `{}` is not implemented (ada_norm_zero is)",
                self.norm_type
            ));
        }
        if self.activation_fn != "gelu-approximate" {
            return refuse(format!(
                "activation_fn `{}` is not implemented (gelu-approximate is)",
                self.activation_fn
            ));
        }
        if !self.attention_bias || self.norm_elementwise_affine {
            return refuse(
                "only attention_bias = true and norm_elementwise_affine = false are implemented"
                    .into(),
            );
        }
        if self.out_channels.is_some_and(|o| o != self.in_channels) {
            return refuse(
                "out_channels must equal in_channels (a velocity has the image's shape)".into(),
            );
        }
        if !self.sample_size.is_multiple_of(self.patch_size) {
            return refuse(format!(
                "sample_size {} is not a multiple of patch_size {}",
                self.sample_size, self.patch_size
            ));
        }
        Ok(DitConfig::new()
            .with_sample_size(self.sample_size)
            .with_patch_size(self.patch_size)
            .with_in_channels(self.in_channels)
            .with_num_layers(self.num_layers)
            .with_num_attention_heads(self.num_attention_heads)
            .with_attention_head_dim(self.attention_head_dim)
            .with_classes(self.num_embeds_ada_norm)
            .with_norm_eps(self.norm_eps))
    }
}

/// How one Burn path is stored by diffusers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The same array.
    Same,
    /// A linear weight: Burn `[in, out]`, PyTorch `[out, in]`.
    Transposed,
    /// The patch embedding: Burn `[C·p·p, D]`, a conv kernel `[D, C, p, p]`.
    ConvKernel,
}

/// A Burn path's diffusers name and layout.
pub fn diffusers_name(path: &str) -> (String, Layout) {
    let name = path
        .replace("attn1.to_out.", "attn1.to_out.0.")
        .replace("ff.c_fc.", "ff.net.0.proj.")
        .replace("ff.c_proj.", "ff.net.2.");
    let layout = if path == "pos_embed.proj.weight" {
        Layout::ConvKernel
    } else if path.ends_with(".weight") && !path.ends_with("embedding_table.weight") {
        Layout::Transposed
    } else {
        Layout::Same
    };
    (name, layout)
}

fn to_file_layout(t: NamedTensor, layout: Layout, p: PatchShape) -> NamedTensor {
    match layout {
        Layout::Same => t,
        Layout::Transposed => t.transposed(),
        Layout::ConvKernel => {
            let t = t.transposed(); // [D, C·p·p]
            let shape = vec![t.shape[0], p.channels, p.patch, p.patch];
            NamedTensor { shape, ..t }
        }
    }
}

/// The shape [`to_file_layout`] gives a tensor of Burn shape `shape`.
fn file_shape(shape: &[usize], layout: Layout, p: PatchShape) -> Vec<usize> {
    match layout {
        Layout::Same => shape.to_vec(),
        Layout::Transposed => shape.iter().rev().copied().collect(),
        Layout::ConvKernel => vec![shape[1], p.channels, p.patch, p.patch],
    }
}

fn from_file_layout(t: NamedTensor, layout: Layout) -> NamedTensor {
    match layout {
        Layout::Same => t,
        Layout::Transposed => t.transposed(),
        Layout::ConvKernel => {
            let d = t.shape[0];
            let rest: usize = t.shape[1..].iter().product();
            NamedTensor {
                shape: vec![d, rest],
                ..t
            }
            .transposed()
        }
    }
}

/// Every parameter under its diffusers name, in diffusers' layout.
pub fn to_diffusers(tensors: Vec<NamedTensor>, p: PatchShape) -> Vec<NamedTensor> {
    tensors
        .into_iter()
        .map(|t| {
            let (name, layout) = diffusers_name(&t.name);
            let t = to_file_layout(t, layout, p);
            NamedTensor { name, ..t }
        })
        .collect()
}

/// Writes `config.json` and `diffusion_pytorch_model.safetensors` (the `transformer/` folder).
pub fn save_transformer<B: Backend>(model: &Dit<B>, dir: &Path) -> Result<(), CheckpointError> {
    write_weights(
        model,
        model.config.patch_shape(),
        &dir.join("diffusion_pytorch_model.safetensors"),
    )?;
    write_json(
        &dir.join("config.json"),
        &DitTransformerConfig::from_model(&model.config),
    )
}

/// Writes a whole pipeline: `model_index.json`, `transformer/`, `scheduler/`.
pub fn save_pipeline<B: Backend>(model: &Dit<B>, dir: &Path) -> Result<(), CheckpointError> {
    save_transformer(model, &dir.join("transformer"))?;
    write_json(
        &dir.join("model_index.json"),
        &serde_json::json!({
            "_class_name": "DiTPipeline",
            "_diffusers_version": "0.42.1",
            "transformer": ["diffusers", "DiTTransformer2DModel"],
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
            "vae": [null, null],
            "id2label": (0..model.config.classes).map(|i| (i.to_string(), i.to_string())).collect::<HashMap<_, _>>()
        }),
    )?;
    write_json(
        &dir.join("scheduler/scheduler_config.json"),
        &serde_json::json!({
            "_class_name": "FlowMatchEulerDiscreteScheduler",
            "_diffusers_version": "0.42.1",
            "num_train_timesteps": 1000,
            "shift": 1.0,
            "use_dynamic_shifting": false
        }),
    )
}

/// Reads a `transformer/` folder (ours, or diffusers' own save of a compatible DiT).
pub fn load_transformer<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<Dit<B>, CheckpointError> {
    let config_path = dir.join("config.json");
    let hf: DitTransformerConfig = read_json(&config_path)?;
    let config = hf.to_model(&config_path)?;
    read_weights(
        config.init::<B>(device),
        config.patch_shape(),
        &dir.join("diffusion_pytorch_model.safetensors"),
    )
}

/// Writes every parameter of `module` to `file` under its diffusers name and layout.
pub fn write_weights<B: Backend, M: Module<B>>(
    module: &M,
    p: PatchShape,
    file: &Path,
) -> Result<(), CheckpointError> {
    let tensors = to_diffusers(crate::named::export(module), p);
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    write_safetensors(file, &tensors, Some(meta))
}

/// Fills `model` (freshly made with the stored config) from `file`, written by
/// [`write_weights`] or by diffusers: every tensor must be there in its expected shape, and
/// nothing else may be.
pub fn read_weights<B: Backend, M: Module<B>>(
    model: M,
    p: PatchShape,
    file: &Path,
) -> Result<M, CheckpointError> {
    let file = TensorFile::read(file)?;
    let path = file.path.clone();
    let mut by_name = file.tensors;
    let mut by_burn = HashMap::new();
    for (path_in_model, shape) in crate::named::shapes(&model) {
        let (name, layout) = diffusers_name(&path_in_model);
        let expected = file_shape(&shape, layout, p);
        let stored = by_name
            .remove(&name)
            .ok_or_else(|| CheckpointError::Missing {
                file: path.clone(),
                name: name.clone(),
            })?;
        if stored.shape != expected {
            return Err(CheckpointError::Shape {
                file: path,
                name,
                expected,
                got: stored.shape,
            });
        }
        let back = from_file_layout(stored, layout);
        by_burn.insert(
            path_in_model.clone(),
            NamedTensor {
                name: path_in_model,
                ..back
            },
        );
    }
    if !by_name.is_empty() {
        let mut names: Vec<_> = by_name.into_keys().collect();
        names.sort();
        return Err(CheckpointError::format(
            path,
            format!("unexpected tensors: {}", names.join(", ")),
        ));
    }
    crate::named::import(model, by_burn, &path)
}
