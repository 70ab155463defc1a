//! Drawing by flow matching: start from noise at `t = 1` and walk the model's velocity field back
//! to `t = 0` in Euler steps. Classifier-free guidance runs the model with and without the label and
//! exaggerates the difference: `v = v_u + g·(v_c − v_u)` (`g = 1` is the plain conditional model,
//! `g = 0` ignores the label). A time shift `s` spends the same number of steps differently:
//! `t' = s·t / (1 + (s − 1)·t)` (diffusers' `FlowMatchEulerDiscreteScheduler` `shift`), so `s > 1`
//! takes more, shorter steps at high noise, where a drawing's layout is decided, and fewer near the
//! end; `s = 1` is the even spacing.

use burn::prelude::*;
use nervus_models::flow::Velocity;

/// The shifted time of an evenly spaced `t` in 0..1 (`shift = 1`: `t` itself, to the bit).
pub fn shifted(t: f64, shift: f64) -> f64 {
    shift * t / (1.0 + (shift - 1.0) * t)
}

/// Euler from `t = 1` to `t = 0` in `steps` equal steps: `x ← x + (t_next − t)·v(x, t)`.
/// Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn euler<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    steps: usize,
    velocity: impl FnMut(Tensor<B, D>, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    euler_shifted(x1, steps, 1.0, velocity)
}

/// [`euler`] at the times [`shifted`] by `shift`. Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn euler_shifted<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    steps: usize,
    shift: f64,
    mut velocity: impl FnMut(Tensor<B, D>, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    let b = x1.dims()[0];
    let device = x1.device();
    let mut x = x1;
    for i in 0..steps {
        let t = shifted(1.0 - i as f64 / steps as f64, shift);
        let t_next = shifted(1.0 - (i + 1) as f64 / steps as f64, shift);
        let v = velocity(x.clone(), Tensor::full([b], t, &device));
        x = x + v * (t_next - t);
    }
    x
}

