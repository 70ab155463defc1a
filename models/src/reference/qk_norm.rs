//! QK-norm: RMSNorm applied to each head's query (and, separately, key) vector before the
//! scores, with one gain of length `head_dim` shared by all heads (OLMo 2, Qwen 3, SD3.5 style).
//!
//! It is `rms_norm` on a reshaped matrix: `q [B·T, H·d]` is, row-major, the same numbers as
//! `[B·T·H, d]` (head `h` of token `r` is row `r·H + h`), so the reshape moves nothing. Each
//! head-row is normalised on its own; the gain is shared, so its gradient sums over tokens AND
//! heads, which `rms_norm::backward` already does by summing over rows. Call it once for q with
//! `q_norm`'s gain and once for k with `k_norm`'s.

use super::Mat;
use super::rms_norm::{self, RmsNormCache, RmsNormGrads};

/// `[B·T, H·d]` viewed as `[B·T·H, d]`: the same data, no copy of any element out of order.
fn per_head(x: &Mat, heads: usize) -> Mat {
    assert!(
        heads > 0 && x.cols.is_multiple_of(heads),
        "qk_norm: {heads} heads do not divide {}",
        x.cols
    );
    Mat::new(x.rows * heads, x.cols / heads, x.data.clone())
}

/// `x [B·T, H·d]`, `gain [d]` → `[B·T, H·d]`, each head vector RMS-normalised.
pub fn forward(x: &Mat, heads: usize, gain: &[f64], eps: f64) -> (Mat, RmsNormCache) {
    let (y, cache) = rms_norm::forward(&per_head(x, heads), gain, eps);
    (Mat::new(x.rows, x.cols, y.data), cache)
}

/// Given `dy [B·T, H·d]`, `dx [B·T, H·d]` and `dgain [d]` (summed over tokens and heads).
pub fn backward(cache: &RmsNormCache, gain: &[f64], dy: &Mat, heads: usize) -> RmsNormGrads {
    let g = rms_norm::backward(cache, gain, &per_head(dy, heads));
    RmsNormGrads {
        dx: Mat::new(dy.rows, dy.cols, g.dx.data),
        dgamma: g.dgamma,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const R: usize = 2 * 3; // B·T
    const H: usize = 2;
    const HD: usize = 4;
    const EPS: f64 = 1e-6;

    #[test]
    fn qk_norm_backward_matches_numerical() {
        // Heads of std 3 with a mean of 1; gain 1 ± 0.5 noise.
        let x = Mat::new(
            R,
            H * HD,
            randn(361, R * H * HD, 3.0)
                .iter()
                .map(|v| v + 1.0)
                .collect(),
        );
        let gain: Vec<f64> = randn(362, HD, 0.5).iter().map(|v| 1.0 + v).collect();
        let dy = Mat::new(R, H * HD, randn(363, R * H * HD, 1.0));
        let loss = |x: &Mat, g: &[f64]| -> f64 {
            let (y, _) = forward(x, H, g, EPS);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        };
        let h = 1e-3;
        let nx = numerical_grad(&x.data, h, |v| {
            loss(&Mat::new(R, H * HD, v.to_vec()), &gain)
        });
        let ng = numerical_grad(&gain, h, |v| loss(&x, v));
        let (_, cache) = forward(&x, H, &gain, EPS);
        let g = backward(&cache, &gain, &dy, H);
        // As rms_norm.rs: truncation ∝ 1/rms³ (rms ≈ 3), ~1e-8 (measured, printed: dx 1.5e-8);
        // L is linear in the gain (rounding only). 1e-6 is the ceiling, a millionth of a lost
        // factor.
        for (name, a, n) in [("dx", &g.dx.data, &nx), ("dgain", &g.dgamma, &ng)] {
            println!(
                "qk_norm {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-6);
        }
    }

    #[test]
    fn each_head_is_normalised_on_its_own() {
        // Scaling one head of one token by 10 leaves every output unchanged (eps aside): the
        // norm divides it out, and no other head's rms saw it.
        let x = Mat::new(R, H * HD, randn(364, R * H * HD, 3.0));
        let gain = vec![1.0; HD];
        let mut x2 = x.clone();
        for j in HD..2 * HD {
            *x2.at_mut(2, j) *= 10.0;
        }
        let (y, _) = forward(&x, H, &gain, 0.0);
        let (y2, _) = forward(&x2, H, &gain, 0.0);
        assert!(worst_rel(&y2.data, &y.data) < 1e-15);
        // Each head vector has rms 1 (times the unit gain).
        for r in 0..R {
            for h in 0..H {
                let v = &y.row(r)[h * HD..(h + 1) * HD];
                let ms = v.iter().map(|a| a * a).sum::<f64>() / HD as f64;
                assert!((ms - 1.0).abs() < 1e-14);
            }
        }
    }
}
