//! What the assembled GPT must do, whatever its weights: start out ignorant, average over the
//! batch, and never let the future reach the past. (f64 backend: the causality checks are exact.)

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_models::compare::worst_rel;
use nervus_models::gpt::{Gpt, GptConfig, GptSize};

type TB = burn_ndarray::NdArray<f64>;
type AB = Autodiff<TB>;

// NdArray's seeded generator is one per process, the tests run on parallel threads, and Burn
// draws a parameter's initial values lazily, at its first use. So each test holds
// [`crate::rng_lock`] from its seed to its end: no other test's draws land among its own.
// (Without it, `first_loss_is_ln_vocab` got other weights from run to run, and once missed its
// bound: 4.1964 against 4.1744.)
use crate::{ids, rng_lock, vals};

/// A fresh model predicts every token about equally: its loss is ln V, not a nat of confidence in
/// nothing. Mean over 8 seeds within 0.02 (GPT-2's N(0, 0.02) init leaves the logits ~0.1 wide).
#[test]
fn first_loss_is_ln_vocab() {
    let _rng = rng_lock();
    let v = 65;
    let mut total = 0.0;
    for seed in 0..8 {
        TB::seed(&Default::default(), seed);
        let m: Gpt<TB> = GptSize::Small.config(v).init(&Default::default());
        let x: Vec<i64> = (0..4 * 64)
            .map(|i| (i * 37 + seed as i64 * 11) % v as i64)
            .collect();
        let y: Vec<i64> = x.iter().map(|t| (t * 7 + 3) % v as i64).collect();
        total += m.loss(ids(&x, 4), ids(&y, 4)).into_scalar();
    }
    let mean = total / 8.0;
    let ln_v = (v as f64).ln();
    assert!(
        (mean - ln_v).abs() < 0.02,
        "first loss {mean:.4} against ln V {ln_v:.4}"
    );
}

fn small() -> Gpt<AB> {
    AB::seed(&Default::default(), 3);
    GptConfig::new(9)
        .with_context(6)
        .with_layers(2)
        .with_heads(2)
        .with_d_model(8)
        .with_init_std(0.5)
        .init(&Default::default())
}

/// A text with exactly one possible window: a batch of three copies of it must produce the
/// gradient of a batch of one. A sum over the batch instead of a mean would triple it (and Adam
/// would hide that, SGD would not).
#[test]
fn three_copies_of_the_only_window_give_the_gradient_of_one() {
    let _rng = rng_lock();
    let m = small();
    let text = [1i64, 4, 2, 8, 5, 7, 3];
    let grads = |copies: usize| {
        let x: Vec<i64> = (0..copies).flat_map(|_| text[..6].to_vec()).collect();
        let y: Vec<i64> = (0..copies).flat_map(|_| text[1..].to_vec()).collect();
        let loss = m.loss(ids(&x, copies), ids(&y, copies));
        nervus_models::named::export_grads_f64(&m, &loss.backward())
    };
    let (one, three) = (grads(1), grads(3));
    assert_eq!(one.len(), three.len());
    for ((name, a), (_, b)) in one.iter().zip(&three) {
        let r = worst_rel(b, a);
        assert!(
            r < 1e-12,
            "{name}: batch of three differs from one by {r:e}"
        );
    }
}

/// Changing a token leaves every earlier position's logits bit-for-bit unchanged.
#[test]
fn the_future_cannot_change_the_past() {
    let _rng = rng_lock();
    let m = small();
    let a = [1i64, 4, 2, 8, 5, 7];
    for k in 1..6 {
        let mut b = a;
        b[k] = (b[k] + 3) % 9;
        let la = vals(m.forward(ids::<AB>(&a, 1)));
        let lb = vals(m.forward(ids::<AB>(&b, 1)));
        let v = 9;
        assert_eq!(&la[..k * v], &lb[..k * v], "positions before {k} moved");
        assert_ne!(
            &la[k * v..(k + 1) * v],
            &lb[k * v..(k + 1) * v],
            "position {k} itself must see its token"
        );
    }
}

/// The loss at an early position blames nothing later: the position-embedding rows of later
/// positions get exactly zero gradient, and every earlier row gets some.
#[test]
fn the_past_loss_does_not_blame_the_future() {
    let _rng = rng_lock();
    let m = small();
    let x = [1i64, 4, 2, 8, 5, 7];
    let logits = m.forward(ids::<AB>(&x, 1)); // [1, 6, 9]
    let t = 2;
    let target = 5;
    // −log softmax at position t only.
    let row = logits.slice([0..1, t..t + 1, 0..9]).reshape([1, 9]);
    let loss = -burn::tensor::activation::log_softmax(row, 1)
        .slice([0..1, target..target + 1])
        .sum();
    let grads = loss.backward();
    let wpe = vals(
        m.wpe
            .as_ref()
            .expect("learned positions")
            .weight
            .grad(&grads)
            .expect("wpe has a gradient"),
    );
    let c = 8;
    for p in 0..6 {
        let row_norm: f64 = wpe[p * c..(p + 1) * c].iter().map(|v| v.abs()).sum();
        if p > t {
            assert_eq!(
                row_norm, 0.0,
                "position {p} is after {t} and must get no blame"
            );
        } else {
            assert!(
                row_norm > 0.0,
                "position {p} is at or before {t} and must get some"
            );
        }
    }
}
