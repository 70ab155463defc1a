//! The fused operations' witnesses. Each op, forward and backward, is held
//! - on `Autodiff<NdArray<f64>>`, against Burn's composed version under Burn's own autodiff
//!   ([`super::composed_here`]) and against central differences, to ~1e-10;
//! - on flex in f64 (its kernels), against the same composed version, to ~1e-12;
//! - on flex in f32, against the composed version on flex, to f32's rounding.
//!
//! The point is random, the upstream gradient is a random weighting of the outputs (a missing
//! factor or a transposed product shows), and the hand-derived passes of `reference/` (attention,
//! layer norm, GELU) hold the models, which now run through these ops, in their own tests.

use super::{attention, composed_here, gelu_tanh, norm};
use crate::compare::{assert_close, numerical_grad, randn};
use burn::prelude::*;
use burn_autodiff::Autodiff;

type Nd = burn_ndarray::NdArray<f64>;
type AdNd = Autodiff<Nd>;
type Fx = burn_flex::Flex;
type AdFx = Autodiff<Fx>;

fn on<B: Backend, const D: usize>(v: &[f64], shape: [usize; D], f32: bool) -> Tensor<B, D> {
    use burn::tensor::DType;
    let device = Default::default();
    if f32 {
        let data = TensorData::new(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape);
        Tensor::from_data(data, (&device, DType::F32))
    } else {
        Tensor::from_data(TensorData::new(v.to_vec(), shape), (&device, DType::F64))
    }
}

fn vals<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    let d = t.into_data();
    match d.dtype {
        burn::tensor::DType::F32 => d.iter::<f32>().map(f64::from).collect(),
        _ => d.iter::<f64>().collect(),
    }
}

/// An op's outputs and its inputs' gradients, as f64.
type Outcome = (Vec<f64>, Vec<Vec<f64>>);

/// One op under test: inputs (values, shapes) → output, on any autodiff backend.
type Op<B> = fn(Vec<Tensor<B, 3>>) -> Tensor<B, 3>;

/// `Σ w·op(inputs)` and the gradients of every input, fused or composed.
fn run<B: burn::tensor::backend::AutodiffBackend>(
    op: Op<B>,
    inputs: &[(Vec<f64>, [usize; 3])],
    weights: &[f64],
    f32: bool,
    fused: bool,
) -> Outcome {
    let go = || {
        let xs: Vec<Tensor<B, 3>> = inputs
            .iter()
            .map(|(v, s)| on::<B, 3>(v, *s, f32).require_grad())
            .collect();
        let out = op(xs.clone());
        let w = on::<B, 3>(weights, out.dims(), f32);
        let grads = (out.clone() * w).sum().backward();
        let g = xs
            .iter()
            .map(|x| vals(x.grad(&grads).expect("every input has a gradient")))
            .collect();
        (vals(out.inner()), g)
    };
    if fused { go() } else { composed_here(go) }
}

/// Holds the fused op against the composed one on ndarray f64, flex f64 and flex f32, and its
/// input gradients against central differences of the composed forward in f64.
fn witness(
    name: &str,
    op_nd: Op<AdNd>,
    op_fx: Op<AdFx>,
    inputs: &[(Vec<f64>, [usize; 3])],
    out_len: usize,
) {
    let w = randn(99, out_len, 1.0);
    let (want_y, want_g) = run::<AdNd>(op_nd, inputs, &w, false, false);
    let cases: [(&str, Outcome, f64); 3] = [
        (
            "ndarray f64",
            run::<AdNd>(op_nd, inputs, &w, false, true),
            1e-12,
        ),
        (
            "flex f64",
            run::<AdFx>(op_fx, inputs, &w, false, true),
            1e-12,
        ),
        ("flex f32", run::<AdFx>(op_fx, inputs, &w, true, true), 2e-5),
    ];
    for (backend, (y, g), tol) in cases {
        assert_close(&format!("{name} forward, {backend}"), &y, &want_y, tol);
        for (i, (g, want)) in g.iter().zip(&want_g).enumerate() {
            assert_close(
                &format!("{name} input {i} gradient, {backend}"),
                g,
                want,
                tol,
            );
        }
    }
    // Central differences of Σ w·op, input by input, on the composed forward in f64.
    for (i, (v, _)) in inputs.iter().enumerate() {
        let numeric = numerical_grad(v, 1e-5, |x| {
            let mut ins = inputs.to_vec();
            ins[i].0 = x.to_vec();
            let xs: Vec<Tensor<Nd, 3>> =
                ins.iter().map(|(v, s)| on::<Nd, 3>(v, *s, false)).collect();
            let y = composed_here(|| vals(op_nd_inner(op_nd, xs)));
            y.iter().zip(&w).map(|(a, b)| a * b).sum()
        });
        let (_, fused_g) = run::<AdNd>(op_nd, inputs, &w, false, true);
        assert_close(
            &format!("{name} input {i} gradient against differences"),
            &fused_g[i],
            &numeric,
            1e-7,
        );
    }
}

