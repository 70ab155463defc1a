//! The MNIST network as the reference computes it: Linear → ReLU → Linear → softmax cross-entropy,
//! each step one of the files beside this one, and its backward pass the same steps in reverse.

use super::{Mat, linear, relu, softmax_xent};

/// Weights of a two-layer perceptron, in Burn's `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct MlpParams {
    pub w1: Mat,
    pub b1: Vec<f64>,
    pub w2: Mat,
    pub b2: Vec<f64>,
}

/// Gradients of the loss with respect to every weight of [`MlpParams`].
#[derive(Clone, Debug)]
pub struct MlpGrads {
    pub w1: Mat,
    pub b1: Vec<f64>,
    pub w2: Mat,
    pub b2: Vec<f64>,
}

/// The mean cross-entropy loss of `x [n, in]` against `targets`.
pub fn loss(p: &MlpParams, x: &Mat, targets: &[usize]) -> f64 {
    let h = relu::forward(&linear::forward(x, &p.w1, &p.b1));
    softmax_xent::forward(&linear::forward(&h, &p.w2, &p.b2), targets).0
}

/// The loss and its gradient with respect to every weight.
pub fn loss_and_grads(p: &MlpParams, x: &Mat, targets: &[usize]) -> (f64, MlpGrads) {
    let a = linear::forward(x, &p.w1, &p.b1);
    let h = relu::forward(&a);
    let z = linear::forward(&h, &p.w2, &p.b2);
    let (l, probs) = softmax_xent::forward(&z, targets);
    let dz = softmax_xent::backward(&probs, targets, 1.0);
    let g2 = linear::backward(&h, &p.w2, &dz);
    let da = relu::backward(&a, &g2.dx);
    let g1 = linear::backward(x, &p.w1, &da);
    (
        l,
        MlpGrads {
            w1: g1.dw,
            b1: g1.db,
            w2: g2.dw,
            b2: g2.db,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlp::{ClassBatch, MlpConfig};
    use crate::testing::{AB, assert_close, numerical_grad, randn, tensor, to_vec};
    use burn::module::Param;
    use burn::prelude::*;

    const IN: usize = 6;
    const HID: usize = 5;
    const OUT: usize = 4;
    const N: usize = 3;

    fn point() -> (MlpParams, Mat, Vec<usize>) {
        let p = MlpParams {
            w1: Mat::new(IN, HID, randn(11, IN * HID, 0.8)),
            b1: randn(12, HID, 0.5),
            w2: Mat::new(HID, OUT, randn(13, HID * OUT, 0.8)),
            b2: randn(14, OUT, 0.5),
        };
        (p, Mat::new(N, IN, randn(15, N * IN, 3.0)), vec![1, 3, 0])
    }

    /// Every weight of a small MLP, nudged by ±1e-3, against what the backward pass claimed.
    #[test]
    fn analytic_gradient_matches_numerical() {
        let (p, x, t) = point();
        // ReLU's kink would make a centred difference wrong for any hidden unit within h of zero;
        // check the point is clear of it, so the tolerance below can be tight.
        // A nudge of h moves a pre-activation by at most h·max|x| (a weight) or h (a bias).
        let h = 1e-3;
        let pre = linear::forward(&x, &p.w1, &p.b1);
        let closest = pre.data.iter().fold(f64::INFINITY, |m, v| m.min(v.abs()));
        let reach = h * x.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        assert!(
            closest > 2.0 * reach,
            "a hidden unit sits {closest} from the kink: pick another point"
        );
        let (_, g) = loss_and_grads(&p, &x, &t);
        let nw1 = numerical_grad(&p.w1.data, h, |v| {
            loss(
                &MlpParams {
                    w1: Mat::new(IN, HID, v.to_vec()),
                    ..p.clone()
                },
                &x,
                &t,
            )
        });
        let nb1 = numerical_grad(&p.b1, h, |v| {
            loss(
                &MlpParams {
                    b1: v.to_vec(),
                    ..p.clone()
                },
                &x,
                &t,
            )
        });
        let nw2 = numerical_grad(&p.w2.data, h, |v| {
            loss(
                &MlpParams {
                    w2: Mat::new(HID, OUT, v.to_vec()),
                    ..p.clone()
                },
                &x,
                &t,
            )
        });
        let nb2 = numerical_grad(&p.b2, h, |v| {
            loss(
                &MlpParams {
                    b2: v.to_vec(),
                    ..p.clone()
                },
                &x,
                &t,
            )
        });
        // O(h²) truncation of a smooth loss: ~1e-7 of the gradient's size here.
        for (name, a, n) in [
            ("w1", &g.w1.data, &nw1),
            ("b1", &g.b1, &nb1),
            ("w2", &g.w2.data, &nw2),
            ("b2", &g.b2, &nb2),
        ] {
            assert_close(name, a, n, 1e-6);
        }
    }

    /// The Burn MLP's autodiff gradients equal the reference's on the same weights and batch.
    #[test]
    fn burn_mlp_gradients_equal_the_reference() {
        let (p, x, t) = point();
        let mut m = MlpConfig::new()
            .with_input(IN)
            .with_hidden(HID)
            .with_classes(OUT)
            .init::<AB>(&Default::default());
        m.fc1.weight = Param::from_tensor(tensor(p.w1.data.clone(), [IN, HID]));
        m.fc1.bias = Some(Param::from_tensor(tensor(p.b1.clone(), [HID])));
        m.fc2.weight = Param::from_tensor(tensor(p.w2.data.clone(), [HID, OUT]));
        m.fc2.bias = Some(Param::from_tensor(tensor(p.b2.clone(), [OUT])));
        let batch = ClassBatch {
            inputs: tensor(x.data.clone(), [N, IN]),
            targets: Tensor::from_data(
                TensorData::new(t.iter().map(|&v| v as i64).collect(), [N]),
                &Default::default(),
            ),
        };
        let out = m.classify(batch);
        let (want_loss, g) = loss_and_grads(&p, &x, &t);
        let got_loss = out.loss.clone().into_scalar();
        assert!(
            (got_loss - want_loss).abs() <= 1e-13 * want_loss,
            "{got_loss} vs {want_loss}"
        );
        let grads = out.loss.backward();
        // f64 on both sides: only the order of summation differs (~1e-16); 1e-12 is generous
        // yet a millionth of what any missing factor would cost.
        let b = |l: &burn::nn::Linear<AB>| to_vec(l.bias.as_ref().unwrap().grad(&grads).unwrap());
        assert_close(
            "fc1.weight",
            &to_vec(m.fc1.weight.grad(&grads).unwrap()),
            &g.w1.data,
            1e-12,
        );
        assert_close("fc1.bias", &b(&m.fc1), &g.b1, 1e-12);
        assert_close(
            "fc2.weight",
            &to_vec(m.fc2.weight.grad(&grads).unwrap()),
            &g.w2.data,
            1e-12,
        );
        assert_close("fc2.bias", &b(&m.fc2), &g.b2, 1e-12);
    }
}
