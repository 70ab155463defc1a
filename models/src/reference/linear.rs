//! Linear: `y = x·W + b`, with `W` stored `[in, out]` as Burn stores it.
//!
//! Backward, from `y_ij = Σ_p x_ip W_pj + b_j`:
//! `dW = xᵀ·dy` (each weight is blamed by every row that used it), `db = Σ_rows dy`,
//! `dx = dy·Wᵀ` (each input passes on the blame of every output it fed).

use super::Mat;

/// Gradients of a linear layer.
#[derive(Clone, Debug)]
pub struct LinearGrads {
    pub dx: Mat,
    pub dw: Mat,
    pub db: Vec<f64>,
}

/// `x [n, in]`, `w [in, out]`, `b [out]` → `y [n, out]`.
pub fn forward(x: &Mat, w: &Mat, b: &[f64]) -> Mat {
    assert_eq!(
        b.len(),
        w.cols,
        "linear: bias length is not the output width"
    );
    let mut y = x.matmul(w);
    for r in 0..y.rows {
        for (c, bc) in b.iter().enumerate() {
            *y.at_mut(r, c) += bc;
        }
    }
    y
}

/// Given `dy [n, out]`, the gradients with respect to `x`, `w` and `b`.
pub fn backward(x: &Mat, w: &Mat, dy: &Mat) -> LinearGrads {
    let mut db = vec![0.0; dy.cols];
    for r in 0..dy.rows {
        for (c, d) in db.iter_mut().enumerate() {
            *d += dy.at(r, c);
        }
    }
    LinearGrads {
        dx: dy.matmul_a_bt(w),
        dw: x.matmul_at_b(dy),
        db,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{AB, assert_close, numerical_grad, randn, tensor, to_vec};
    use burn::module::Param;
    use burn::nn::LinearConfig;

    // A telling point: inputs with std 3 and weights far from any unit scale.
    fn point() -> (Mat, Mat, Vec<f64>, Mat) {
        (
            Mat::new(4, 5, randn(1, 20, 3.0)),
            Mat::new(5, 3, randn(2, 15, 0.7)),
            randn(3, 3, 0.5),
            Mat::new(4, 3, randn(4, 12, 1.0)),
        )
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn linear_backward_matches_numerical() {
        let (x, w, b, dy) = point();
        let g = backward(&x, &w, &dy);
        let h = 1e-3;
        // The loss (y·dy).sum() is linear in each argument, so the centred difference is exact up
        // to rounding (~1e-12 here); 1e-9 leaves room for nothing but that.
        let nx = numerical_grad(&x.data, h, |v| {
            dot(&forward(&Mat::new(4, 5, v.to_vec()), &w, &b), &dy)
        });
        let nw = numerical_grad(&w.data, h, |v| {
            dot(&forward(&x, &Mat::new(5, 3, v.to_vec()), &b), &dy)
        });
        let nb = numerical_grad(&b, h, |v| dot(&forward(&x, &w, v), &dy));
        assert_close("dx", &g.dx.data, &nx, 1e-9);
        assert_close("dw", &g.dw.data, &nw, 1e-9);
        assert_close("db", &g.db, &nb, 1e-9);
    }

    #[test]
    fn linear_backward_matches_burn_autodiff() {
        let (x, w, b, dy) = point();
        let mut lin = LinearConfig::new(5, 3).init::<AB>(&Default::default());
        lin.weight = Param::from_tensor(tensor(w.data.clone(), [5, 3]));
        lin.bias = Some(Param::from_tensor(tensor(b.clone(), [3])));
        let xt = tensor::<AB, 2>(x.data.clone(), [4, 5]).require_grad();
        let y = lin.forward(xt.clone());
        assert_close("y", &to_vec(y.clone()), &forward(&x, &w, &b).data, 1e-13);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [4, 3]))
            .sum()
            .backward();
        let g = backward(&x, &w, &dy);
        // Both sides are f64; they differ only in summation order, ~1e-16 relative.
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-13);
        assert_close(
            "dw",
            &to_vec(lin.weight.grad(&grads).unwrap()),
            &g.dw.data,
            1e-13,
        );
        let db = lin.bias.as_ref().unwrap().grad(&grads).unwrap();
        assert_close("db", &to_vec(db), &g.db, 1e-13);
    }
}