/// Runs an autodiff op on plain tensors (no gradients kept).
fn op_nd_inner(op: Op<AdNd>, xs: Vec<Tensor<Nd, 3>>) -> Tensor<Nd, 3> {
    op(xs.into_iter().map(Tensor::from_inner).collect()).inner()
}

fn causal<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [q, k, v]: [Tensor<B, 3>; 3] = x.try_into().expect("q, k, v");
    attention(q, k, v, 0.37, Some(0))
}

fn causal_offset<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [q, k, v]: [Tensor<B, 3>; 3] = x.try_into().expect("q, k, v");
    attention(q, k, v, 0.61, Some(2))
}

fn full<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [q, k, v]: [Tensor<B, 3>; 3] = x.try_into().expect("q, k, v");
    attention(q, k, v, 0.5, None)
}

#[test]
fn causal_attention_matches_composed_and_differences() {
    // N = 3 (batch × heads), T = 5, D = 4: big enough that a transposed product shows.
    let (n, t, d) = (3, 5, 4);
    let ins = vec![
        (randn(1, n * t * d, 1.0), [n, t, d]),
        (randn(2, n * t * d, 1.0), [n, t, d]),
        (randn(3, n * t * d, 1.0), [n, t, d]),
    ];
    witness(
        "causal attention",
        causal::<AdNd>,
        causal::<AdFx>,
        &ins,
        n * t * d,
    );
}

#[test]
fn offset_and_unmasked_attention_match_composed_and_differences() {
    // Three queries continuing a sequence of five keys (a cache of two), values wider than keys.
    let (n, tq, tk, d, dv) = (2, 3, 5, 4, 6);
    let ins = vec![
        (randn(4, n * tq * d, 1.0), [n, tq, d]),
        (randn(5, n * tk * d, 1.0), [n, tk, d]),
        (randn(6, n * tk * dv, 1.0), [n, tk, dv]),
    ];
    witness(
        "offset attention",
        causal_offset::<AdNd>,
        causal_offset::<AdFx>,
        &ins,
        n * tq * dv,
    );
    witness(
        "full attention",
        full::<AdNd>,
        full::<AdFx>,
        &ins,
        n * tq * dv,
    );
}

fn layer_norm_affine<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [x, g, b]: [Tensor<B, 3>; 3] = x.try_into().expect("x, gamma, beta");
    let c = x.dims()[2];
    norm(x, Some(g.reshape([c])), Some(b.reshape([c])), 1e-5, false)
}

fn rms_norm_gain<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [x, g]: [Tensor<B, 3>; 2] = x.try_into().expect("x, gamma");
    let c = x.dims()[2];
    norm(x, Some(g.reshape([c])), None, 1e-6, true)
}

fn layer_norm_plain<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    norm(x.into_iter().next().expect("x"), None, None, 1e-6, false)
}

