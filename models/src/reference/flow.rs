//! Flow matching (rectified flow) with the time direction diffusers' `FlowMatchEulerDiscrete`
//! uses: `t = 0` is data and `t = 1` is pure noise,
//!
//! ```text
//! x_t = (1 − t)·x + t·ε,     v = dx_t/dt = ε − x,
//! ```
//!
//! so the network learns the constant velocity of the straight line from data to noise, and
//! `loss = mean((pred − v)²)` over every element. Its derivative in `pred` is `2(pred − v)/n`
//! (n = the number of elements; the mean's `1/n` is part of the gradient, as in softmax_xent).
//!
//! Sampling integrates `dx/dt = v(x, t)` backwards, from noise at `t = 1` to `t = 0`, with
//! Euler steps `x ← x + (t_next − t)·v(x, t)` (`t_next < t`, so the step subtracts `v`).
//! Classifier-free guidance runs the model with and without the condition and extrapolates:
//! `v = v_u + g·(v_c − v_u)`; `g = 1` is the conditional model, `g = 0` the unconditional.

/// `x_t = (1 − t_b)·x + t_b·ε`, per sample: `x` and `eps` hold `t.len()` equal-sized samples.
pub fn interpolate(x: &[f64], eps: &[f64], t: &[f64]) -> Vec<f64> {
    assert_eq!(x.len(), eps.len(), "flow: x and eps lengths differ");
    assert!(
        !t.is_empty() && x.len().is_multiple_of(t.len()),
        "flow: t must have one entry per sample"
    );
    let per = x.len() / t.len();
    x.iter()
        .zip(eps)
        .enumerate()
        .map(|(i, (&xi, &ei))| {
            let tb = t[i / per];
            (1.0 - tb) * xi + tb * ei
        })
        .collect()
}

/// The target velocity `v = ε − x`.
pub fn target_velocity(x: &[f64], eps: &[f64]) -> Vec<f64> {
    assert_eq!(x.len(), eps.len(), "flow: x and eps lengths differ");
    x.iter().zip(eps).map(|(a, e)| e - a).collect()
}

/// `mean((pred − v)²)` over all elements.
pub fn loss(pred: &[f64], v: &[f64]) -> f64 {
    assert_eq!(pred.len(), v.len(), "flow: pred and v lengths differ");
    pred.iter()
        .zip(v)
        .map(|(p, t)| (p - t) * (p - t))
        .sum::<f64>()
        / pred.len() as f64
}

/// `d loss / d pred = 2(pred − v)/n`.
pub fn loss_backward(pred: &[f64], v: &[f64]) -> Vec<f64> {
    let n = pred.len() as f64;
    pred.iter().zip(v).map(|(p, t)| 2.0 * (p - t) / n).collect()
}

/// Euler integration of `dx/dt = v_fn(x, t)` from `t = 1` (`x1`, noise) down to `t = 0` in
/// `steps` equal steps, at `t_k = (steps − k)/steps`. The field is never evaluated at `t = 0`.
pub fn euler(mut v_fn: impl FnMut(&[f64], f64) -> Vec<f64>, x1: &[f64], steps: usize) -> Vec<f64> {
    assert!(steps > 0, "flow: at least one step");
    let mut x = x1.to_vec();
    for k in 0..steps {
        let t = (steps - k) as f64 / steps as f64;
        let t_next = (steps - k - 1) as f64 / steps as f64;
        let v = v_fn(&x, t);
        assert_eq!(v.len(), x.len(), "flow: velocity has the wrong length");
        for (xi, vi) in x.iter_mut().zip(&v) {
            *xi += (t_next - t) * vi;
        }
    }
    x
}

