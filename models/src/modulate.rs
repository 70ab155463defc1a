//! adaLN-Zero's pieces: a LayerNorm without gain or bias, whose scale and shift are computed from
//! the conditioning instead ([`modulate`]), and a gated residual ([`gated`]).
//!
//! Every gate and the output layer start at zero (DiT's "-Zero"), so a fresh block is the identity
//! and a fresh model predicts zero: training starts from a network that does nothing rather than
//! from one that does something random to every token.

use burn::prelude::*;

/// LayerNorm over the last axis with no learned gain or bias.
///
/// Shapes: `[.., C]` → `[.., C]`.
pub fn layer_norm_plain<B: Backend, const D: usize>(x: Tensor<B, D>, eps: f64) -> Tensor<B, D> {
    crate::fused::norm(x, None, None, eps, false)
}

/// `x · (1 + scale) + shift`, with one scale and shift per sample.
///
/// Shapes: `x [B, N, C]`, `shift`, `scale [B, C]` → `[B, N, C]`.
pub fn modulate<B: Backend>(
    x: Tensor<B, 3>,
    shift: Tensor<B, 2>,
    scale: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let n = x.dims()[1];
    x * per_token(scale + 1.0, n) + per_token(shift, n)
}

/// `x + gate · branch`, with one gate per sample and channel.
///
/// Shapes: `x`, `branch [B, N, C]`, `gate [B, C]` → `[B, N, C]`.
pub fn gated<B: Backend>(
    x: Tensor<B, 3>,
    gate: Tensor<B, 2>,
    branch: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let n = x.dims()[1];
    x + branch * per_token(gate, n)
}

/// One row per sample, copied to each of its `n` tokens. Shapes: `[B, C]` → `[B, n, C]`.
///
/// Written out rather than broadcast: a `[B, 1, C]` operand broadcast over the middle axis is
/// not one of the patterns flex's SIMD kernels recognise, so `x * v.unsqueeze_dim(1)` walks the
/// tensor one element at a time (`cargo xtask bench video` measured the difference). A copied
/// row costs one memcpy, and its gradient is one sum over the copies.
pub fn per_token<B: Backend>(v: Tensor<B, 2>, n: usize) -> Tensor<B, 3> {
    v.unsqueeze_dim::<3>(1).repeat_dim(1, n)
}