#[test]
fn norms_match_composed_and_differences() {
    let (b, t, c) = (2, 3, 7);
    let x = (randn(7, b * t * c, 2.0), [b, t, c]);
    let g = (randn(8, c, 1.0), [1, 1, c]);
    let beta = (randn(9, c, 1.0), [1, 1, c]);
    witness(
        "layer norm",
        layer_norm_affine::<AdNd>,
        layer_norm_affine::<AdFx>,
        &[x.clone(), g.clone(), beta],
        b * t * c,
    );
    witness(
        "rms norm",
        rms_norm_gain::<AdNd>,
        rms_norm_gain::<AdFx>,
        &[x.clone(), g],
        b * t * c,
    );
    witness(
        "plain layer norm",
        layer_norm_plain::<AdNd>,
        layer_norm_plain::<AdFx>,
        &[x],
        b * t * c,
    );
}

/// Many rows: the flex kernels then cut the work into blocks on several threads, and the column
/// sums (`dgamma`, `dbeta`) add the blocks' partial sums.
#[test]
fn norm_over_many_rows_matches_composed() {
    let (b, t, c) = (4, 700, 24);
    let x = (randn(10, b * t * c, 1.5), [b, t, c]);
    let g = (randn(11, c, 1.0), [1, 1, c]);
    let beta = (randn(12, c, 1.0), [1, 1, c]);
    let w = randn(13, b * t * c, 1.0);
    let ins = [x, g, beta];
    let (want_y, want_g) = run::<AdNd>(layer_norm_affine::<AdNd>, &ins, &w, false, false);
    let (y, g) = run::<AdFx>(layer_norm_affine::<AdFx>, &ins, &w, false, true);
    assert_close("many-row layer norm forward", &y, &want_y, 1e-12);
    for (i, (g, want)) in g.iter().zip(&want_g).enumerate() {
        assert_close(&format!("many-row layer norm gradient {i}"), g, want, 1e-11);
    }
}

fn gelu<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    gelu_tanh(x.into_iter().next().expect("x"))
}

#[test]
fn gelu_matches_composed_and_differences() {
    let n = 40;
    let ins = [(randn(14, n, 3.0), [2, 4, 5])];
    witness("gelu", gelu::<AdNd>, gelu::<AdFx>, &ins, n);
}

/// Far out on the left the clamped exponential's gradient is zero: the fused backward agrees
/// with the composed one there (and stays finite) in f32 and f64.
#[test]
fn gelu_gradient_far_out_matches_composed() {
    let xs = vec![
        -1e4, -500.0, -60.0, -12.0, -10.5, -3.0, 0.0, 10.5, 60.0, 500.0,
    ];
    let n = xs.len();
    let ins = [(xs, [1, 1, n])];
    let w = vec![1.0; n];
    let (_, want) = run::<AdNd>(gelu::<AdNd>, &ins, &w, false, false);
    for f32 in [false, true] {
        let (_, got) = run::<AdFx>(gelu::<AdFx>, &ins, &w, f32, true);
        assert_close(
            "gelu far out",
            &got[0],
            &want[0],
            if f32 { 1e-6 } else { 1e-14 },
        );
    }
}

/// Big enough for the flex kernels' threaded blocks (attention rows and GELU elements).
#[test]
fn large_attention_and_gelu_match_composed_on_flex() {
    let (n, t, d) = (8, 64, 16);
    let ins = vec![
        (randn(15, n * t * d, 1.0), [n, t, d]),
        (randn(16, n * t * d, 1.0), [n, t, d]),
        (randn(17, n * t * d, 1.0), [n, t, d]),
    ];
    let w = randn(18, n * t * d, 1.0);
    let (want_y, want_g) = run::<AdFx>(causal::<AdFx>, &ins, &w, false, false);
    let (y, g) = run::<AdFx>(causal::<AdFx>, &ins, &w, false, true);
    assert_close("large attention forward", &y, &want_y, 1e-12);
    for (i, (g, want)) in g.iter().zip(&want_g).enumerate() {
        assert_close(&format!("large attention gradient {i}"), g, want, 1e-11);
    }
    let ins = [(randn(19, 4 * 64 * 160, 2.0), [4, 64, 160])];
    let w = randn(20, 4 * 64 * 160, 1.0);
    let (want_y, want_g) = run::<AdFx>(gelu::<AdFx>, &ins, &w, false, false);
    let (y, g) = run::<AdFx>(gelu::<AdFx>, &ins, &w, false, true);
    assert_close("large gelu forward", &y, &want_y, 1e-14);
    assert_close("large gelu gradient", &g[0], &want_g[0], 1e-14);
}

