//! Space/time factorised attention for video tokens (as in Latte or the video DiTs): instead of
//! every token attending to all `F·N` tokens of its clip, a Space block lets each token attend
//! only within its own frame and a Time block only across frames at its own patch position.
//!
//! Layout: the tokens of one sample are its frames laid end to end, `F` frames × `N` patches,
//! row `b·F·N + f·N + n`. [`regroup`] reorders the rows so that each attention group is one
//! contiguous run, after which the plain batched attention of `attention_qkv.rs` does the work
//! with `batch = number of groups` and `seq = group length`:
//!
//! - `Axis::Space`: groups `(b, f)`, each its `N` tokens in patch order. That is already the
//!   input order, so the regrouping is the identity.
//! - `Axis::Time`: groups `(b, n)`, each its `F` tokens in frame order; token `f` of group
//!   `(b, n)` (output row `(b·N + n)·F + f`) is input row `b·F·N + f·N + n`.
//!
//! Regrouping is a permutation of rows, so [`ungroup`] is both its inverse and its transpose, and
//! the backward pass is: regroup `dy` the same way, run the attention's backward pass, ungroup
//! `dx`. The weight gradients are sums over all tokens, which no reordering changes.

use super::Mat;
use super::attention_qkv::{self, AttentionQkvCache, AttentionQkvGrads, AttentionQkvParams};

/// Which tokens attend to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Within a frame: groups `(b, f)` of `N` tokens.
    Space,
    /// Across frames at one patch position: groups `(b, n)` of `F` tokens.
    Time,
}

/// `(number of groups, group length)` for `batch` clips of `frames × patches` tokens.
pub fn group_shape(batch: usize, frames: usize, patches: usize, axis: Axis) -> (usize, usize) {
    match axis {
        Axis::Space => (batch * frames, patches),
        Axis::Time => (batch * patches, frames),
    }
}

/// The input row that lands at output row `r` of [`regroup`].
fn source_row(r: usize, frames: usize, patches: usize, axis: Axis) -> usize {
    match axis {
        Axis::Space => r,
        Axis::Time => {
            let (group, f) = (r / frames, r % frames);
            let (b, n) = (group / patches, group % patches);
            b * frames * patches + f * patches + n
        }
    }
}

fn check(x: &Mat, batch: usize, frames: usize, patches: usize) {
    assert_eq!(
        x.rows,
        batch * frames * patches,
        "grouped_attention: x must have B·F·N rows"
    );
}

/// `x [B·F·N, D]` in clip order → the same rows, each group contiguous (see the module comment).
pub fn regroup(x: &Mat, batch: usize, frames: usize, patches: usize, axis: Axis) -> Mat {
    check(x, batch, frames, patches);
    let mut out = Mat::zeros(x.rows, x.cols);
    for r in 0..x.rows {
        let s = source_row(r, frames, patches, axis);
        out.data[r * x.cols..(r + 1) * x.cols].copy_from_slice(x.row(s));
    }
    out
}

/// The inverse (and transpose) of [`regroup`]: grouped rows back to clip order.
pub fn ungroup(x: &Mat, batch: usize, frames: usize, patches: usize, axis: Axis) -> Mat {
    check(x, batch, frames, patches);
    let mut out = Mat::zeros(x.rows, x.cols);
    for r in 0..x.rows {
        let s = source_row(r, frames, patches, axis);
        out.data[s * x.cols..(s + 1) * x.cols].copy_from_slice(x.row(r));
    }
    out
}

/// What the backward pass needs: the attention's cache on the grouped rows, and the layout.
#[derive(Clone, Debug)]
pub struct GroupedAttentionCache {
    pub attn: AttentionQkvCache,
    pub batch: usize,
    pub frames: usize,
    pub patches: usize,
    pub axis: Axis,
}

/// `x [B·F·N, D]` in clip order → `y [B·F·N, D]` in clip order, attention within each group.
pub fn forward(
    x: &Mat,
    p: &AttentionQkvParams,
    batch: usize,
    frames: usize,
    patches: usize,
    heads: usize,
    axis: Axis,
) -> (Mat, GroupedAttentionCache) {
    let (groups, len) = group_shape(batch, frames, patches, axis);
    let xg = regroup(x, batch, frames, patches, axis);
    let (yg, attn) = attention_qkv::forward(&xg, p, groups, len, heads);
    let cache = GroupedAttentionCache {
        attn,
        batch,
        frames,
        patches,
        axis,
    };
    (ungroup(&yg, batch, frames, patches, axis), cache)
}

