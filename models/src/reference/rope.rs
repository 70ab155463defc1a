//! Rotary position embedding (RoPE) on one head vector of even length `d` at position `pos`.
//!
//! The coordinates are split into `d/2` pairs and pair `i` is rotated by the angle `pos·θ_i`,
//! `θ_i = base^(−2i/d)` (base 10000). Two conventions pair the coordinates differently:
//!
//! - **halves** (Hugging Face's `rotate_half`, Llama and most checkpoints): pair `(i, i + d/2)`,
//!   `y_i = x_i cos − x_{i+d/2} sin`, `y_{i+d/2} = x_{i+d/2} cos + x_i sin`;
//! - **interleaved** (the RoFormer paper, GPT-J, Meta's original Llama code): pair `(2i, 2i+1)`.
//!
//! They are the same rotation conjugated by a fixed permutation of coordinates (interleaved
//! index `2i ↔ i`, `2i+1 ↔ i + d/2`): the same numbers come out in a different order, so a
//! checkpoint's q/k weights work with one convention only, unless their rows are permuted.
//!
//! A rotation is orthogonal, `Rᵀ = R⁻¹ = R(−angle)`, so the backward pass `dx = Rᵀ·dy` is the
//! rotation by minus the angle. Because `R(m)ᵀR(n) = R(n − m)`, the score `⟨R(m)q, R(n)k⟩`
//! depends on the positions only through `m − n`: relative position, from absolute rotations.

use super::Mat;

/// The usual frequency base.
pub const BASE: f64 = 10000.0;

/// How the coordinates are paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// `(i, i + d/2)`, Hugging Face's `rotate_half`.
    Halves,
    /// `(2i, 2i + 1)`.
    Interleaved,
}

/// Rotates every pair of `x` by `sign·pos·θ_i`.
fn rotate(x: &[f64], pos: usize, base: f64, pairing: Pairing, sign: f64) -> Vec<f64> {
    let d = x.len();
    assert!(
        d >= 2 && d.is_multiple_of(2),
        "rope: need an even head size"
    );
    let half = d / 2;
    let mut y = vec![0.0; d];
    for i in 0..half {
        let theta = base.powf(-2.0 * i as f64 / d as f64);
        let (sin, cos) = (sign * pos as f64 * theta).sin_cos();
        let (a, b) = match pairing {
            Pairing::Halves => (i, i + half),
            Pairing::Interleaved => (2 * i, 2 * i + 1),
        };
        y[a] = x[a] * cos - x[b] * sin;
        y[b] = x[b] * cos + x[a] * sin;
    }
    y
}

/// Halves convention: `x [d]` at position `pos` → `R(pos)·x`.
pub fn forward(x: &[f64], pos: usize, base: f64) -> Vec<f64> {
    rotate(x, pos, base, Pairing::Halves, 1.0)
}

/// Halves convention: `dx = R(pos)ᵀ·dy`, the rotation by `−pos·θ`.
pub fn backward(dy: &[f64], pos: usize, base: f64) -> Vec<f64> {
    rotate(dy, pos, base, Pairing::Halves, -1.0)
}

/// Interleaved convention: `x [d]` at position `pos` → `R(pos)·x`.
pub fn forward_interleaved(x: &[f64], pos: usize, base: f64) -> Vec<f64> {
    rotate(x, pos, base, Pairing::Interleaved, 1.0)
}

/// Interleaved convention: the rotation by `−pos·θ`.
pub fn backward_interleaved(dy: &[f64], pos: usize, base: f64) -> Vec<f64> {
    rotate(dy, pos, base, Pairing::Interleaved, -1.0)
}