fn packed<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    super::packed_attention(x.into_iter().next().expect("qkv"), 3, 0.45, true)
}

fn packed_full<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    super::packed_attention(x.into_iter().next().expect("qkv"), 2, 0.7, false)
}

/// GPT-2's packed `qkv` rows: the flex kernel reads heads from strided views and writes `dqkv`
/// back in the same layout; three heads of width 2 (C = 6), so a head taken from the wrong
/// columns, or a `k` read where a `v` belongs, shows.
#[test]
fn packed_attention_matches_composed_and_differences() {
    let (b, t, c) = (2, 5, 6);
    let ins = [(randn(21, b * t * 3 * c, 1.0), [b, t, 3 * c])];
    witness(
        "packed causal attention",
        packed::<AdNd>,
        packed::<AdFx>,
        &ins,
        b * t * c,
    );
    witness(
        "packed full attention",
        packed_full::<AdNd>,
        packed_full::<AdFx>,
        &ins,
        b * t * c,
    );
}

/// Shapes of the GPT presets' order (many pairs, long rows) on flex, against the composed route.
#[test]
fn large_packed_attention_matches_composed_on_flex() {
    let (b, t, c) = (4, 48, 3 * 16);
    let ins = [(randn(22, b * t * 3 * c, 1.0), [b, t, 3 * c])];
    let w = randn(23, b * t * c, 1.0);
    let (want_y, want_g) = run::<AdFx>(packed::<AdFx>, &ins, &w, false, false);
    let (y, g) = run::<AdFx>(packed::<AdFx>, &ins, &w, false, true);
    assert_close("large packed attention forward", &y, &want_y, 1e-12);
    assert_close("large packed attention gradient", &g[0], &want_g[0], 1e-11);
}

/// The f32 kernels' exponential against f64's, every 1e-4 across its range (and near 0, where
/// softmax's largest weights sit): within 1.5e-7 relative, and NaN stays NaN.
#[test]
fn fast_exp_is_within_an_ulp() {
    use super::flex_kernels::exp_f32;
    let mut worst = (0.0f64, 0.0f32);
    let steps = 1_750_000;
    for i in 0..=steps {
        let x = -87.0 + 175.0 * i as f32 / steps as f32;
        for x in [x, x * 1e-3] {
            let (got, want) = (f64::from(exp_f32(x)), f64::from(x).exp());
            let rel = (got - want).abs() / want;
            assert!(rel.is_finite(), "exp_f32({x}) = {got}");
            if rel > worst.0 {
                worst = (rel, x);
            }
        }
    }
    assert!(
        worst.0 < 1.5e-7,
        "exp_f32 is {:e} off at {}",
        worst.0,
        worst.1
    );
    assert!(exp_f32(f32::NAN).is_nan());
    assert!(exp_f32(-1e30) > 0.0 && exp_f32(-1e30) < 1e-37);
}

/// `x [2, 3, 5]`, `w [1, 5, 4]` and `b [1, 1, 4]` as a linear layer's input, weight and bias.
fn linear_biased<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [x, w, b] = <[Tensor<B, 3>; 3]>::try_from(x).expect("x, w, b");
    super::linear_parts(x, w.reshape([5, 4]), Some(b.reshape([4])))
}

fn linear_unbiased<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let [x, w] = <[Tensor<B, 3>; 2]>::try_from(x).expect("x, w");
    super::linear_parts(x, w.reshape([5, 4]), None)
}

