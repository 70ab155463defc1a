//! Space/time regrouping of video tokens, for factorised attention.
//!
//! A clip's tokens are its frames laid end to end: `F` frames of `N` patches, token `f·N + n`.
//! A spatial block attends within each frame (groups `(b, f)` of `N` tokens); a temporal block
//! attends within each place (groups `(b, n)` of `F` tokens). Both are done by regrouping the tokens
//! into a batch of independent sequences and running ordinary attention on it, not by masking: a
//! mask would do all the arithmetic it pretends to save.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

/// Which tokens attend to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Axis {
    /// Within a frame.
    Space,
    /// Across frames, at one place.
    Time,
}

/// The clip's layout and the axis of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grouping {
    pub frames: usize,
    pub patches: usize,
    pub axis: Axis,
}

/// Shapes: `[B, F·N, C]` → `[G, L, C]`: `G = B·F, L = N` for space, `G = B·N, L = F` for time.
pub fn group<B: Backend>(x: Tensor<B, 3>, g: Grouping) -> Tensor<B, 3> {
    let [b, _, c] = x.dims();
    match g.axis {
        Axis::Space => x.reshape([b * g.frames, g.patches, c]),
        Axis::Time => x
            .reshape([b, g.frames, g.patches, c])
            .swap_dims(1, 2) // [B, N, F, C]
            .reshape([b * g.patches, g.frames, c]),
    }
}

/// The inverse of [`group`]. Shapes: `[G, L, C]` → `[B, F·N, C]`.
pub fn ungroup<B: Backend>(x: Tensor<B, 3>, g: Grouping) -> Tensor<B, 3> {
    let [groups, _, c] = x.dims();
    match g.axis {
        Axis::Space => x.reshape([groups / g.frames, g.frames * g.patches, c]),
        Axis::Time => {
            let b = groups / g.patches;
            x.reshape([b, g.patches, g.frames, c])
                .swap_dims(1, 2) // [B, F, N, C]
                .reshape([b, g.frames * g.patches, c])
        }
    }
}
