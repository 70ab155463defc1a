//! The GPT-2 checkpoint contract: `model.safetensors` with transformers' names and layouts, and a
//! `config.json` that `GPT2Config` reads.
//!
//! The names are the model's own paths with GPT-2's prefix (`transformer.`) and LayerNorm's
//! `gamma`/`beta` called `weight`/`bias`. The layouts are already GPT-2's: its `Conv1D` stores
//! `[in, out]`, as Burn's `Linear` does; only `lm_head` is a PyTorch `nn.Linear` (`[out, in]` =
//! `[V, C]`) and is transposed on the way in and out. A writer and a reader that shared a
//! misunderstanding would agree with each other, so this layout is tested against transformers'
//! own save (`tests/fixtures/gpt2-tiny`), not only against itself.

use crate::checkpoint::{
    CheckpointError, NamedTensor, TensorFile, read_json, write_json, write_safetensors,
};
use crate::gpt::{Gpt, GptConfig};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The fields of transformers' `GPT2Config` this model reads and writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpt2Config {
    #[serde(default = "default_model_type")]
    pub model_type: String,
    #[serde(default)]
    pub architectures: Vec<String>,
    pub vocab_size: usize,
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    #[serde(default)]
    pub n_inner: Option<usize>,
    #[serde(default = "default_activation")]
    pub activation_function: String,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// transformers' default is `true`; a missing key means tied.
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    #[serde(default = "default_true")]
    pub scale_attn_weights: bool,
    #[serde(default)]
    pub resid_pdrop: f64,
    #[serde(default)]
    pub embd_pdrop: f64,
    #[serde(default)]
    pub attn_pdrop: f64,
    #[serde(default = "default_init")]
    pub initializer_range: f64,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub eos_token_id: Option<u32>,
}

fn default_model_type() -> String {
    "gpt2".into()
}
fn default_activation() -> String {
    "gelu_new".into()
}
fn default_eps() -> f64 {
    1e-5
}
fn default_true() -> bool {
    true
}
fn default_init() -> f64 {
    0.02
}

impl Gpt2Config {
    pub fn from_model(c: &GptConfig) -> Self {
        Self {
            model_type: "gpt2".into(),
            architectures: vec!["GPT2LMHeadModel".into()],
            vocab_size: c.vocab,
            n_positions: c.context,
            n_embd: c.d_model,
            n_layer: c.layers,
            n_head: c.heads,
            n_inner: None,
            activation_function: "gelu_new".into(),
            layer_norm_epsilon: c.norm_eps,
            tie_word_embeddings: false,
            scale_attn_by_inverse_layer_idx: false,
            scale_attn_weights: true,
            resid_pdrop: 0.0,
            embd_pdrop: 0.0,
            attn_pdrop: 0.0,
            initializer_range: c.init_std,
            bos_token_id: None,
            eos_token_id: None,
        }
    }

    /// The model configuration, refusing GPT-2 variants this model does not implement.
    pub fn to_model(&self, file: &Path) -> Result<GptConfig, CheckpointError> {
        let refuse = |what: String| Err(CheckpointError::format(file, what));
        if !matches!(
            self.activation_function.as_str(),
            "gelu_new" | "gelu_pytorch_tanh"
        ) {
            return refuse(format!(
                "activation_function `{}` is not implemented (gelu_new is)",
                self.activation_function
            ));
        }
        if self.n_inner.is_some_and(|n| n != 4 * self.n_embd) {
            return refuse(format!("n_inner {:?} is not 4 × n_embd", self.n_inner));
        }
        if self.scale_attn_by_inverse_layer_idx || !self.scale_attn_weights {
            return refuse(
                "only the default attention scaling 1/sqrt(head_dim) is implemented".into(),
            );
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return refuse(format!(
                "n_embd {} is not divisible by n_head {}",
                self.n_embd, self.n_head
            ));
        }
        Ok(GptConfig::new(self.vocab_size)
            .with_context(self.n_positions)
            .with_layers(self.n_layer)
            .with_heads(self.n_head)
            .with_d_model(self.n_embd)
            .with_norm_eps(self.layer_norm_epsilon)
            .with_init_std(self.initializer_range))
    }
}