#[test]
fn linear_matches_composed_and_differences() {
    let (x, w, b) = (randn(21, 30, 1.5), randn(22, 20, 0.7), randn(23, 4, 0.5));
    let ins = [(x, [2, 3, 5]), (w, [1, 5, 4]), (b, [1, 1, 4])];
    witness(
        "linear",
        linear_biased::<AdNd>,
        linear_biased::<AdFx>,
        &ins,
        24,
    );
    witness(
        "linear without bias",
        linear_unbiased::<AdNd>,
        linear_unbiased::<AdFx>,
        &ins[..2],
        24,
    );
}

const XENT_TARGETS: [i64; 6] = [3, 0, 6, 2, 2, 5];

/// `x [1, 6, 7]` as logits of 6 rows over 7 classes, against [`XENT_TARGETS`].
fn xent<B: Backend>(x: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    let x = x.into_iter().next().expect("logits");
    let device = x.device();
    let t = Tensor::<B, 1, Int>::from_data(TensorData::new(XENT_TARGETS.to_vec(), [6]), &device);
    super::cross_entropy(x.reshape([6, 7]), t).reshape([1, 1, 1])
}

#[test]
fn cross_entropy_matches_composed_and_differences() {
    let ins = [(randn(31, 42, 2.0), [1, 6, 7])];
    witness("cross-entropy", xent::<AdNd>, xent::<AdFx>, &ins, 1);
}

/// A target 200 below its row's top logit: its probability underflows f32, the loss must not.
#[test]
fn cross_entropy_far_from_the_target_stays_exact() {
    let mut v = randn(32, 42, 1.0);
    v[3] = -200.0; // row 0, class 3: its own target
    let ins = [(v, [1, 6, 7])];
    let w = [1.0];
    let (want, _) = run::<AdNd>(xent::<AdNd>, &ins, &w, false, false);
    let (got, _) = run::<AdFx>(xent::<AdFx>, &ins, &w, true, true);
    assert!(want[0] > 30.0, "the case is far out: {}", want[0]);
    assert_close("far cross-entropy, flex f32", &got, &want, 1e-5);
}

#[test]
#[should_panic(expected = "cross-entropy target 9 at row 1 is outside the 7 classes")]
fn a_target_outside_the_classes_is_refused() {
    let device = Default::default();
    let x = Tensor::<Fx, 2>::zeros([2, 7], &device);
    let t = Tensor::<Fx, 1, Int>::from_data(TensorData::new(vec![1i64, 9], [2]), &device);
    let _ = super::cross_entropy(x, t);
}

/// One AdamW step of the f64 formula (the third witness): `(param, m, v)`.
fn adamw_f64(
    p: &[f64],
    g: &[f64],
    mv: Option<(&[f64], &[f64])>,
    s: &super::AdamWScalars,
) -> [Vec<f64>; 3] {
    let (b1, b2, eps) = (s.beta1 as f64, s.beta2 as f64, s.eps as f64);
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..p.len() {
        let (m0, v0) = mv.map_or((0.0, 0.0), |(m, v)| (m[i], v[i]));
        let m = b1 * m0 + (1.0 - b1) * g[i];
        let v = b2 * v0 + (1.0 - b2) * g[i] * g[i];
        let t = s.time as i32;
        let delta = (m / (1.0 - b1.powi(t))) / ((v / (1.0 - b2.powi(t))).sqrt() + eps);
        out[0].push(p[i] * (1.0 - s.decay_rate) - s.lr * delta);
        out[1].push(m);
        out[2].push(v);
    }
    out
}

fn bits(t: Tensor<Fx, 2>) -> Vec<u32> {
    t.into_data().iter::<f32>().map(f32::to_bits).collect()
}

/// Fails at the first element whose bits differ, naming it.
#[track_caller]
fn same_bits(what: &str, a: Tensor<Fx, 2>, b: Tensor<Fx, 2>) {
    let (a, b) = (bits(a), bits(b));
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        let (x, y) = (f32::from_bits(a[i]), f32::from_bits(b[i]));
        panic!("{what}: element {i} is {x:e}, Burn's AdamW gives {y:e}");
    }
}

