//! Rotary position embedding, in the *rotate-half* convention of Hugging Face's Llama code: the
//! pairs rotated together are `(i, i + d/2)`, at angle `pos · base^(−2i/d)`.
//!
//! Burn 0.21's `RotaryEncoding` rotates *interleaved* pairs `(2i, 2i+1)` instead. Both encode
//! relative position (the score of a rotated query and key depends only on `m − n`), but they are
//! different functions of the same weights: a checkpoint trained with one must be read with the
//! same one. This workspace uses rotate-half; the tests pin it against a direct implementation and
//! show Burn's convention differs.

use burn::prelude::*;

/// `(cos, sin)` tables for positions `offset..offset + t`, each `[t, d/2]`, in f64 then cast.
fn tables<B: Backend>(
    offset: usize,
    t: usize,
    d: usize,
    base: f64,
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let half = d / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for pos in offset..offset + t {
        for i in 0..half {
            let angle = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let mk = |v: Vec<f64>| {
        Tensor::<B, 2>::from_data(
            TensorData::new(v, [t, half]).convert::<B::FloatElem>(),
            device,
        )
    };
    (mk(cos), mk(sin))
}

/// Rotates queries or keys. Shapes: `x [B, H, T, D]` at positions `offset..offset + T` → the same.
pub fn apply<B: Backend>(x: Tensor<B, 4>, offset: usize, base: f64) -> Tensor<B, 4> {
    let [b, h, t, d] = x.dims();
    let half = d / 2;
    let (cos, sin) = tables::<B>(offset, t, d, base, &x.device());
    let (cos, sin) = (cos.unsqueeze::<4>(), sin.unsqueeze::<4>()); // [1, 1, T, D/2]
    let x1 = x.clone().slice([0..b, 0..h, 0..t, 0..half]);
    let x2 = x.slice([0..b, 0..h, 0..t, half..d]);
    Tensor::cat(
        vec![
            x1.clone() * cos.clone() - x2.clone() * sin.clone(),
            x2 * cos + x1 * sin,
        ],
        3,
    )
}

#[cfg(test)]
mod tests {
    use crate::testing::{TB, tensor, to_vec};

    /// rotate-half, written out coordinate by coordinate.
    fn direct(x: &[f64], pos: usize, base: f64) -> Vec<f64> {
        let d = x.len();
        let half = d / 2;
        let mut y = vec![0.0; d];
        for i in 0..half {
            let a = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            y[i] = x[i] * a.cos() - x[i + half] * a.sin();
            y[i + half] = x[i + half] * a.cos() + x[i] * a.sin();
        }
        y
    }

    #[test]
    fn rotate_half_matches_a_direct_implementation_and_not_burns_interleaved_one() {
        let (t, d) = (5, 8);
        let x: Vec<f64> = (0..t * d)
            .map(|i| ((i * 37 % 17) as f64 - 8.0) / 3.0)
            .collect();
        let ours = to_vec(super::apply(
            tensor::<TB, 4>(x.clone(), [1, 1, t, d]),
            3,
            10_000.0,
        ));
        let want: Vec<f64> = (0..t)
            .flat_map(|p| direct(&x[p * d..(p + 1) * d], 3 + p, 10_000.0))
            .collect();
        for (a, b) in ours.iter().zip(&want) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        let burn = burn::nn::RotaryEncodingConfig::new(16, d).init::<TB>(&Default::default());
        let interleaved = to_vec(burn.apply(tensor::<TB, 4>(x, [1, 1, t, d]), 3));
        let differ = interleaved
            .iter()
            .zip(&ours)
            .any(|(a, b)| (a - b).abs() > 1e-3);
        assert!(
            differ,
            "Burn's RotaryEncoding rotates interleaved pairs: a different function"
        );
    }

    #[test]
    fn scores_depend_only_on_the_relative_position() {
        let d = 8;
        let q: Vec<f64> = (0..d).map(|i| (i as f64 * 0.7).sin()).collect();
        let k: Vec<f64> = (0..d).map(|i| (i as f64 * 1.3).cos()).collect();
        let score = |m: usize, n: usize| {
            let qm = to_vec(super::apply(
                tensor::<TB, 4>(q.clone(), [1, 1, 1, d]),
                m,
                10_000.0,
            ));
            let kn = to_vec(super::apply(
                tensor::<TB, 4>(k.clone(), [1, 1, 1, d]),
                n,
                10_000.0,
            ));
            qm.iter().zip(&kn).map(|(a, b)| a * b).sum::<f64>()
        };
        let s = score(7, 3);
        for shift in [0, 1, 5, 40] {
            assert!((score(7 + shift, 3 + shift) - s).abs() < 1e-12);
        }
        assert!(
            (score(7, 4) - s).abs() > 1e-6,
            "and it does depend on the offset"
        );
    }
}
