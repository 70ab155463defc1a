//! Logit soft-capping (Gemma 2; Grok): `y = c·tanh(z/c)`.
//!
//! For `|z| ≪ c` it is the identity (`tanh u ≈ u − u³/3`, so `y ≈ z − z³/(3c²)`), and it never
//! leaves `(−c, c)`: large logits are squashed smoothly instead of clipped, so their gradient
//! shrinks but never becomes exactly zero. The slope is `dy/dz = 1 − tanh²(z/c) = 1 − (y/c)²`,
//! computable from the output alone, which is what the backward pass keeps.

use super::Mat;

/// `z [n, k]` → `c·tanh(z/c)`, elementwise.
pub fn forward(z: &Mat, cap: f64) -> Mat {
    assert!(cap > 0.0, "softcap: the cap must be positive");
    Mat::new(
        z.rows,
        z.cols,
        z.data.iter().map(|v| cap * (v / cap).tanh()).collect(),
    )
}

/// `dz = dy·(1 − (y/c)²)`, given the forward pass's output `y`.
pub fn backward(y: &Mat, cap: f64, dy: &Mat) -> Mat {
    Mat::new(
        dy.rows,
        dy.cols,
        y.data
            .iter()
            .zip(&dy.data)
            .map(|(v, d)| {
                let t = v / cap;
                d * (1.0 - t * t)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    #[test]
    fn softcap_backward_matches_numerical() {
        // Logits of std 3 against a cap of 4: inputs in the identity range, the bend and the
        // flat tail (Gemma 2's caps are 50 and 30, for logits of a corresponding size).
        let cap = 4.0;
        let z = Mat::new(5, 6, randn(371, 30, 3.0));
        let dy = Mat::new(5, 6, randn(372, 30, 1.0));
        let n = numerical_grad(&z.data, 1e-3, |v| {
            let y = forward(&Mat::new(5, 6, v.to_vec()), cap);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        });
        let g = backward(&forward(&z, cap), cap, &dy);
        // Truncation h²·|y'''|/6 with |y'''| ≤ 2/c² = 0.125: ≲2e-8 of a slope of size ~1.
        let r = worst_rel(&g.data, &n);
        println!("softcap dz: worst relative difference {r:.2e}");
        assert_close("softcap dz", &g.data, &n, 1e-6);
    }

    #[test]
    fn identity_for_small_logits_and_bounded_by_the_cap() {
        let cap = 30.0;
        let z = Mat::new(1, 5, vec![-0.3, -0.01, 0.0, 0.02, 0.5]);
        let y = forward(&z, cap);
        for (a, b) in y.data.iter().zip(&z.data) {
            // |y − z| ≤ |z|³/(3c²): under 5e-5 for |z| ≤ 0.5 against c = 30.
            assert!((a - b).abs() <= b.abs().powi(3) / (3.0 * cap * cap) + 1e-18);
        }
        let big = forward(&Mat::new(1, 4, vec![-1e6, -90.0, 90.0, 1e6]), cap);
        assert!(big.data.iter().all(|v| v.abs() <= cap));
        // tanh(3) ≈ 0.995: three caps out, the output is within 0.5% of the cap.
        assert!((big.data[2] - cap).abs() < 0.005 * cap);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, randn, tensor, to_vec};

    #[test]
    fn softcap_matches_burn_autodiff() {
        // The cap the modern GPT uses (30) against logits of std 40: the bend and the flat tail.
        let cap = 30.0;
        let z = Mat::new(5, 6, f32_exact(randn(373, 30, 40.0)));
        let dy = Mat::new(5, 6, randn(374, 30, 1.0));
        let zt = tensor::<AB, 2>(z.data.clone(), [5, 6]).require_grad();
        let y = crate::softcap::softcap(zt.clone(), cap);
        let want = forward(&z, cap);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-13);
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [5, 6]))
            .sum()
            .backward();
        assert_close(
            "dz",
            &to_vec(zt.grad(&grads).unwrap()),
            &backward(&want, cap, &dy).data,
            1e-12,
        );
    }
}
