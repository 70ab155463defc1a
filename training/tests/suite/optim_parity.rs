//! The optimizer path against the reference implementation's own steps: three steps of the
//! workspace's AdamW (matrices-only decay, global-norm clipping) on the MLP, compared after every
//! step with `nervus_models::reference::adamw` driven by the reference MLP's hand-derived
//! gradients. And SGD with momentum likewise. f64 backend, one float type in this binary.
//!
//! Tolerance 1e-6 relative: Burn's AdamW keeps β₁, β₂ and ε as f32 and forms the bias corrections
//! in f32 (0.9f32 = 0.89999998), so each step differs from the f64 reference by ~1e-7 relative;
//! a missing decay, a per-tensor clip or a decayed bias differs by 1e-3 or more.

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Param};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use nervus_models::compare::{randn, worst_rel};
use nervus_models::mlp::{ClassBatch, Mlp, MlpConfig};
use nervus_models::reference::Mat;
use nervus_models::reference::adamw::{
    AdamState, AdamW, clip_global_norm, sgd_momentum_step, step,
};
use nervus_models::reference::mlp::{MlpParams, loss_and_grads};
use nervus_training::optim::OptimizerSpec;

type TB = burn_ndarray::NdArray<f64>;
type AB = Autodiff<TB>;

const IN: usize = 6;
const HID: usize = 5;
const OUT: usize = 4;
const N: usize = 3;

fn f32x(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| x as f32 as f64).collect()
}

fn point() -> (MlpParams, Mat, Vec<usize>) {
    (
        MlpParams {
            w1: Mat::new(IN, HID, f32x(randn(61, IN * HID, 0.8))),
            b1: f32x(randn(62, HID, 0.5)),
            w2: Mat::new(HID, OUT, f32x(randn(63, HID * OUT, 0.8))),
            b2: f32x(randn(64, OUT, 0.5)),
        },
        Mat::new(N, IN, randn(65, N * IN, 3.0)),
        vec![1, 3, 0],
    )
}

fn t<const D: usize>(v: &[f64], shape: [usize; D]) -> Tensor<AB, D> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), &Default::default())
}

// Burn draws initial weights from one process-wide generator, lazily: a test that seeds it holds
// this lock until every parameter it drew has its value, and a test that makes a module holds it
// while the module is made, so that no draws interleave.
use crate::INIT;

fn burn_mlp(p: &MlpParams) -> Mlp<AB> {
    let _held = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = MlpConfig::new()
        .with_input(IN)
        .with_hidden(HID)
        .with_classes(OUT)
        .init::<AB>(&Default::default());
    m.fc1.weight = Param::from_tensor(t(&p.w1.data, [IN, HID]));
    m.fc1.bias = Some(Param::from_tensor(t(&p.b1, [HID])));
    m.fc2.weight = Param::from_tensor(t(&p.w2.data, [HID, OUT]));
    m.fc2.bias = Some(Param::from_tensor(t(&p.b2, [OUT])));
    m
}

fn params_of(m: &Mlp<AB>) -> Vec<Vec<f64>> {
    let m = m.valid();
    let v = |x: Tensor<TB, 2>| x.into_data().iter::<f64>().collect::<Vec<f64>>();
    let b = |x: Tensor<TB, 1>| x.into_data().iter::<f64>().collect::<Vec<f64>>();
    vec![
        v(m.fc1.weight.val()),
        b(m.fc1.bias.as_ref().unwrap().val()),
        v(m.fc2.weight.val()),
        b(m.fc2.bias.as_ref().unwrap().val()),
    ]
}

fn burn_step(
    m: Mlp<AB>,
    optim: &mut impl Optimizer<Mlp<AB>, AB>,
    x: &Mat,
    y: &[usize],
    lr: f64,
) -> Mlp<AB> {
    let batch = ClassBatch {
        inputs: t(&x.data, [N, IN]),
        targets: Tensor::from_data(
            TensorData::new(y.iter().map(|&v| v as i64).collect(), [N]),
            &Default::default(),
        ),
    };
    let grads = GradientsParams::from_grads(m.classify(batch).loss.backward(), &m);
    optim.step(lr, m, grads)
}

