//! Qwen2-family checkpoints in transformers' layout (`Qwen2ForCausalLM`: Qwen2 and Qwen2.5,
//! base and instruct), read into this crate's [`Gpt`] with the modern options on.
//!
//! Qwen2 is the modern recipe with three differences, each a [`GptConfig`] field: biases on the
//! query, key and value projections only (`qkv_bias`), an MLP width of its own
//! (`intermediate_size`, not 8C/3), and usually a head tied to the embedding (copied here). It has
//! no QK-norm and no soft-cap; its rotary positions pair each dimension with the one half a head
//! away, as this crate's do. The names: `model.embed_tokens`, `model.layers.{i}.input_layernorm`,
//! `self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp.{gate,up,down}_proj`,
//! `model.norm`, `lm_head`; every projection is a PyTorch `nn.Linear` (`[out, in]`), transposed on
//! the way in, and q, k and v are laid side by side into the one `c_attn` (`[C, C + 2·KV·D]`).
//! Tested against transformers' own save of a scrambled tiny Qwen2
//! (`tests/fixtures/qwen2-tiny`): logits, and greedy text through the chat template.

use crate::checkpoint::{CheckpointError, NamedTensor, TensorFile, read_json};
use crate::gpt::{Gpt, GptConfig, MlpKind, NormKind, PositionKind};
use burn::prelude::*;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The fields of transformers' `Qwen2Config` this loader reads.
#[derive(Clone, Debug, Deserialize)]
pub struct Qwen2Config {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub max_position_embeddings: usize,
    /// transformers before 5 wrote it here; 5 writes `rope_parameters.rope_theta`.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    pub rms_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// transformers' `Qwen2Config` default is `false`; Qwen2.5's small instruct models say `true`.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub use_sliding_window: bool,
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct RopeParameters {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_type: Option<String>,
}

fn default_act() -> String {
    "silu".into()
}

impl Qwen2Config {
    /// The model configuration, refusing what this model does not implement (by its key).
    pub fn to_model(&self, file: &Path) -> Result<GptConfig, CheckpointError> {
        let refuse = |what: String| Err(CheckpointError::format(file, what));
        if self.model_type != "qwen2" {
            return refuse(format!(
                "model_type `{}` is not qwen2 (Qwen2 and Qwen2.5 checkpoints are read)",
                self.model_type
            ));
        }
        if self.hidden_act != "silu" {
            return refuse(format!("hidden_act `{}` is not silu", self.hidden_act));
        }
        if self.use_sliding_window {
            return refuse(
                "use_sliding_window true: sliding-window attention is not implemented".into(),
            );
        }
        let scaled = self
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_type.as_deref())
            .is_some_and(|t| t != "default")
            || self.rope_scaling.as_ref().is_some_and(|v| !v.is_null());
        if scaled {
            return refuse("rope scaling (YaRN and the like) is not implemented".into());
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return refuse(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        let d = self.hidden_size / self.num_attention_heads;
        if let Some(h) = self.head_dim
            && h != d
        {
            return refuse(format!(
                "head_dim {h} is not hidden_size / num_attention_heads ({d})"
            ));
        }
        let theta = self
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(10_000.0);
        Ok(GptConfig::new(self.vocab_size)
            .with_context(self.max_position_embeddings)
            .with_layers(self.num_hidden_layers)
            .with_heads(self.num_attention_heads)
            .with_d_model(self.hidden_size)
            .with_kv_heads(Some(
                self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            ))
            .with_norm(NormKind::RmsNorm)
            .with_positions(PositionKind::Rope)
            .with_mlp(MlpKind::SwiGlu)
            .with_bias(false)
            .with_qkv_bias(Some(true))
            .with_ffn_hidden(Some(self.intermediate_size))
            .with_rope_base(theta)
            .with_norm_eps(self.rms_norm_eps))
    }

    /// The ids that end a turn (`eos_token_id`: one id or a list).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => {
                n.as_u64().map(|n| n as u32).into_iter().collect()
            }
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|n| n as u32)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// `[out, in]` tensors side by side along `out`, then transposed: `[in, Σ out]`.
fn stack_transposed(parts: Vec<NamedTensor>, name: &str) -> NamedTensor {
    let cols = parts[0].shape.get(1).copied();
    let mut data = Vec::new();
    let mut rows = 0;
    for p in &parts {
        rows += p.shape[0];
        data.extend_from_slice(&p.data);
    }
    let shape = match cols {
        Some(c) => vec![rows, c],
        None => vec![rows],
    };
    let t = NamedTensor::new(name, shape, data);
    if cols.is_some() { t.transposed() } else { t }
}

/// Reads a Qwen2-family directory: `config.json` and `model.safetensors` (one file; a sharded
/// checkpoint is refused by name).
pub fn load<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> Result<(Gpt<B>, Qwen2Config), CheckpointError> {
    let config_path = dir.join("config.json");
    let hf: Qwen2Config = read_json(&config_path)?;
    let config = hf.to_model(&config_path)?;
    config
        .check()
        .map_err(|e| CheckpointError::format(&config_path, e.to_string()))?;
    let weights = dir.join("model.safetensors");
    if !weights.is_file() && dir.join("model.safetensors.index.json").is_file() {
        return Err(CheckpointError::format(
            &weights,
            "the checkpoint is sharded (model.safetensors.index.json); one model.safetensors is read",
        ));
    }
    let mut file = TensorFile::read(&weights)?;
    let (c, v) = (config.d_model, config.vocab);
    let d = c / config.heads;
    let kvd = config.kv_heads.unwrap_or(config.heads) * d;
    let hidden = config.mlp_hidden();
    let mut by_burn: HashMap<String, NamedTensor> = HashMap::new();
    let mut put = |path: String, t: NamedTensor| {
        by_burn.insert(path.clone(), NamedTensor { name: path, ..t });
    };
    let embed = file.take("model.embed_tokens.weight", &[v, c])?;
    let head = if hf.tie_word_embeddings && !file.tensors.contains_key("lm_head.weight") {
        embed.clone()
    } else {
        file.take("lm_head.weight", &[v, c])?
    };
    put("wte.weight".into(), embed);
    put("lm_head.weight".into(), head.transposed());
    put("ln_f.gamma".into(), file.take("model.norm.weight", &[c])?);
    for i in 0..config.layers {
        let p = format!("model.layers.{i}.");
        let h = format!("h.{i}.");
        put(
            format!("{h}ln_1.gamma"),
            file.take(&format!("{p}input_layernorm.weight"), &[c])?,
        );
        put(
            format!("{h}ln_2.gamma"),
            file.take(&format!("{p}post_attention_layernorm.weight"), &[c])?,
        );
        let mut qkv = Vec::new();
        let mut bias = Vec::new();
        for (n, out) in [("q", c), ("k", kvd), ("v", kvd)] {
            qkv.push(file.take(&format!("{p}self_attn.{n}_proj.weight"), &[out, c])?);
            bias.push(file.take(&format!("{p}self_attn.{n}_proj.bias"), &[out])?);
        }
        put(
            format!("{h}attn.c_attn.weight"),
            stack_transposed(qkv, "c_attn"),
        );
        put(
            format!("{h}attn.c_attn.bias"),
            stack_transposed(bias, "c_attn"),
        );
        put(
            format!("{h}attn.c_proj.weight"),
            file.take(&format!("{p}self_attn.o_proj.weight"), &[c, c])?
                .transposed(),
        );
        for (n, burn, shape) in [
            ("gate", "c_fc", [hidden, c]),
            ("up", "c_up", [hidden, c]),
            ("down", "c_proj", [c, hidden]),
        ] {
            put(
                format!("{h}mlp.{burn}.weight"),
                file.take(&format!("{p}mlp.{n}_proj.weight"), &shape)?
                    .transposed(),
            );
        }
    }
    let path = file.path.clone();
    file.finish()?;
    let model = config.init::<B>(device);
    // `import` checks every parameter against what was built here: missing, shape, extra.
    Ok((crate::named::import(model, by_burn, &path)?, hf))
}
