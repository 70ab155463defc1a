//! SwiGLU feed-forward (Llama's MLP): `y = (SiLU(x·W1) ⊙ (x·W3))·W2`, no biases; `W1`, `W3`
//! `[C, H]` (Hugging Face's `gate_proj` and `up_proj`), `W2` `[H, C]` (`down_proj`).
//!
//! With `a = x·W1`, `b = x·W3` and `g = SiLU(a) ⊙ b`, the product rule splits `dg` between the
//! two factors: `da = dg ⊙ b ⊙ SiLU'(a)`, `db = dg ⊙ SiLU(a)` — each factor is blamed through the
//! other's value. Then three Linears: `dW2 = gᵀ·dy`, `dW1 = xᵀ·da`, `dW3 = xᵀ·db`, and x, which fed
//! both `W1` and `W3`, collects both: `dx = da·W1ᵀ + db·W3ᵀ`.

use super::{Mat, silu};

/// Weights, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct SwigluParams {
    /// The gate, `[C, H]`.
    pub w1: Mat,
    /// The value, `[C, H]`.
    pub w3: Mat,
    /// Down-projection, `[H, C]`.
    pub w2: Mat,
}

/// What the backward pass needs.
#[derive(Clone, Debug)]
pub struct SwigluCache {
    pub x: Mat,
    /// `x·W1`, `[n, H]`.
    pub a: Mat,
    /// `x·W3`, `[n, H]`.
    pub b: Mat,
    /// `SiLU(a) ⊙ b`, `[n, H]`, W2's input.
    pub g: Mat,
}

/// Gradients of [`SwigluParams`], plus `dx`.
#[derive(Clone, Debug)]
pub struct SwigluGrads {
    pub dx: Mat,
    pub w1: Mat,
    pub w3: Mat,
    pub w2: Mat,
}

/// `x [n, C]` → `y [n, C]`.
pub fn forward(x: &Mat, p: &SwigluParams) -> (Mat, SwigluCache) {
    let a = x.matmul(&p.w1);
    let b = x.matmul(&p.w3);
    let s = silu::forward(&a);
    let g = Mat::new(
        a.rows,
        a.cols,
        s.data.iter().zip(&b.data).map(|(u, v)| u * v).collect(),
    );
    let y = g.matmul(&p.w2);
    (
        y,
        SwigluCache {
            x: x.clone(),
            a,
            b,
            g,
        },
    )
}

