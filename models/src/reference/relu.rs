//! ReLU: `y = max(0, x)`; the slope is 1 where the input was positive and 0 elsewhere, so the
//! backward pass lets the gradient through exactly where the forward pass let the input through.

use super::Mat;

pub fn forward(x: &Mat) -> Mat {
    Mat::new(x.rows, x.cols, x.data.iter().map(|v| v.max(0.0)).collect())
}

/// `dx = dy · [x > 0]`, given the forward pass's input `x`.
pub fn backward(x: &Mat, dy: &Mat) -> Mat {
    Mat::new(
        x.rows,
        x.cols,
        x.data
            .iter()
            .zip(&dy.data)
            .map(|(v, d)| if *v > 0.0 { *d } else { 0.0 })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{AB, assert_close, numerical_grad, randn, tensor, to_vec};

    #[test]
    fn relu_backward_matches_numerical_away_from_the_kink() {
        // ReLU's slope jumps at 0, where a centred difference is simply wrong; inputs are kept
        // at least 0.1 from it so the check is exact (the function is linear on each side).
        let x: Vec<f64> = randn(5, 30, 3.0)
            .into_iter()
            .map(|v| {
                if v.abs() < 0.1 {
                    v + 0.2_f64.copysign(v)
                } else {
                    v
                }
            })
            .collect();
        let x = Mat::new(5, 6, x);
        let dy = Mat::new(5, 6, randn(6, 30, 1.0));
        let n = numerical_grad(&x.data, 1e-3, |v| {
            forward(&Mat::new(5, 6, v.to_vec()))
                .data
                .iter()
                .zip(&dy.data)
                .map(|(a, b)| a * b)
                .sum()
        });
        assert_close("dx", &backward(&x, &dy).data, &n, 1e-9);
    }

    #[test]
    fn relu_backward_matches_burn_autodiff() {
        let x = Mat::new(5, 6, randn(7, 30, 3.0));
        let dy = Mat::new(5, 6, randn(8, 30, 1.0));
        let xt = tensor::<AB, 2>(x.data.clone(), [5, 6]).require_grad();
        let y = burn::tensor::activation::relu(xt.clone());
        assert_close("y", &to_vec(y.clone()), &forward(&x).data, 0.0);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [5, 6]))
            .sum()
            .backward();
        // A mask and a copy: nothing to round, so nothing may differ.
        assert_close(
            "dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &backward(&x, &dy).data,
            0.0,
        );
    }

    /// At the kink itself the slope is taken as 0, as Burn's and PyTorch's ReLU take it, so the
    /// twin and autodiff agree even on inputs that are exactly zero.
    #[test]
    fn the_slope_at_zero_is_zero() {
        let x = Mat::new(1, 3, vec![0.0, -0.0, 1e-300]);
        let dy = Mat::new(1, 3, vec![1.0, 1.0, 1.0]);
        assert_eq!(backward(&x, &dy).data, vec![0.0, 0.0, 1.0]);
    }
}
