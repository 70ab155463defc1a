//! Softmax followed by cross-entropy, averaged over the rows of a batch.
//!
//! `loss = (1/n) Σ_i −log p_i[y_i]` with `p_i = softmax(z_i)`. The derivative with respect to the
//! logits collapses to `(p − onehot(y)) / n`: the softmax's Jacobian `diag(p) − p pᵀ` contracted with
//! `−1/p[y]` at the target. The `1/n` is the batch mean: a sum would make the gradient n times too
//! large, which Adam would hide and SGD would not.

use super::Mat;

/// Row-wise softmax, shifted by each row's maximum so `exp` never overflows.
pub fn softmax(z: &Mat) -> Mat {
    let mut p = z.clone();
    for r in 0..z.rows {
        let row = &mut p.data[r * z.cols..(r + 1) * z.cols];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
    p
}

/// Mean cross-entropy of logits `z [n, classes]` against `targets [n]`, and the probabilities.
pub fn forward(z: &Mat, targets: &[usize]) -> (f64, Mat) {
    assert_eq!(z.rows, targets.len(), "softmax_xent: one target per row");
    let p = softmax(z);
    let loss = targets
        .iter()
        .enumerate()
        .map(|(r, &t)| -p.at(r, t).ln())
        .sum::<f64>()
        / z.rows as f64;
    (loss, p)
}

/// `dL/dz = (p − onehot(targets)) / n`, scaled by the upstream `dloss`.
pub fn backward(p: &Mat, targets: &[usize], dloss: f64) -> Mat {
    let n = p.rows as f64;
    let mut dz = p.clone();
    for (r, &t) in targets.iter().enumerate() {
        *dz.at_mut(r, t) -= 1.0;
    }
    for v in dz.data.iter_mut() {
        *v *= dloss / n;
    }
    dz
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{AB, assert_close, numerical_grad, randn, tensor};
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::prelude::*;

    fn point() -> (Mat, Vec<usize>) {
        // Logits with std 3: far from uniform probabilities, where the row-average term of the
        // softmax derivative is large.
        (Mat::new(4, 6, randn(9, 24, 3.0)), vec![2, 0, 5, 2])
    }

    #[test]
    fn softmax_xent_backward_matches_numerical() {
        let (z, t) = point();
        let (_, p) = forward(&z, &t);
        let n = numerical_grad(&z.data, 1e-3, |v| {
            forward(&Mat::new(4, 6, v.to_vec()), &t).0
        });
        // Centred difference error is h²·f'''/6 ≈ 1e-6·O(0.1); 1e-6 relative is that bound.
        assert_close("dz", &backward(&p, &t, 1.0).data, &n, 1e-6);
    }

    #[test]
    fn softmax_xent_matches_burn_autodiff() {
        let (z, t) = point();
        let zt = tensor::<AB, 2>(z.data.clone(), [4, 6]).require_grad();
        let targets = Tensor::<AB, 1, Int>::from_data(
            TensorData::new(t.iter().map(|&v| v as i64).collect(), [4]),
            &Default::default(),
        );
        let loss = CrossEntropyLossConfig::new()
            .init(&Default::default())
            .forward(zt.clone(), targets);
        let (want, p) = forward(&z, &t);
        let got = loss.clone().into_scalar();
        assert!(
            (got - want).abs() <= 1e-13 * want.abs(),
            "loss {got} vs {want}"
        );
        let grads = loss.backward();
        let dz: Vec<f64> = zt.grad(&grads).unwrap().into_data().iter::<f64>().collect();
        assert_close("dz", &dz, &backward(&p, &t, 1.0).data, 1e-12);
    }

    /// Logits in the thousands: without the shift by the row maximum `exp` overflows to infinity
    /// and the row becomes NaN.
    #[test]
    fn softmax_of_huge_logits_is_finite() {
        let p = softmax(&Mat::new(1, 3, vec![1000.0, 1000.0, 1000.0 - 2f64.ln()]));
        let want = [0.4, 0.4, 0.2];
        // 1000 − ln 2 is stored to within 5.7e-14 (half an ulp at 1000), which moves p by ~1e-14.
        for (g, w) in p.data.iter().zip(want) {
            assert!((g - w).abs() < 1e-13, "{:?}", p.data);
        }
    }
}
