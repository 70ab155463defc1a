//! Muon (Keller Jordan, 2024): SGD with Nesterov momentum whose update is orthogonalised.
//!
//! For a weight matrix with gradient `G`, Muon replaces the momentum-smoothed update `M` by
//! (approximately) `U·Vᵀ` from its SVD `M = U·S·Vᵀ`: the same directions with every singular value
//! set to ~1, so rare directions (small singular values) move as far as common ones. Computing an
//! SVD every step is slow on accelerators, so Muon runs a few steps of a Newton–Schulz iteration
//! that pushes the singular values towards 1 using only matrix products:
//!
//! ```text
//! X ← G/(‖G‖_F + 1e-7)                       // all singular values now ≤ 1
//! repeat 5 times:  A = X·Xᵀ;  X ← a·X + (b·A + c·A²)·X
//! ```
//!
//! Each step applies `f(s) = a·s + b·s³ + c·s⁵` to every singular value at once (the iteration
//! acts as a polynomial in `X·Xᵀ`, which shares `U`, `V` with X). The coefficients
//! `(a, b, c) = (3.4445, −4.7750, 2.0315)` are the published ones: chosen for a large slope at 0
//! (3.4445) so small singular values grow quickly, at the price of not converging — `f(1) ≈ 0.70`,
//! and the values end up oscillating in roughly `[0.68, 1.13]` rather than at 1, which Jordan
//! found does not hurt training. The iteration runs on the wide orientation (rows ≤ cols),
//! transposing a tall matrix first and back afterwards, so that `A = X·Xᵀ` is the smaller Gram
//! matrix. The reference code runs it in bfloat16; here it is f64.
//!
//! The update is then scaled by `√max(1, rows/cols)` — rows and cols as PyTorch stores the weight,
//! `[out, in]`. A Burn weight is stored `[in, out]`: pass its transpose (orthogonalisation commutes
//! with transposition; only this scale sees the orientation), or the scale comes out inverted.

use super::Mat;

/// The published quintic coefficients `(a, b, c)`.
pub const NS_COEFFS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
/// The published number of iterations.
pub const NS_STEPS: usize = 5;

/// Muon's hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct Muon {
    pub lr: f64,
    /// μ.
    pub momentum: f64,
    pub nesterov: bool,
    /// Decoupled: `W ← W·(1 − lr·wd)` before the update.
    pub weight_decay: f64,
}

impl Default for Muon {
    /// The reference implementation's defaults (lr 0.02, momentum 0.95, Nesterov, no decay).
    fn default() -> Self {
        Self {
            lr: 0.02,
            momentum: 0.95,
            nesterov: true,
            weight_decay: 0.0,
        }
    }
}

fn scaled(m: &Mat, s: f64) -> Mat {
    Mat::new(m.rows, m.cols, m.data.iter().map(|v| v * s).collect())
}

fn add(a: &Mat, b: &Mat) -> Mat {
    Mat::new(
        a.rows,
        a.cols,
        a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect(),
    )
}

/// `steps` quintic Newton–Schulz iterations on `G/(‖G‖_F + 1e-7)`; same shape as `g`.
pub fn newton_schulz(g: &Mat, steps: usize) -> Mat {
    let (a, b, c) = NS_COEFFS;
    let tall = g.rows > g.cols;
    let x0 = if tall { g.transpose() } else { g.clone() };
    let norm = x0.data.iter().map(|v| v * v).sum::<f64>().sqrt();
    let mut x = scaled(&x0, 1.0 / (norm + 1e-7));
    for _ in 0..steps {
        let gram = x.matmul_a_bt(&x);
        let poly = add(&scaled(&gram, b), &scaled(&gram.matmul(&gram), c));
        x = add(&scaled(&x, a), &poly.matmul(&x));
    }
    if tall { x.transpose() } else { x }
}

/// The Muon update for gradient `g`, advancing the momentum buffer `buf`:
/// `buf ← μ·buf + g`; `g_eff = g + μ·buf` (Nesterov) or `buf`; then
/// `newton_schulz(g_eff)·√max(1, rows/cols)`.
pub fn update(g: &Mat, buf: &mut Mat, h: &Muon) -> Mat {
    assert_eq!((g.rows, g.cols), (buf.rows, buf.cols), "muon: buffer shape");
    for (b, gi) in buf.data.iter_mut().zip(&g.data) {
        *b = h.momentum * *b + gi;
    }
    let eff = if h.nesterov {
        add(g, &scaled(buf, h.momentum))
    } else {
        buf.clone()
    };
    let o = newton_schulz(&eff, NS_STEPS);
    scaled(&o, (g.rows as f64 / g.cols as f64).max(1.0).sqrt())
}

