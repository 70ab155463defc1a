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
        Axis::Time => gather_rows(
            x.reshape([b * g.frames * g.patches, c]),
            transposed(b, g.frames, g.patches),
        )
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
            gather_rows(
                x.reshape([groups * g.frames, c]),
                transposed(b, g.patches, g.frames),
            )
            .reshape([b, g.frames * g.patches, c])
        }
    }
}

/// Which input row each output row of the time axis's reordering reads: every sample's tokens,
/// laid out as `rows × cols` (token `(b·rows + i)·cols + j`), read back transposed, `cols × rows`.
/// Frame-major order (`rows = F`, `cols = N`) becomes place-major for [`group`]; swapping the two
/// goes back for [`ungroup`].
fn transposed(b: usize, rows: usize, cols: usize) -> Vec<i64> {
    let mut order = Vec::with_capacity(b * rows * cols);
    for bb in 0..b {
        for j in 0..cols {
            order.extend((0..rows).map(|i| ((bb * rows + i) * cols + j) as i64));
        }
    }
    order
}

/// Rows of `x [R, C]` in the order `rows` gives. Shapes: `[R, C]` → `[R, C]`.
///
/// Done as a gather of whole rows, not as `swap_dims` and a reshape: on flex a 4-D reordering is
/// copied one element at a time, while a row gather (and its gradient, a scatter-add of rows) is
/// a memcpy per token.
fn gather_rows<B: Backend>(x: Tensor<B, 2>, rows: Vec<i64>) -> Tensor<B, 2> {
    let n = rows.len();
    let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [n]), &x.device());
    x.select(0, idx)
}