#[test]
fn adamw_steps_with_clipping_match_the_reference() {
    let _beside = crate::beside_others();
    let (mut p, x, y) = point();
    let h = AdamW {
        lr: 0.05,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.3,
    };
    // A threshold the first gradients exceed, so clipping acts.
    let clip = 0.2;
    let mut model = burn_mlp(&p);
    let mut optim = OptimizerSpec::AdamW {
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        weight_decay: h.weight_decay,
    }
    .build::<Mlp<AB>, AB>(Some(clip));
    let mut states: Vec<AdamState> = [IN * HID, HID, HID * OUT, OUT]
        .iter()
        .map(|&n| AdamState::new(n))
        .collect();
    let mut clipped = false;
    for k in 0..3 {
        model = burn_step(model, &mut optim, &x, &y, h.lr);
        let (_, g) = loss_and_grads(&p, &x, &y);
        let (mut g1, mut gb1, mut g2, mut gb2) = (g.w1.data, g.b1, g.w2.data, g.b2);
        let norm = clip_global_norm(&mut [&mut g1, &mut gb1, &mut g2, &mut gb2], clip);
        clipped |= norm > clip;
        step(&mut p.w1.data, &g1, &mut states[0], &h, true);
        step(&mut p.b1, &gb1, &mut states[1], &h, false);
        step(&mut p.w2.data, &g2, &mut states[2], &h, true);
        step(&mut p.b2, &gb2, &mut states[3], &h, false);
        let got = params_of(&model);
        for (name, (g, w)) in ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
            .iter()
            .zip(got.iter().zip([&p.w1.data, &p.b1, &p.w2.data, &p.b2]))
        {
            let r = worst_rel(g, w);
            assert!(r <= 1e-6, "step {}: {name} differs by {r:e}", k + 1);
        }
    }
    assert!(clipped, "the point must exercise clipping");
}

#[test]
fn sgd_momentum_steps_match_the_reference() {
    let _beside = crate::beside_others();
    let (mut p, x, y) = point();
    let (lr, mu) = (0.1, 0.9);
    let mut model = burn_mlp(&p);
    let mut optim = OptimizerSpec::Sgd { momentum: mu }.build::<Mlp<AB>, AB>(None);
    let mut bufs: Vec<Option<Vec<f64>>> = vec![None; 4];
    for k in 0..3 {
        model = burn_step(model, &mut optim, &x, &y, lr);
        let (_, g) = loss_and_grads(&p, &x, &y);
        sgd_momentum_step(&mut p.w1.data, &g.w1.data, &mut bufs[0], lr, mu);
        sgd_momentum_step(&mut p.b1, &g.b1, &mut bufs[1], lr, mu);
        sgd_momentum_step(&mut p.w2.data, &g.w2.data, &mut bufs[2], lr, mu);
        sgd_momentum_step(&mut p.b2, &g.b2, &mut bufs[3], lr, mu);
        let got = params_of(&model);
        for (g, w) in got.iter().zip([&p.w1.data, &p.b1, &p.w2.data, &p.b2]) {
            // f64 throughout (momentum 0.9 is an f64 in Burn's SGD): rounding only.
            assert!(
                worst_rel(g, w) <= 1e-12,
                "step {}: {:e}",
                k + 1,
                worst_rel(g, w)
            );
        }
    }
}

/// Three Muon steps on two non-square Burn weights (`[in, out]`), against the f64 reference run
/// on their PyTorch-layout transposes. One is wide and one tall the PyTorch way round, so an
/// inverted `√max(1, rows/cols)` scale shows (it is √(7/3) for one and 1 for the other).
#[test]
fn muon_steps_match_the_reference() {
    let _beside = crate::beside_others();
    use burn::optim::SimpleOptimizer;
    use nervus_models::reference::muon as reference;
    use nervus_training::muon::Muon;
    let h = reference::Muon {
        lr: 0.02,
        momentum: 0.95,
        nesterov: true,
        weight_decay: 0.1,
    };
    let ours = Muon {
        momentum: h.momentum,
        nesterov: h.nesterov,
        weight_decay: h.weight_decay,
    };
    for (n_in, n_out, seed) in [(5usize, 3usize, 70u64), (3, 7, 80)] {
        let w0 = randn(seed, n_in * n_out, 0.5);
        let mut w = Tensor::<TB, 2>::from_data(
            TensorData::new(w0.clone(), [n_in, n_out]),
            &Default::default(),
        );
        let mut state = None;
        // The reference holds W as PyTorch does: [out, in].
        let mut w_ref = Mat::new(n_in, n_out, w0).transpose();
        let mut buf_ref = Mat::new(n_out, n_in, vec![0.0; n_in * n_out]);
        for k in 0..3u64 {
            let g = randn(seed + 1 + k, n_in * n_out, 2.0);
            let g_t = Tensor::<TB, 2>::from_data(
                TensorData::new(g.clone(), [n_in, n_out]),
                &Default::default(),
            );
            let (nw, ns) = SimpleOptimizer::<TB>::step(&ours, h.lr, w, g_t, state);
            (w, state) = (nw, ns);
            reference::step(
                &mut w_ref,
                &Mat::new(n_in, n_out, g).transpose(),
                &mut buf_ref,
                &h,
            );
            let got: Vec<f64> = w.clone().into_data().iter::<f64>().collect();
            let want = w_ref.transpose().data;
            let r = worst_rel(&got, &want);
            assert!(
                r <= 1e-10,
                "[{n_in}, {n_out}] step {}: differs by {r:e}",
                k + 1
            );
        }
    }
}

