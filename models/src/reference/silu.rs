//! SiLU (swish): `y = x·σ(x)`, `σ(x) = 1/(1 + e^(−x))`.
//!
//! By the product rule the slope is the gate as it stands plus how the gate opens:
//! `σ(x) + x·σ'(x)`, and `σ' = σ(1 − σ)`, so `y' = σ(x)·(1 + x·(1 − σ(x)))`. Unlike ReLU the
//! slope exceeds 1 for moderate positive x (up to ≈1.1 near x = 2.4) and dips below 0 for
//! moderate negative x (SiLU has a minimum at x ≈ −1.28): a numerical check at inputs of std 3
//! visits both.

use super::Mat;

/// The logistic function, computed on the side where `exp` cannot overflow.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `x [n, c]` → `y [n, c]`, elementwise.
pub fn forward(x: &Mat) -> Mat {
    Mat::new(
        x.rows,
        x.cols,
        x.data.iter().map(|&v| v * sigmoid(v)).collect(),
    )
}

/// `dx = dy · σ(x)·(1 + x·(1 − σ(x)))`, given the forward pass's input `x` and `dy [n, c]`.
pub fn backward(x: &Mat, dy: &Mat) -> Mat {
    assert_eq!(
        (x.rows, x.cols),
        (dy.rows, dy.cols),
        "silu: x and dy shapes differ"
    );
    let dx = x
        .data
        .iter()
        .zip(&dy.data)
        .map(|(&v, &d)| {
            let s = sigmoid(v);
            d * s * (1.0 + v * (1.0 - s))
        })
        .collect();
    Mat::new(dy.rows, dy.cols, dx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    #[test]
    fn silu_backward_matches_numerical() {
        let x = Mat::new(6, 7, randn(201, 42, 3.0));
        let dy = Mat::new(6, 7, randn(202, 42, 1.0));
        let n = numerical_grad(&x.data, 1e-3, |v| {
            let y = forward(&Mat::new(6, 7, v.to_vec()));
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        });
        let g = backward(&x, &dy);
        // Truncation h²·|y'''|/6 with |y'''| ≤ ~0.5 for SiLU: ≲1e-7 of a gradient of size ~1.
        // 1e-6 is above that and far below what a lost `x·(1 − σ)` term costs (order 1).
        let r = worst_rel(&g.data, &n);
        println!("silu dx: worst relative difference {r:.2e}");
        assert_close("silu dx", &g.data, &n, 1e-6);
    }

    #[test]
    fn silu_values_and_stable_sigmoid() {
        // silu(1) = 1/(1 + e^−1); silu(−1) = −1/(1 + e); both as Python's math computes them.
        let y = forward(&Mat::new(1, 2, vec![1.0, -1.0]));
        assert!((y.data[0] - 0.731_058_578_630_004_9).abs() < 1e-15);
        assert!((y.data[1] + 0.268_941_421_369_995_1).abs() < 1e-15);
        // Far out in either direction σ saturates without overflowing into NaN.
        assert_eq!(sigmoid(1000.0), 1.0);
        assert_eq!(sigmoid(-1000.0), 0.0);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, randn, tensor, to_vec};

    #[test]
    fn silu_matches_burn_autodiff() {
        let x = Mat::new(4, 6, f32_exact(randn(381, 24, 3.0)));
        let dy = Mat::new(4, 6, randn(382, 24, 1.0));
        let xt = tensor::<AB, 2>(x.data.clone(), [4, 6]).require_grad();
        let y = crate::silu::silu(xt.clone());
        assert_close("y", &to_vec(y.clone()), &forward(&x).data, 1e-13);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [4, 6]))
            .sum()
            .backward();
        assert_close(
            "dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &backward(&x, &dy).data,
            1e-12,
        );
    }
}