/// Given `dy [n, C]`, the gradients with respect to `x` and the three weights.
pub fn backward(cache: &SwigluCache, p: &SwigluParams, dy: &Mat) -> SwigluGrads {
    let dg = dy.matmul_a_bt(&p.w2);
    let s = silu::forward(&cache.a);
    // Blame on SiLU(a) is dg ⊙ b; SiLU's backward turns it into blame on a.
    let ds = Mat::new(
        dg.rows,
        dg.cols,
        dg.data
            .iter()
            .zip(&cache.b.data)
            .map(|(u, v)| u * v)
            .collect(),
    );
    let da = silu::backward(&cache.a, &ds);
    let db = Mat::new(
        dg.rows,
        dg.cols,
        dg.data.iter().zip(&s.data).map(|(u, v)| u * v).collect(),
    );
    let dx1 = da.matmul_a_bt(&p.w1);
    let dx3 = db.matmul_a_bt(&p.w3);
    SwigluGrads {
        dx: Mat::new(
            dx1.rows,
            dx1.cols,
            dx1.data.iter().zip(&dx3.data).map(|(u, v)| u + v).collect(),
        ),
        w1: cache.x.matmul_at_b(&da),
        w3: cache.x.matmul_at_b(&db),
        w2: cache.g.matmul_at_b(dy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const N: usize = 5;
    const C: usize = 8;
    const H: usize = 12;
    /// A weight of W1 enters SiLU's argument multiplied by an input of size up to ~9, so L'''
    /// along W1 carries that size cubed: at h = 1e-3 the O(h²) truncation measured 2.0e-6 of the
    /// gradient. h = 1e-4 cuts it a hundredfold, while rounding (1e-16·|L|/h) stays near 1e-11,
    /// the same trade attention.rs makes.
    const STEP: f64 = 1e-4;

    fn numeric<P: Clone>(
        p: &P,
        field: impl Fn(&mut P) -> &mut [f64],
        loss: impl Fn(&P) -> f64,
    ) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, STEP, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    #[test]
    fn swiglu_backward_matches_numerical() {
        let p = SwigluParams {
            w1: Mat::new(C, H, randn(351, C * H, 0.3)),
            w3: Mat::new(C, H, randn(352, C * H, 0.5)),
            w2: Mat::new(H, C, randn(353, H * C, 0.5)),
        };
        let x = Mat::new(N, C, randn(354, N * C, 3.0));
        let dy = Mat::new(N, C, randn(355, N * C, 1.0));
        let loss = |x: &Mat, p: &SwigluParams| -> f64 {
            let (y, _) = forward(x, p);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        };
        let (_, cache) = forward(&x, &p);
        let g = backward(&cache, &p, &dy);
        let checks = [
            (
                "dx",
                g.dx.data.clone(),
                numeric(&x, |x| &mut x.data[..], |x| loss(x, &p)),
            ),
            (
                "w1",
                g.w1.data.clone(),
                numeric(&p, |p| &mut p.w1.data[..], |p| loss(&x, p)),
            ),
            (
                "w3",
                g.w3.data.clone(),
                numeric(&p, |p| &mut p.w3.data[..], |p| loss(&x, p)),
            ),
            (
                "w2",
                g.w2.data.clone(),
                numeric(&p, |p| &mut p.w2.data[..], |p| loss(&x, p)),
            ),
        ];
        // L is linear in W2 and in W3 (rounding only); in x and W1 the truncation h²·|L'''|/6
        // picks up SiLU''' times the input size cubed. Measured (printed) at h = 1e-4: 2e-8 at
        // worst (W1). 1e-6 is the ceiling, a millionth of a lost factor.
        for (name, a, n) in &checks {
            println!(
                "swiglu {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-6);
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::feed_forward::FeedForwardConfig;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    /// The Burn feed-forward with `swiglu` on and no biases (the modern recipe's), loaded with
    /// the reference's weights (`c_fc` the gate W1, `c_up` the value W3, `c_proj` W2).
    #[test]
    fn swiglu_matches_burn_autodiff() {
        let (n, c, h) = (6, 8, 12);
        let p = SwigluParams {
            w1: Mat::new(c, h, f32_exact(randn(391, c * h, 0.3))),
            w3: Mat::new(c, h, f32_exact(randn(392, c * h, 0.5))),
            w2: Mat::new(h, c, f32_exact(randn(393, h * c, 0.5))),
        };
        let x = Mat::new(n, c, f32_exact(randn(394, n * c, 3.0)));
        let dy = Mat::new(n, c, randn(395, n * c, 1.0));
        let m = load(
            FeedForwardConfig::new(c, h)
                .with_swiglu(true)
                .with_bias(false)
                .init::<AB>(&Default::default()),
            &[
                ("c_fc.weight", &[c, h], &p.w1.data),
                ("c_up.weight", &[c, h], &p.w3.data),
                ("c_proj.weight", &[h, c], &p.w2.data),
            ],
        );
        let xt = tensor::<AB, 3>(x.data.clone(), [1, n, c]).require_grad();
        let y = m.forward(xt.clone());
        let (want, cache) = forward(&x, &p);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [1, n, c]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-12);
        let got = grads_by_path(&m, &grads);
        assert_eq!(got.len(), 3, "parameters: {:?}", got.keys());
        for (name, want) in [
            ("c_fc.weight", &g.w1.data),
            ("c_up.weight", &g.w3.data),
            ("c_proj.weight", &g.w2.data),
        ] {
            assert_close(name, &got[name], want, 1e-11);
        }
    }
}