/// With the Muon spec, a block matrix moves by Muon's update at `lr_ratio × lr`, and the token
/// embedding by AdamW's first step (≈ lr per entry, plus decay): each part gets its optimizer.
#[test]
fn muon_takes_the_block_matrices_and_adamw_the_rest() {
    let _beside = crate::beside_others();
    use nervus_models::gpt::{Gpt, GptConfig};
    use nervus_training::muon::Muon;
    let dev = Default::default();
    // Seeded, and every weight drawn under the lock: the same model, and so the same figure, on
    // every run.
    let model: Gpt<AB> = {
        let _held = INIT.lock().unwrap_or_else(|e| e.into_inner());
        TB::seed(&dev, 17);
        let model: Gpt<AB> = GptConfig::new(11)
            .with_context(6)
            .with_d_model(8)
            .with_heads(2)
            .modern()
            .init(&dev);
        let _ = nervus_models::named::export(&model);
        model
    };
    let ids = |v: Vec<i64>| Tensor::<AB, 2, Int>::from_data(TensorData::new(v, [2, 6]), &dev);
    let x = ids(vec![1, 4, 2, 9, 3, 0, 5, 5, 7, 10, 6, 8]);
    let y = ids(vec![4, 2, 9, 3, 0, 1, 5, 7, 10, 6, 8, 2]);
    let grads = GradientsParams::from_grads(model.loss(x, y).backward(), &model);
    let attn = model.h[0].attn.c_attn.weight.clone();
    let wte = model.wte.weight.clone();
    let g_attn: Tensor<TB, 2> = grads.get(attn.id).unwrap();
    let g_wte: Tensor<TB, 2> = grads.get(wte.id).unwrap();
    let (lr, wd) = (0.003, 0.1);
    let spec = OptimizerSpec::muon(lr, 0.02, wd);
    let OptimizerSpec::Muon {
        lr_ratio, momentum, ..
    } = spec
    else {
        unreachable!()
    };
    let mut optim = spec.build::<Gpt<AB>, AB>(None);
    let after = optim.step(lr, model, grads);

    let vals = |t: Tensor<TB, 2>| t.into_data().iter::<f64>().collect::<Vec<f64>>();
    let muon = Muon {
        momentum,
        nesterov: true,
        weight_decay: 0.0,
    };
    let (update, _) = muon.update(g_attn, None);
    let want_attn = vals(attn.val().inner() - update.mul_scalar(lr * lr_ratio));
    let got_attn = vals(after.h[0].attn.c_attn.weight.val().inner());
    let r = worst_rel(&got_attn, &want_attn);
    assert!(r <= 1e-9, "c_attn did not take Muon's step: {r:e}");

    // AdamW's first step: m̂ = g, v̂ = g², so the update is lr·g/(|g| + ε), after decay.
    let w = wte.val().inner();
    let want_wte = vals(
        w.clone().mul_scalar(1.0 - lr * wd)
            - g_wte
                .clone()
                .div(g_wte.abs().add_scalar(1e-8))
                .mul_scalar(lr),
    );
    let got_wte = vals(after.wte.weight.val().inner());
    let r = worst_rel(&got_wte, &want_wte);
    assert!(r <= 1e-5, "wte did not take AdamW's step: {r:e}");
}
