//! Drawing by flow matching: start from noise at `t = 1` and walk the model's velocity field back
//! to `t = 0` in Euler steps. Classifier-free guidance runs the model with and without the label and
//! exaggerates the difference: `v = v_u + g·(v_c − v_u)` (`g = 1` is the plain conditional model,
//! `g = 0` ignores the label).

use burn::prelude::*;
use nervus_models::flow::Velocity;

/// Euler from `t = 1` to `t = 0` in `steps` equal steps: `x ← x + (t_next − t)·v(x, t)`.
/// Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn euler<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    steps: usize,
    mut velocity: impl FnMut(Tensor<B, D>, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    let b = x1.dims()[0];
    let device = x1.device();
    let mut x = x1;
    for i in 0..steps {
        let t = 1.0 - i as f64 / steps as f64;
        let t_next = 1.0 - (i + 1) as f64 / steps as f64;
        let v = velocity(x.clone(), Tensor::full([b], t, &device));
        x = x + v * (t_next - t);
    }
    x
}

/// Draws from noise `x1` for `labels [B, L]`, with guidance `g`: the conditional and unconditional
/// velocities come from one batched call.
pub fn sample<B: Backend, const D: usize, M: Velocity<B, D>>(
    model: &M,
    x1: Tensor<B, D>,
    labels: Tensor<B, 2, Int>,
    steps: usize,
    guidance: f64,
) -> Tensor<B, D> {
    let [b, l] = labels.dims();
    let null = Tensor::<B, 2, Int>::full([b, l], model.null_label(), &labels.device());
    let both = Tensor::cat(vec![labels, null], 0);
    euler(x1, steps, |x, t| {
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
        let guided = vals(sample(&Toy, x1.clone(), labels.clone(), 10, 1.0));
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