/// A Burn path's GPT-2 name, and whether the tensor is transposed between the two.
pub fn gpt2_name(path: &str) -> (String, bool) {
    if path == "lm_head.weight" {
        return (path.to_string(), true);
    }
    let path = path
        .strip_suffix(".gamma")
        .map(|p| format!("{p}.weight"))
        .or_else(|| path.strip_suffix(".beta").map(|p| format!("{p}.bias")))
        .unwrap_or_else(|| path.to_string());
    (format!("transformer.{path}"), false)
}

/// Every parameter under its GPT-2 name, in GPT-2's layout.
pub fn to_gpt2(tensors: Vec<NamedTensor>) -> Vec<NamedTensor> {
    tensors
        .into_iter()
        .map(|t| {
            let (name, transpose) = gpt2_name(&t.name);
            let t = if transpose { t.transposed() } else { t };
            NamedTensor { name, ..t }
        })
        .collect()
}

/// Writes `config.json` and `model.safetensors` for transformers' `GPT2LMHeadModel`.
pub fn save<B: Backend>(model: &Gpt<B>, dir: &Path) -> Result<(), CheckpointError> {
    let tensors = to_gpt2(crate::named::export(model));
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    write_safetensors(&dir.join("model.safetensors"), &tensors, Some(meta))?;
    write_json(
        &dir.join("config.json"),
        &Gpt2Config::from_model(&model.config),
    )
}

/// Reads a GPT-2 directory (ours, or transformers' own save of a compatible model). A tied
/// checkpoint (no `lm_head.weight`, `tie_word_embeddings` true) gets a copy of `wte` as its head.
pub fn load<B: Backend>(dir: &Path, device: &B::Device) -> Result<Gpt<B>, CheckpointError> {
    let config_path = dir.join("config.json");
    let hf: Gpt2Config = read_json(&config_path)?;
    let config = hf.to_model(&config_path)?;
    config
        .check()
        .map_err(|e| CheckpointError::format(&config_path, e.to_string()))?;
    let file = TensorFile::read(&dir.join("model.safetensors"))?;
    let path = file.path.clone();
    let mut by_gpt2 = file.tensors;
    // transformers' own saves may carry these non-parameter buffers.
    by_gpt2.retain(|k, _| !k.ends_with(".attn.bias") && !k.ends_with(".attn.masked_bias"));
    if hf.tie_word_embeddings && !by_gpt2.contains_key("lm_head.weight") {
        let wte = by_gpt2
            .get("transformer.wte.weight")
            .cloned()
            .ok_or_else(|| CheckpointError::Missing {
                file: path.clone(),
                name: "transformer.wte.weight".into(),
            })?;
        by_gpt2.insert(
            "lm_head.weight".into(),
            NamedTensor {
                name: "lm_head.weight".into(),
                ..wte
            },
        );
    }
    let model = config.init::<B>(device);
    let mut by_burn = HashMap::new();
    for (path_in_model, shape) in crate::named::shapes(&model) {
        let (name, transpose) = gpt2_name(&path_in_model);
        if let Some(t) = by_gpt2.remove(&name) {
            let expected: Vec<usize> = if transpose {
                shape.iter().rev().cloned().collect()
            } else {
                shape
            };
            if t.shape != expected {
                return Err(CheckpointError::Shape {
                    file: path,
                    name,
                    expected,
                    got: t.shape,
                });
            }
            let t = if transpose { t.transposed() } else { t };
            by_burn.insert(
                path_in_model.clone(),
                NamedTensor {
                    name: path_in_model,
                    ..t
                },
            );
        } else {
            return Err(CheckpointError::Missing { file: path, name });
        }
    }
    if !by_gpt2.is_empty() {
        let mut names: Vec<_> = by_gpt2.into_keys().collect();
        names.sort();
        return Err(CheckpointError::format(
            path,
            format!("unexpected tensors: {}", names.join(", ")),
        ));
    }
    crate::named::import(model, by_burn, &path)
}