#[test]
fn adamw_matches_burns_to_the_bit() {
    use burn::optim::{AdamWConfig, AdamWState, AdaptiveMomentumState, SimpleOptimizer};
    // 70 × 300 runs in blocks on rayon's threads, 3 × 5 on the calling thread.
    for (shape, weight_decay) in [([70, 300], 0.1f32), ([3, 5], 0.0)] {
        let n = shape[0] * shape[1];
        let burn = AdamWConfig::new()
            .with_beta_1(0.9)
            .with_beta_2(0.95)
            .with_epsilon(1e-8)
            .with_weight_decay(weight_decay)
            .build();
        let p0 = randn(1, n, 1.0);
        let (mut ours, mut theirs) = (on::<Fx, 2>(&p0, shape, true), on::<Fx, 2>(&p0, shape, true));
        let mut our_moments: super::Moments<Fx, 2> = None;
        let mut their_state: Option<AdamWState<Fx, 2>> = None;
        let mut our_state: Option<(Vec<f64>, Vec<f64>)> = None;
        let mut p_before = vals(ours.clone());
        for time in 1..=3 {
            // Gradients far apart in scale, some tiny, so that ε and the corrections matter.
            let g: Vec<f64> = randn(10 + time as u64, n, 1.0)
                .iter()
                .enumerate()
                .map(|(i, x)| x * 10f64.powi(i as i32 % 7 - 5))
                .collect();
            let lr = 0.01 * time as f64;
            let scalars = super::AdamWScalars {
                beta1: 0.9,
                beta2: 0.95,
                eps: 1e-8,
                time,
                lr,
                decay_rate: lr * weight_decay as f64,
            };
            // Odd steps keep a second handle on the parameter, which must not see the update (the
            // step copies); even steps hand over the only one (the step writes in place).
            let kept = (time % 2 == 1).then(|| ours.clone());
            let before = kept.clone().map(bits);
            let (p, m, v) = super::adamw_step(ours, on(&g, shape, true), our_moments, &scalars)
                .unwrap_or_else(|_| panic!("flex f32 is served"));
            assert!(
                kept.map(bits) == before,
                "a shared parameter was written in place"
            );
            let (tp, ts) = burn.step(lr, theirs, on(&g, shape, true), their_state);
            let ts = ts.expect("AdamW keeps a state");
            same_bits(&format!("parameter, step {time}"), p.clone(), tp.clone());
            same_bits(
                &format!("m, step {time}"),
                m.clone(),
                ts.momentum.moment_1.clone(),
            );
            same_bits(
                &format!("v, step {time}"),
                v.clone(),
                ts.momentum.moment_2.clone(),
            );
            assert_eq!(ts.momentum.time, time);
            // The f64 formula from the same starting point: the update and the moments.
            let g32: Vec<f64> = g.iter().map(|&x| x as f32 as f64).collect();
            let previous = our_state.as_ref().map(|(m, v)| (&m[..], &v[..]));
            let r = adamw_f64(&p_before, &g32, previous, &scalars);
            let (p64, m64, v64) = (vals(p.clone()), vals(m.clone()), vals(v.clone()));
            let step =
                |q: &[f64]| -> Vec<f64> { q.iter().zip(&p_before).map(|(a, b)| a - b).collect() };
            assert_close("AdamW update", &step(&p64), &step(&r[0]), 1e-4);
            assert_close("AdamW m", &m64, &r[1], 1e-6);
            assert_close("AdamW v", &v64, &r[2], 1e-6);
            p_before = p64;
            our_state = Some((m64, v64));
            our_moments = Some((m, v));
            (ours, theirs) = (p, tp);
            their_state = Some(AdamWState {
                momentum: AdaptiveMomentumState::new(
                    time,
                    ts.momentum.moment_1,
                    ts.momentum.moment_2,
                ),
            });
        }
    }
}