/// Given `dy [B·F·N, D]` in clip order, the gradients; `dx` is in clip order too.
pub fn backward(
    cache: &GroupedAttentionCache,
    p: &AttentionQkvParams,
    dy: &Mat,
) -> AttentionQkvGrads {
    let (b, f, n, axis) = (cache.batch, cache.frames, cache.patches, cache.axis);
    let mut g = attention_qkv::backward(&cache.attn, p, &regroup(dy, b, f, n, axis));
    g.dx = ungroup(&g.dx, b, f, n, axis);
    g
}

#[cfg(test)]
mod tests {
    use super::attention_qkv::tests as aq;
    use super::*;
    use crate::testing::{randn, worst_rel};

    const B: usize = 2;
    const F: usize = 3;
    const N: usize = 4;
    const D: usize = 8;
    const H: usize = 2;
    const AXES: [Axis; 2] = [Axis::Space, Axis::Time];

    fn point() -> (Mat, AttentionQkvParams) {
        (
            Mat::new(B * F * N, D, randn(321, B * F * N * D, 3.0)),
            aq::params(D, 322),
        )
    }

    #[test]
    #[should_panic(expected = "x must have B·F·N rows")]
    fn a_clip_of_the_wrong_length_is_refused() {
        // One frame's worth of rows too many would regroup without an index error, silently
        // mixing the extra rows into the last clip's groups: the shape check must stop it.
        let (b, f, n) = (2, 3, 4);
        let x = Mat::zeros(b * f * n + n, 2);
        regroup(&x, b, f, n, Axis::Time);
    }

    #[test]
    fn regroup_round_trips_and_orders_as_documented() {
        // Rows that name themselves: row r holds r in every column.
        let x = Mat::new(
            B * F * N,
            2,
            (0..B * F * N).flat_map(|r| [r as f64, r as f64]).collect(),
        );
        for axis in AXES {
            let g = regroup(&x, B, F, N, axis);
            assert_eq!(ungroup(&g, B, F, N, axis), x, "{axis:?}");
            assert_eq!(regroup(&ungroup(&g, B, F, N, axis), B, F, N, axis), g);
        }
        assert_eq!(
            regroup(&x, B, F, N, Axis::Space),
            x,
            "Space is the identity"
        );
        // Time group (b = 1, n = 2) is rows 1·F·N + f·N + 2 for f = 0, 1, 2: 14, 18, 22.
        let g = regroup(&x, B, F, N, Axis::Time);
        let group = N + 2;
        let rows: Vec<f64> = (0..F).map(|f| g.at(group * F + f, 0)).collect();
        assert_eq!(rows, vec![14.0, 18.0, 22.0]);
    }

    #[test]
    fn grouped_equals_each_group_alone() {
        let (x, p) = point();
        for axis in AXES {
            let (y, _) = forward(&x, &p, B, F, N, H, axis);
            // Each group gathered by hand from clip order, run alone, scattered back.
            let mut want = Mat::zeros(x.rows, D);
            for b in 0..B {
                let groups: Vec<Vec<usize>> = match axis {
                    Axis::Space => (0..F)
                        .map(|f| (0..N).map(|n| b * F * N + f * N + n).collect())
                        .collect(),
                    Axis::Time => (0..N)
                        .map(|n| (0..F).map(|f| b * F * N + f * N + n).collect())
                        .collect(),
                };
                for rows in groups {
                    let xs = Mat::new(
                        rows.len(),
                        D,
                        rows.iter().flat_map(|&r| x.row(r).to_vec()).collect(),
                    );
                    let (ys, _) = attention_qkv::forward(&xs, &p, 1, rows.len(), H);
                    for (i, &r) in rows.iter().enumerate() {
                        want.data[r * D..(r + 1) * D].copy_from_slice(ys.row(i));
                    }
                }
            }
            // Same arithmetic on the same numbers, row by row: equal to the bit.
            println!(
                "grouped attention {axis:?} vs one group at a time: {:.1e}",
                worst_rel(&y.data, &want.data)
            );
            assert_eq!(y, want, "{axis:?}");
        }
    }

