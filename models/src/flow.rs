//! Flow matching, the objective FLUX and Qwen-Image were trained with.
//!
//! Direction of time, stated once: `x_t = (1 − t)·x + t·ε`, so `t = 0` is the data and `t = 1` is
//! pure noise. The model is asked for the velocity of that straight line, `v = ε − x`, at a point on
//! it; training is a mean squared error against that. Drawing walks the line backwards from noise
//! (see `nervus_inference::flow`). Timesteps reach the model on diffusers' 0..1000 scale.

use burn::prelude::*;

/// A batch for flow matching: clean samples, their noise, noise levels and labels.
#[derive(Clone, Debug)]
pub struct FlowBatch<B: Backend, const D: usize> {
    /// Clean samples, scaled to −1..1.
    pub x: Tensor<B, D>,
    /// Standard normal noise of the same shape.
    pub noise: Tensor<B, D>,
    /// `[B]`, noise levels in 0..1.
    pub t: Tensor<B, 1>,
    /// `[B, L]`, class ids (the null class where the label was dropped).
    pub labels: Tensor<B, 2, Int>,
}

/// `t [B]` broadcastable against a `[B, ..]` tensor of rank `D`.
pub fn per_sample<B: Backend, const D: usize>(t: Tensor<B, 1>) -> Tensor<B, D> {
    let mut shape = [1usize; D];
    shape[0] = t.dims()[0];
    t.reshape(shape)
}

/// The point at level `t` on the line from `x` to `noise`, and the velocity the model should
/// predict there: `((1 − t)·x + t·ε, ε − x)`.
pub fn noised<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    noise: Tensor<B, D>,
    t: Tensor<B, 1>,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let t = per_sample::<B, D>(t);
    let xt = x.clone() * (t.clone().neg() + 1.0) + noise.clone() * t;
    (xt, noise - x)
}

/// Mean squared error over every element.
pub fn mse<B: Backend, const D: usize>(pred: Tensor<B, D>, target: Tensor<B, D>) -> Tensor<B, 1> {
    (pred - target).square().mean()
}

/// Mean squared error of each sample: over every element but those of the first axis.
///
/// Shapes: `pred`, `target [B, ..]` → `[B]`.
pub fn mse_per_sample<B: Backend, const D: usize>(
    pred: Tensor<B, D>,
    target: Tensor<B, D>,
) -> Tensor<B, 1> {
    let dims = pred.dims();
    let b = dims[0];
    let rest = dims[1..].iter().product::<usize>();
    (pred - target)
        .square()
        .reshape([b, rest])
        .mean_dim(1)
        .reshape([b])
}

/// A model that predicts the flow-matching velocity: what the sampler needs.
pub trait Velocity<B: Backend, const D: usize> {
    /// Shapes: `x [B, ..]`, `t [B]` in 0..1 (1 = noise), `labels [B, L]` → velocity like `x`.
    fn velocity(&self, x: Tensor<B, D>, t: Tensor<B, 1>, labels: Tensor<B, 2, Int>)
    -> Tensor<B, D>;

    /// The label id meaning "no label".
    fn null_label(&self) -> i64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TB, to_vec};

    #[test]
    fn time_runs_from_data_at_zero_to_noise_at_one() {
        let dev = Default::default();
        let x = Tensor::<TB, 2>::from_data([[1.0, -2.0], [0.5, 3.0]], &dev);
        let e = Tensor::<TB, 2>::from_data([[0.3, 0.7], [-1.0, 2.0]], &dev);
        let (at0, v) = noised(x.clone(), e.clone(), Tensor::from_data([0.0, 0.0], &dev));
        let (at1, _) = noised(x.clone(), e.clone(), Tensor::from_data([1.0, 1.0], &dev));
        assert_eq!(to_vec(at0), to_vec(x.clone()));
        assert_eq!(to_vec(at1), to_vec(e.clone()));
        assert_eq!(to_vec(v), to_vec(e - x));
    }
}
