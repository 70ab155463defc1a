//! Hand-derived forward and backward passes in plain Rust (f64, no Burn), one layer a file.
//!
//! Each layer is a pair of plain functions: `forward` computes the output (and whatever the
//! backward pass needs), `backward` takes `dL/dy` and returns `dL/dx` plus the parameter
//! gradients. Beside each pair is its test: a centred numerical difference at a point where a
//! missing factor would show, and a parity test against the Burn module's autodiff gradient on the
//! same weights and inputs.

pub mod adamw;
pub mod attention;
pub mod attention_qkv;
pub mod block;
pub mod dit_block;
pub mod dit_final;
pub mod embedding;
pub mod flow;
pub mod gelu;
pub mod gpt;
pub mod grouped_attention;
pub mod labels;
pub mod layer_norm;
pub mod linear;
pub mod matrix;
#[cfg(test)]
mod mistakes;
pub mod mlp;
pub mod modern_attention;
pub mod modern_gpt;
pub mod modulate;
pub mod muon;
pub mod patch;
pub mod qk_norm;
pub mod relu;
pub mod rms_norm;
pub mod rope;
pub mod silu;
pub mod softcap;
pub mod softmax_xent;
pub mod swiglu;
pub mod timestep;

pub use matrix::Mat;