    #[test]
    fn grouped_attention_backward_matches_numerical() {
        let (x, p) = point();
        let dy = Mat::new(B * F * N, D, randn(323, B * F * N * D, 1.0));
        for axis in AXES {
            let loss = |x: &Mat, p: &AttentionQkvParams| {
                let (y, _) = forward(x, p, B, F, N, H, axis);
                y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum::<f64>()
            };
            let (_, cache) = forward(&x, &p, B, F, N, H, axis);
            let g = backward(&cache, &p, &dy);
            let nx = aq::numeric(&x, aq::STEP, |x| &mut x.data[..], |x| loss(x, &p));
            let mut checks = vec![("dx", g.dx.data.clone(), nx)];
            for (name, a, field) in aq::weight_checks(&g) {
                checks.push((name, a, aq::numeric(&p, aq::STEP, field, |p| loss(&x, p))));
            }
            // The attention's own step and tolerance: regrouping adds no arithmetic.
            for (name, a, n) in &checks {
                let r = worst_rel(a, n);
                println!("grouped attention {axis:?} {name}: worst relative difference {r:.2e}");
                assert!(r <= aq::TOL, "{axis:?} {name}: {r:.3e}");
            }
        }
    }

    #[test]
    fn space_sees_its_frame_and_time_its_place() {
        let (x, p) = point();
        let (b0, f0, n0) = (1, 1, 2);
        // Space: perturb every token of frame f0 of clip b0; only that frame's rows change.
        let mut xs = x.clone();
        for n in 0..N {
            *xs.at_mut(b0 * F * N + f0 * N + n, 3) += 1.0;
        }
        // Time: perturb every token at place n0 of clip b0; only rows at that place change.
        let mut xt = x.clone();
        for f in 0..F {
            *xt.at_mut(b0 * F * N + f * N + n0, 3) += 1.0;
        }
        for (axis, x2) in [(Axis::Space, &xs), (Axis::Time, &xt)] {
            let (y, _) = forward(&x, &p, B, F, N, H, axis);
            let (y2, _) = forward(x2, &p, B, F, N, H, axis);
            for r in 0..B * F * N {
                let (b, f, n) = (r / (F * N), (r / N) % F, r % N);
                let touched = b == b0
                    && match axis {
                        Axis::Space => f == f0,
                        Axis::Time => n == n0,
                    };
                if touched {
                    assert_ne!(y.row(r), y2.row(r), "{axis:?} row {r} should change");
                } else {
                    assert_eq!(y.row(r), y2.row(r), "{axis:?} row {r} saw another group");
                }
            }
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::reference::attention_qkv::burn_parity::{
        compare, exact_params, named, named_grads, refs,
    };
    use crate::regroup::{Grouping, group, ungroup};
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    #[test]
    fn grouped_attention_matches_burn_for_space_and_time() {
        let (b, f, n, d, h) = (2, 3, 4, 8, 2);
        for (axis, burn_axis) in [
            (Axis::Space, crate::regroup::Axis::Space),
            (Axis::Time, crate::regroup::Axis::Time),
        ] {
            let p = exact_params(d, 451);
            let x = Mat::new(b * f * n, d, f32_exact(randn(459, b * f * n * d, 3.0)));
            let dy = Mat::new(b * f * n, d, randn(460, b * f * n * d, 1.0));
            let named = named(&p, "");
            let m = load(
                crate::dit_attention::DitAttentionConfig::new(d, h).init::<AB>(&Default::default()),
                &refs(&named),
            );
            let g = Grouping {
                frames: f,
                patches: n,
                axis: burn_axis,
            };
            let xt = tensor::<AB, 3>(x.data.clone(), [b, f * n, d]).require_grad();
            // Round trip of the regrouping itself is exact.
            assert_eq!(to_vec(ungroup(group(xt.clone(), g), g)), x.data);
            let y = ungroup(m.forward(group(xt.clone(), g)), g);
            let (want, cache) = forward(&x, &p, b, f, n, h, axis);
            assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
            let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, f * n, d]))
                .sum()
                .backward();
            let gr = backward(&cache, &p, &dy);
            assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &gr.dx.data, 1e-12);
            compare(&grads_by_path(&m, &grads), &named_grads(&gr, ""), 1e-11);
        }
    }
}