/// One Muon step: `W ← W·(1 − lr·wd) − lr·update(g)`.
pub fn step(w: &mut Mat, g: &Mat, buf: &mut Mat, h: &Muon) {
    assert_eq!(
        (w.rows, w.cols),
        (g.rows, g.cols),
        "muon: weight and gradient shapes"
    );
    let u = update(g, buf, h);
    let decay = 1.0 - h.lr * h.weight_decay;
    for (wi, ui) in w.data.iter_mut().zip(&u.data) {
        *wi = *wi * decay - h.lr * ui;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{randn, worst_rel};

    /// The eigenvalues of a symmetric matrix, by cyclic Jacobi rotations: each rotation zeroes
    /// one off-diagonal pair; sweeps repeat until the off-diagonal mass is negligible.
    fn jacobi_eigenvalues(m: &Mat) -> Vec<f64> {
        let n = m.rows;
        let mut a = m.clone();
        for _ in 0..100 {
            let off: f64 = (0..n)
                .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
                .map(|(i, j)| a.at(i, j) * a.at(i, j))
                .sum();
            if off < 1e-30 {
                break;
            }
            for p in 0..n {
                for q in p + 1..n {
                    let apq = a.at(p, q);
                    if apq.abs() < 1e-300 {
                        continue;
                    }
                    // The angle that zeroes a[p][q]: tan 2φ = 2a_pq/(a_qq − a_pp).
                    let theta = (a.at(q, q) - a.at(p, p)) / (2.0 * apq);
                    let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                    let t = if theta == 0.0 { 1.0 } else { t };
                    let (cs, sn) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
                    // A ← Jᵀ·A·J, applied to rows and columns p and q.
                    for k in 0..n {
                        let (akp, akq) = (a.at(k, p), a.at(k, q));
                        *a.at_mut(k, p) = cs * akp - sn * akq;
                        *a.at_mut(k, q) = sn * akp + cs * akq;
                    }
                    for k in 0..n {
                        let (apk, aqk) = (a.at(p, k), a.at(q, k));
                        *a.at_mut(p, k) = cs * apk - sn * aqk;
                        *a.at_mut(q, k) = sn * apk + cs * aqk;
                    }
                }
            }
        }
        let mut ev: Vec<f64> = (0..n).map(|i| a.at(i, i)).collect();
        ev.sort_by(f64::total_cmp);
        ev
    }

    /// Singular values of `x`, from the eigenvalues of the smaller Gram matrix.
    fn singular_values(x: &Mat) -> Vec<f64> {
        let gram = if x.rows >= x.cols {
            x.matmul_at_b(x)
        } else {
            x.matmul_a_bt(x)
        };
        jacobi_eigenvalues(&gram)
            .iter()
            .map(|e| e.max(0.0).sqrt())
            .collect()
    }

    /// The band the quintic leaves singular values in. `f(s) = a·s + b·s³ + c·s⁵` maps
    /// `[0.68, 1.14]` into itself (its minimum there is 0.682 at s = 1.05, its maximum 1.135 at
    /// s = 0.68; see the test below), and a normalised random matrix's singular values reach that
    /// interval within the 5 steps; a little room on each side for values not yet settled.
    const BAND: (f64, f64) = (0.65, 1.2);

    #[test]
    fn jacobi_finds_known_eigenvalues() {
        // diag(1, 2, 3) rotated: the eigenvalues survive.
        let m = Mat::new(3, 3, vec![2.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 3.0]);
        let ev = jacobi_eigenvalues(&m);
        assert!(worst_rel(&ev, &[1.0, 3.0, 3.0]) < 1e-14, "{ev:?}");
    }

    #[test]
    fn the_scalar_map_does_not_converge_to_one() {
        let (a, b, c) = NS_COEFFS;
        let f = |s: f64| a * s + b * s.powi(3) + c * s.powi(5);
        println!(
            "muon f(1) = {:.4}, f(0.7) = {:.4}, f(1.05) = {:.4}",
            f(1.0),
            f(0.7),
            f(1.05)
        );
        assert!((f(1.0) - 0.701).abs() < 1e-3, "1 is not a fixed point");
        // [0.68, 1.14] is mapped into itself: once there, a singular value stays, oscillating.
        let (lo, hi) = (0..=460)
            .map(|k| f(0.68 + k as f64 * 0.001))
            .fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
        println!("muon f on [0.68, 1.14]: [{lo:.4}, {hi:.4}]");
        assert!(lo >= 0.68 && hi <= 1.14);
    }

    #[test]
    fn newton_schulz_singular_values_sit_in_the_band() {
        for (rows, cols, seed) in [(16, 8, 381), (8, 16, 382)] {
            let g = Mat::new(rows, cols, randn(seed, rows * cols, 1.0));
            let before = singular_values(&g);
            let x = newton_schulz(&g, NS_STEPS);
            assert_eq!((x.rows, x.cols), (rows, cols));
            let sv = singular_values(&x);
            println!(
                "muon {rows}x{cols}: G's singular values {:.2}..{:.2}, after NS {:.3}..{:.3}",
                before[0],
                before[before.len() - 1],
                sv[0],
                sv[sv.len() - 1]
            );
            assert!(sv.iter().all(|&s| (BAND.0..=BAND.1).contains(&s)), "{sv:?}");
            // Orthogonal in the short direction: XᵀX ≈ I (tall) or XXᵀ ≈ I (wide), 8×8, with
            // diagonal in the band squared and off-diagonal within its width.
            let gram = if rows > cols {
                x.matmul_at_b(&x)
            } else {
                x.matmul_a_bt(&x)
            };
            let (lo2, hi2) = (BAND.0 * BAND.0, BAND.1 * BAND.1);
            let mut worst_off = 0.0f64;
            for i in 0..8 {
                for j in 0..8 {
                    let v = gram.at(i, j);
                    if i == j {
                        assert!((lo2..=hi2).contains(&v), "diagonal {v}");
                    } else {
                        worst_off = worst_off.max(v.abs());
                    }
                }
            }
            println!(
                "muon {rows}x{cols}: largest off-diagonal of the 8x8 Gram matrix {worst_off:.3}"
            );
            assert!(worst_off <= (hi2 - lo2) / 2.0);
            // The long direction cannot be orthonormal: the 16×16 Gram matrix has rank 8.
            let long = if rows > cols {
                x.matmul_a_bt(&x)
            } else {
                x.matmul_at_b(&x)
            };
            let ev = jacobi_eigenvalues(&long);
            assert!(ev[..8].iter().all(|e| e.abs() < 1e-12), "{ev:?}");
        }
    }

    #[test]
    fn newton_schulz_ignores_the_gradient_scale() {
        for (rows, cols, seed) in [(16, 8, 383), (8, 16, 384)] {
            let g = Mat::new(rows, cols, randn(seed, rows * cols, 1.0));
            let norm = g.data.iter().map(|v| v * v).sum::<f64>().sqrt();
            // Only the 1e-7 in the normaliser sees the scale. For ‖G‖_F ≈ 11 it shrinks the
            // starting X by a relative 1e-7/‖G‖_F ≈ 9e-9 more than for 1000·G, and five steps
            // carry that through at a factor ~2 (measured 1.7e-8): not 1e-9, and not a bug.
            let small = worst_rel(
                &newton_schulz(&scaled(&g, 1000.0), NS_STEPS).data,
                &newton_schulz(&g, NS_STEPS).data,
            );
            println!(
                "muon {rows}x{cols}: NS(1000·G) vs NS(G), ‖G‖_F = {norm:.1}: {small:.2e} \
                 (1e-7/‖G‖_F = {:.1e})",
                1e-7 / norm
            );
            assert!(small < 5.0 * 1e-7 / norm, "{small:e}");
            // Once ‖G‖_F ≥ 1000 the 1e-7 is below 1e-10 relative: a further factor 1000 changes
            // the output by less than 1e-9.
            let big = scaled(&g, 1000.0 / norm);
            let r = worst_rel(
                &newton_schulz(&scaled(&big, 1000.0), NS_STEPS).data,
                &newton_schulz(&big, NS_STEPS).data,
            );
            println!("muon {rows}x{cols}: NS(1000·G) vs NS(G), ‖G‖_F = 1000: {r:.2e}");
            assert!(r < 1e-9, "{r:e}");
        }
    }

    #[test]
    fn newton_schulz_commutes_with_transposition() {
        // A tall G is transposed into the wide orientation; Gᵀ already is wide: the same
        // computation on the same numbers, so equal to the bit.
        let g = Mat::new(16, 8, randn(385, 128, 1.0));
        assert_eq!(
            newton_schulz(&g.transpose(), NS_STEPS),
            newton_schulz(&g, NS_STEPS).transpose()
        );
    }

    #[test]
    fn momentum_scale_and_step() {
        let h = Muon {
            lr: 0.1,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.5,
        };
        let g1 = Mat::new(16, 8, randn(386, 128, 1.0));
        let g2 = Mat::new(16, 8, randn(387, 128, 1.0));
        let mut buf = Mat::zeros(16, 8);
        let _ = update(&g1, &mut buf, &h);
        assert_eq!(buf, g1, "first step: buf = g");
        let u = update(&g2, &mut buf, &h);
        // buf = 0.9·g1 + g2, g_eff = g2 + 0.9·buf.
        let want_buf = add(&scaled(&g1, 0.9), &g2);
        assert_eq!(buf, want_buf);
        let eff = add(&g2, &scaled(&want_buf, 0.9));
        // Tall 16×8: the update is scaled by √2.
        let want = scaled(&newton_schulz(&eff, NS_STEPS), 2f64.sqrt());
        assert_eq!(u, want);
        // Wide 8×16: no scale.
        let gw = g1.transpose();
        let uw = update(&gw, &mut Mat::zeros(8, 16), &h);
        assert_eq!(uw, newton_schulz(&add(&gw, &scaled(&gw, 0.9)), NS_STEPS));
        // The step: W·(1 − lr·wd) − lr·update.
        let w0 = Mat::new(16, 8, randn(388, 128, 0.5));
        let mut w = w0.clone();
        let mut b = Mat::zeros(16, 8);
        step(&mut w, &g1, &mut b, &h);
        let u1 = update(&g1, &mut Mat::zeros(16, 8), &h);
        for i in 0..128 {
            assert_eq!(w.data[i], w0.data[i] * (1.0 - 0.1 * 0.5) - 0.1 * u1.data[i]);
        }
    }

    #[test]
    fn lerp_momentum_gives_the_same_update() {
        // The current reference code keeps an average, not a sum: buf ← β·buf + (1 − β)·g and
        // g_eff = (1 − β)·g + β·buf. By induction that buffer is (1 − β) times this one, and so
        // is g_eff; Newton–Schulz normalises by the Frobenius norm first, so the update agrees up
        // to the 1e-7 in that normaliser.
        let h = Muon::default();
        let beta = h.momentum;
        let (mut sum_buf, mut avg_buf) = (Mat::zeros(8, 16), Mat::zeros(8, 16));
        for s in 0..3 {
            let g = Mat::new(8, 16, randn(389 + s, 128, 1.0));
            let u = update(&g, &mut sum_buf, &h);
            avg_buf = add(&scaled(&avg_buf, beta), &scaled(&g, 1.0 - beta));
            let eff = add(&scaled(&g, 1.0 - beta), &scaled(&avg_buf, beta));
            let v = newton_schulz(&eff, NS_STEPS);
            let r = worst_rel(&v.data, &u.data);
            println!("muon step {s}: lerp-momentum update vs sum-momentum update {r:.1e}");
            assert!(r < 1e-6, "{r:e}");
        }
    }

    /// Before the iterations the gradient is scaled to `G/(‖G‖_F + 1e-7)`: at a norm of 1e-7 that
    /// is a norm of one half, not a division by (nearly) zero.
    #[test]
    fn a_tiny_gradient_is_scaled_by_its_norm_plus_epsilon() {
        let g = Mat::new(2, 3, randn(95, 6, 1.0));
        let norm = |m: &Mat| m.data.iter().map(|v| v * v).sum::<f64>().sqrt();
        let tiny = scaled(&g, 1e-7 / norm(&g));
        let x0 = newton_schulz(&tiny, 0);
        assert!((norm(&x0) - 0.5).abs() < 1e-9, "norm {}", norm(&x0));
        let unit = scaled(&g, 1.0 / norm(&g));
        assert!((norm(&newton_schulz(&unit, 0)) - 1.0 / (1.0 + 1e-7)).abs() < 1e-15);
    }

    /// The iteration's polynomial is odd, p(X) = aX + b·XXᵀX + c·(XXᵀ)²X, so p(Xᵀ) = p(X)ᵀ: a tall
    /// matrix is transposed only so that the Gram matrix is the smaller one, and the result is the
    /// same either way (to rounding).
    #[test]
    fn tall_and_wide_give_transposed_results() {
        let g = Mat::new(5, 2, randn(96, 10, 1.0));
        let tall = newton_schulz(&g, 5);
        let wide = newton_schulz(&g.transpose(), 5).transpose();
        assert!(worst_rel(&tall.data, &wide.data) < 1e-12);
    }
}