/// Classifier-free guidance: `v_u + g·(v_c − v_u)`, the form diffusers computes.
pub fn guidance(v_u: &[f64], v_c: &[f64], g: f64) -> Vec<f64> {
    assert_eq!(v_u.len(), v_c.len(), "flow: velocity lengths differ");
    v_u.iter().zip(v_c).map(|(u, c)| u + g * (c - u)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    #[test]
    fn interpolation_ends_are_data_and_noise_exactly() {
        let x = randn(311, 12, 3.0);
        let e = randn(312, 12, 1.0);
        // (1 − 0)·x + 0·ε = x and 0·x + 1·ε = ε, with no rounding at all.
        assert_eq!(interpolate(&x, &e, &[0.0, 0.0]), x);
        assert_eq!(interpolate(&x, &e, &[1.0, 1.0]), e);
        // Per-sample t: sample 0 is data, sample 1 noise.
        let mixed = interpolate(&x, &e, &[0.0, 1.0]);
        assert_eq!(&mixed[..6], &x[..6]);
        assert_eq!(&mixed[6..], &e[6..]);
        // The velocity is the derivative in t: x_t moves by (ε − x)·Δt.
        let v = target_velocity(&x, &e);
        let (a, b) = (interpolate(&x, &e, &[0.3]), interpolate(&x, &e, &[0.5]));
        for i in 0..12 {
            assert!(((b[i] - a[i]) / 0.2 - v[i]).abs() < 1e-12);
        }
    }

    #[test]
    fn loss_backward_matches_numerical() {
        let pred = randn(313, 10, 3.0);
        let v = randn(314, 10, 3.0);
        let n = numerical_grad(&pred, 1e-3, |p| loss(p, &v));
        let g = loss_backward(&pred, &v);
        // A quadratic: the centred difference is exact but for rounding (~1e-12 here).
        let r = worst_rel(&g, &n);
        println!("flow loss dpred: worst relative difference {r:.2e}");
        assert_close("flow dpred", &g, &n, 1e-9);
    }

    #[test]
    fn euler_lands_on_the_single_data_point() {
        // With one data point x0, the exact flow-matching field is v(x, t) = (x − x0)/t: the
        // straight line from x0 to x1, traversed at constant speed. Euler is exact on straight
        // lines, so every step lands on it and the last (t = 1/steps → 0) on x0.
        let x0 = randn(315, 6, 3.0);
        let x1 = randn(316, 6, 1.0);
        for steps in [1, 3, 10] {
            let got = euler(
                |x, t| x.iter().zip(&x0).map(|(a, b)| (a - b) / t).collect(),
                &x1,
                steps,
            );
            let r = worst_rel(&got, &x0);
            println!("euler, single point, {steps} steps: worst relative difference {r:.2e}");
            // Rounding only: a few ulps of the values' size.
            assert!(r < 1e-14, "{steps} steps: {r:e}");
        }
    }

    #[test]
    fn euler_is_first_order_on_a_linear_field() {
        // dx/dt = a·x from x(1) = x1 down to t = 0: x(0) = x1·e^(−a). Euler gives
        // x1·(1 − a/n)^n, whose error is O(1/n): doubling the steps halves it.
        let (a, x1): (f64, [f64; 3]) = (1.3, [0.7, -2.0, 3.0]);
        let exact: Vec<f64> = x1.iter().map(|v| v * (-a).exp()).collect();
        let err = |n: usize| {
            let got = euler(|x, _| x.iter().map(|v| a * v).collect(), &x1, n);
            worst_rel(&got, &exact)
        };
        let mut prev = err(25);
        for n in [50, 100, 200] {
            let e = err(n);
            let ratio = prev / e;
            println!("euler, v = a·x: {n} steps, error {e:.3e}, halved by {ratio:.3}");
            assert!((1.9..2.1).contains(&ratio), "{n} steps: ratio {ratio}");
            prev = e;
        }
    }

    #[test]
    fn guidance_one_is_conditional_zero_is_unconditional() {
        let vu = randn(317, 16, 3.0);
        let vc = randn(318, 16, 3.0);
        // g = 0: u + 0·(c − u) = u exactly.
        assert_eq!(guidance(&vu, &vc, 0.0), vu);
        // g = 1: u + (c − u). Exact whenever c − u is (Sterbenz: c and u within a factor 2 of
        // each other); otherwise the subtraction rounds and u + (c − u) can miss c by an ulp.
        let g1 = guidance(&vu, &vc, 1.0);
        let exact = g1.iter().zip(&vc).filter(|(a, b)| a == b).count();
        for ((g, c), u) in g1.iter().zip(&vc).zip(&vu) {
            assert!(
                (g - c).abs() <= f64::EPSILON * (c.abs() + u.abs()),
                "{g} vs {c}"
            );
        }
        println!("guidance g = 1: {exact} of 16 bit-equal to v_c, the rest within an ulp");
        let near: Vec<f64> = vu.iter().map(|u| u * 1.5).collect();
        assert_eq!(guidance(&vu, &near, 1.0), near, "within a factor 2: exact");
        // g = 3 extrapolates past the conditional model.
        let g3 = guidance(&[1.0], &[2.0], 3.0);
        assert_eq!(g3, vec![4.0]);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, randn, tensor, to_vec};

    #[test]
    fn flow_loss_matches_burn_autodiff() {
        let (b, n) = (3, 5);
        let x = randn(511, b * n, 1.0);
        let eps = randn(512, b * n, 1.0);
        let t = vec![0.1, 0.5, 0.93];
        let pred = randn(513, b * n, 1.0);
        let xt = interpolate(&x, &eps, &t);
        let v = target_velocity(&x, &eps);
        let (bx, be) = (
            tensor::<AB, 2>(x.clone(), [b, n]),
            tensor::<AB, 2>(eps.clone(), [b, n]),
        );
        let (burn_xt, burn_v) = crate::flow::noised(bx, be, tensor::<AB, 1>(t, [b]));
        assert_close("x_t", &to_vec(burn_xt), &xt, 1e-15);
        assert_close("v", &to_vec(burn_v.clone()), &v, 1e-15);
        let pt = tensor::<AB, 2>(pred.clone(), [b, n]).require_grad();
        let l = crate::flow::mse(pt.clone(), burn_v);
        assert!((l.clone().into_scalar() - loss(&pred, &v)).abs() < 1e-14);
        let grads = l.backward();
        assert_close(
            "dpred",
            &to_vec(pt.grad(&grads).unwrap()),
            &loss_backward(&pred, &v),
            1e-14,
        );
    }
}