/// Draws from noise `x1` for `labels [B, L]`, with guidance `g`, in `steps` Euler steps at times
/// shifted by `shift` (1: evenly spaced): the conditional and unconditional velocities come from
/// one batched call.
pub fn sample<B: Backend, const D: usize, M: Velocity<B, D>>(
    model: &M,
    x1: Tensor<B, D>,
    labels: Tensor<B, 2, Int>,
    steps: usize,
    guidance: f64,
    shift: f64,
) -> Tensor<B, D> {
    let [b, l] = labels.dims();
    let null = Tensor::<B, 2, Int>::full([b, l], model.null_label(), &labels.device());
    let both = Tensor::cat(vec![labels, null], 0);
    euler_shifted(x1, steps, shift, |x, t| {
        let v = model.velocity(
            Tensor::cat(vec![x.clone(), x], 0),
            Tensor::cat(vec![t.clone(), t], 0),
            both.clone(),
        );
        let mut halves = v.chunk(2, 0).into_iter();
        let (vc, vu) = (
            halves.next().expect("conditional"),
            halves.next().expect("unconditional"),
        );
        vu.clone() + (vc - vu) * guidance
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    type TB = burn_ndarray::NdArray<f64>;

    fn vals<const D: usize>(t: Tensor<TB, D>) -> Vec<f64> {
        t.into_data().iter::<f64>().collect()
    }

    /// For a single data point `x0` the exact flow-matching field is `v(x, t) = (x − x0)/t`; each
    /// Euler step stays on the straight line, so Euler lands exactly on `x0` at `t = 0`.
    #[test]
    fn euler_follows_a_straight_flow_to_its_data_point() {
        let dev = Default::default();
        let x0 = Tensor::<TB, 2>::from_data([[0.5, -1.5, 2.0]], &dev);
        let x1 = Tensor::<TB, 2>::from_data([[1.2, 0.3, -0.7]], &dev);
        let out = euler(x1, 7, |x, t| (x - x0.clone()) / t.unsqueeze_dim::<2>(1));
        let (got, want) = (vals(out), vals(x0));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// The shift keeps both ends, is monotone, puts the evenly spaced midpoint at `s / (1 + s)`,
    /// and at `s = 1` is the identity to the bit (so every drawing made before it existed is
    /// drawn again unchanged).
    #[test]
    fn the_time_shift_keeps_the_ends_and_moves_the_middle() {
        for s in [0.5, 1.0, 2.0, 3.0] {
            assert_eq!(shifted(1.0, s), 1.0);
            assert_eq!(shifted(0.0, s), 0.0);
            assert!((shifted(0.5, s) - s / (1.0 + s)).abs() < 1e-15, "shift {s}");
            let ts: Vec<f64> = (0..=20).map(|i| shifted(i as f64 / 20.0, s)).collect();
            assert!(ts.windows(2).all(|w| w[1] > w[0]), "shift {s}: {ts:?}");
        }
        for i in 0..=1000 {
            let t = i as f64 / 1000.0;
            assert_eq!(shifted(t, 1.0).to_bits(), t.to_bits());
        }
    }

    /// A shifted schedule is still a walk along the straight flow, so it lands exactly on the
    /// data point too; and its steps are what the shift says: the first of 10 at shift 3 goes from
    /// 1 to 0.9·3/(1 + 2·0.9) = 27/28 of the way.
    #[test]
    fn a_shifted_euler_lands_on_the_data_point_and_visits_the_shifted_times() {
        let dev = Default::default();
        let x0 = Tensor::<TB, 2>::from_data([[0.5, -1.5, 2.0]], &dev);
        let x1 = Tensor::<TB, 2>::from_data([[1.2, 0.3, -0.7]], &dev);
        let mut seen = Vec::new();
        let out = euler_shifted(x1, 10, 3.0, |x, t| {
            seen.push(vals(t.clone())[0]);
            (x - x0.clone()) / t.unsqueeze_dim::<2>(1)
        });
        let (got, want) = (vals(out), vals(x0));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[0], 1.0);
        assert!((seen[1] - 27.0 / 28.0).abs() < 1e-15, "{seen:?}");
        // Even spacing would have visited 0.9 second; the shift spends more steps up high.
        assert!(seen[5] > 0.5 + 0.2, "{seen:?}");
    }

    /// A linear field `v = a·x` from t = 1 to 0 has the answer `x1·e^{−a}`; Euler's error is first
    /// order, so doubling the steps halves it.
    #[test]
    fn euler_error_halves_when_steps_double() {
        let dev = Default::default();
        let a: f64 = 0.8;
        let err = |steps| {
            let x1 = Tensor::<TB, 1>::from_data([1.0], &dev);
            let x = vals(euler(x1, steps, |x, _| x * a))[0];
            (x - (-a).exp()).abs()
        };
        let (e1, e2) = (err(20), err(40));
        assert!(
            e1 > 0.0 && (e1 / e2 - 2.0).abs() < 0.1,
            "errors {e1:e}, {e2:e}"
        );
    }

    struct Toy;
    impl Velocity<TB, 2> for Toy {
        fn velocity(
            &self,
            x: Tensor<TB, 2>,
            t: Tensor<TB, 1>,
            labels: Tensor<TB, 2, Int>,
        ) -> Tensor<TB, 2> {
            // Depends on the label, so guidance has something to act on.
            x * 0.3 + labels.float() * 0.1 + t.unsqueeze_dim::<2>(1) * 0.2
        }
        fn null_label(&self) -> i64 {
            10
        }
    }

    #[test]
    fn guidance_one_is_the_conditional_sampler() {
        let dev = Default::default();
        let x1 = Tensor::<TB, 2>::from_data([[0.2, -0.4], [1.0, 0.5]], &dev);
        let labels = Tensor::<TB, 2, Int>::from_data([[3i64], [7]], &dev);
        let guided = vals(sample(&Toy, x1.clone(), labels.clone(), 10, 1.0, 1.0));
        let conditional = vals(euler(x1, 10, |x, t| Toy.velocity(x, t, labels.clone())));
        for (g, c) in guided.iter().zip(&conditional) {
            // v_u + 1·(v_c − v_u) differs from v_c by rounding only.
            assert!((g - c).abs() < 1e-12, "{guided:?} vs {conditional:?}");
        }
        let unguided = vals(sample(
            &Toy,
            Tensor::<TB, 2>::from_data([[0.2, -0.4], [1.0, 0.5]], &dev),
            labels,
            10,
            0.0,
            1.0,
        ));
        assert!(
            unguided
                .iter()
                .zip(&guided)
                .any(|(u, g)| (u - g).abs() > 1e-3),
            "guidance 0 ignores the label"
        );
    }
}