/// Applies RoPE to every head of every token: `x [B·T, H·d]`, row `b·T + t` at position `t`,
/// head `h` in columns `h·d..(h+1)·d`. `inverse` rotates by minus the angle (the backward pass).
pub fn apply_seq(
    x: &Mat,
    seq: usize,
    heads: usize,
    base: f64,
    pairing: Pairing,
    inverse: bool,
) -> Mat {
    assert!(
        heads > 0 && x.cols.is_multiple_of(heads) && x.rows.is_multiple_of(seq),
        "rope: x must be [B·T, H·d]"
    );
    let d = x.cols / heads;
    let sign = if inverse { -1.0 } else { 1.0 };
    let mut out = Mat::zeros(x.rows, x.cols);
    for r in 0..x.rows {
        for h in 0..heads {
            let cols = r * x.cols + h * d..r * x.cols + (h + 1) * d;
            let y = rotate(&x.data[cols.clone()], r % seq, base, pairing, sign);
            out.data[cols].copy_from_slice(&y);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    const D: usize = 8;

    /// RoPE is linear in x, so the centred difference is exact but for rounding (~1e-12);
    /// 1e-9 admits nothing else.
    pub(crate) const TOL: f64 = 1e-9;

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn norm(a: &[f64]) -> f64 {
        dot(a, a).sqrt()
    }

    /// The worst relative difference between `backward` and a centred difference of
    /// `L = ⟨R(pos)x, dy⟩`, over three positions, for the halves convention. Position 3 turns
    /// the fastest pair by 3 rad, so sin is far from 0 and a wrong sign shows.
    pub(crate) fn worst(backward: impl Fn(&[f64], usize, f64) -> Vec<f64>) -> f64 {
        let x = randn(341, D, 3.0);
        let dy = randn(342, D, 1.0);
        let mut worst = 0.0f64;
        for pos in [1, 3, 17] {
            let n = numerical_grad(&x, 1e-3, |v| dot(&forward(v, pos, BASE), &dy));
            let r = worst_rel(&backward(&dy, pos, BASE), &n);
            println!("rope dx (pos {pos}): worst relative difference {r:.2e}");
            worst = worst.max(r);
        }
        worst
    }

    #[test]
    fn rope_backward_matches_numerical() {
        let r = worst(backward);
        assert!(r <= TOL, "rope: {r:.3e}");
        // The interleaved convention, the same way.
        let x = randn(343, D, 3.0);
        let dy = randn(344, D, 1.0);
        let n = numerical_grad(&x, 1e-3, |v| dot(&forward_interleaved(v, 3, BASE), &dy));
        let r = worst_rel(&backward_interleaved(&dy, 3, BASE), &n);
        println!("rope interleaved dx (pos 3): worst relative difference {r:.2e}");
        assert!(r <= TOL, "rope interleaved: {r:.3e}");
    }

    #[test]
    fn backward_is_the_transpose() {
        // ⟨R x, y⟩ = ⟨x, Rᵀ y⟩ up to rounding in the two sums.
        let x = randn(345, D, 3.0);
        let y = randn(346, D, 1.0);
        for pos in [0, 1, 5, 1000] {
            let lhs = dot(&forward(&x, pos, BASE), &y);
            let rhs = dot(&x, &backward(&y, pos, BASE));
            println!("rope pos {pos}: <Rx, y> − <x, Rᵀy> = {:.1e}", lhs - rhs);
            assert!((lhs - rhs).abs() <= 1e-14 * norm(&x) * norm(&y));
            // Rᵀ = R⁻¹: backward undoes forward.
            let back = backward(&forward(&x, pos, BASE), pos, BASE);
            assert!(worst_rel(&back, &x) < 1e-15);
        }
    }

    #[test]
    fn halves_and_interleaved_differ_by_a_fixed_permutation() {
        let x = randn(347, D, 3.0);
        let half = D / 2;
        // interleaved index 2i ↔ halves index i, 2i+1 ↔ i + d/2.
        let to_halves = |v: &[f64]| -> Vec<f64> {
            (0..D)
                .map(|k| {
                    if k < half {
                        v[2 * k]
                    } else {
                        v[2 * (k - half) + 1]
                    }
                })
                .collect()
        };
        let to_interleaved = |v: &[f64]| -> Vec<f64> {
            (0..D)
                .map(|k| {
                    if k % 2 == 0 {
                        v[k / 2]
                    } else {
                        v[half + k / 2]
                    }
                })
                .collect()
        };
        for pos in [1, 3, 17] {
            let h = forward(&x, pos, BASE);
            let i = forward_interleaved(&x, pos, BASE);
            assert_ne!(h, i, "the conventions differ on the same input");
            // Same rotation, permuted coordinates: the same arithmetic, so equal to the bit.
            assert_eq!(i, to_interleaved(&forward(&to_halves(&x), pos, BASE)));
        }
    }

    #[test]
    fn norm_is_preserved_and_scores_depend_on_offset_only() {
        let q = randn(348, D, 3.0);
        let k = randn(349, D, 3.0);
        for pos in [0, 1, 7, 500] {
            let r = (norm(&forward(&q, pos, BASE)) - norm(&q)).abs() / norm(&q);
            assert!(r < 1e-15, "pos {pos}: norm changed by {r:e}");
        }
        for pairing in [Pairing::Halves, Pairing::Interleaved] {
            let rot = |v: &[f64], p: usize| rotate(v, p, BASE, pairing, 1.0);
            for shift in [0usize, 1, 4] {
                let base_score = dot(&rot(&q, shift + 2), &rot(&k, 2));
                for n in [5, 40, 300] {
                    let s = dot(&rot(&q, n + shift), &rot(&k, n));
                    let r = (s - base_score).abs() / (norm(&q) * norm(&k));
                    println!("rope {pairing:?} m − n = {shift}, n = {n}: score differs by {r:.1e}");
                    assert!(r < 1e-12, "{pairing:?} shift {shift} n {n}: {r:e}");
                }
            }
        }
    }

    #[test]
    fn apply_seq_rotates_each_head_by_its_position() {
        let (b, t, h) = (2, 3, 2);
        let x = Mat::new(b * t, h * D, randn(350, b * t * h * D, 3.0));
        let y = apply_seq(&x, t, h, BASE, Pairing::Halves, false);
        let r = 4; // sequence 1, position 1, head 1
        assert_eq!(&y.row(r)[D..], forward(&x.row(r)[D..], 1, BASE).as_slice());
        let back = apply_seq(&y, t, h, BASE, Pairing::Halves, true);
        assert!(worst_rel(&back.data, &x.data) < 1e-15);
    }

    /// The frequencies themselves, from the definition θ_i = base^(−2i/d): with d = 4 and base
    /// 10,000, θ_0 = 1 and θ_1 = 1/100. A unit vector on the first coordinate of pair i, at
    /// position p, turns into (cos pθ_i, sin pθ_i) on that pair.
    #[test]
    fn the_frequencies_are_base_to_the_minus_two_i_over_d() {
        let p = 3;
        for (i, theta) in [(0usize, 1.0f64), (1, 0.01)] {
            let mut e = vec![0.0; 4];
            e[i] = 1.0;
            let y = forward(&e, p, 10_000.0);
            let (s, c) = (p as f64 * theta).sin_cos();
            let mut want = vec![0.0; 4];
            want[i] = c;
            want[i + 2] = s;
            assert!(
                worst_rel(&y, &want) < 1e-15,
                "pair {i}: {y:?} against {want:?}"
            );
        }
    }

    /// Rows are laid out as B sequences of T: row r sits at position r mod T, so the first row
    /// of every sequence is at position 0 and is left as it is.
    #[test]
    fn every_sequence_starts_at_position_zero() {
        let (seq, heads) = (3, 2);
        let x = Mat::new(2 * seq, heads * D, randn(91, 2 * seq * heads * D, 1.0));
        let y = apply_seq(&x, seq, heads, 10_000.0, Pairing::Halves, false);
        for r in [0, seq] {
            let row = r * x.cols..(r + 1) * x.cols;
            assert_eq!(y.data[row.clone()], x.data[row], "row {r}");
        }
        let second = (seq + 1) * x.cols..(seq + 2) * x.cols;
        let at_one: Vec<f64> = (0..heads)
            .flat_map(|h| {
                forward(
                    &x.data[second.start + h * D..second.start + (h + 1) * D],
                    1,
                    10_000.0,
                )
            })
            .collect();
        assert_eq!(y.data[second], at_one[..]);
    }
}
