//! The composed versions: each fused operation written with Burn's tensor operations, as the
//! models wrote them before. Two uses: the route every backend without the fused path takes
//! (Burn's autodiff then records each operation), and the default bodies of [`super::FusedOps`]'s
//! kernels, which the witness tests hold the fast kernels and the fused backward passes to.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::activation::softmax;
use burn::tensor::ops::FloatTensor;

pub(crate) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// Largest exponent passed to `exp`: `e^80 ≈ 5.5e34`, well inside f32.
pub(crate) const EXP_CLAMP: f64 = 80.0;

/// Shapes: `q [N, Tq, D]`, `k [N, Tk, D]`, `v [N, Tk, Dv]` → `[N, Tq, Dv]`.
pub fn attention<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    scale: f64,
    causal: Option<usize>,
) -> Tensor<B, 3> {
    // Times the scale rather than divided by √d: Burn 0.21's autodiff forms the gradient of a
    // division by a scalar in f32 (see `attention.rs`).
    let scores = q.matmul(k.swap_dims(1, 2)) * scale; // [N, Tq, Tk]
    let weights = match causal {
        Some(offset) => softmax(mask_future(scores, offset), 2),
        None => softmax(scores, 2),
    };
    weights.matmul(v)
}

/// `qkv [B, T, 3C]` → `q`, `k`, `v` as `[B·H, T, D]` each.
fn split_heads<B: Backend>(qkv: Tensor<B, 3>, heads: usize) -> [Tensor<B, 3>; 3] {
    let mut parts = qkv.chunk(3, 2).into_iter().map(|x| to_heads(x, heads));
    let mut next = || parts.next().expect("three thirds");
    [next(), next(), next()]
}

/// `[B, T, H·D]` → `[B·H, T, D]`.
fn to_heads<B: Backend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 3> {
    let [b, t, c] = x.dims();
    let d = c / heads;
    x.reshape([b, t, heads, d])
        .swap_dims(1, 2)
        .reshape([b * heads, t, d])
}

/// `[B·H, T, D]` → `[B, T, H·D]`, heads side by side.
fn merge_heads<B: Backend>(x: Tensor<B, 3>, batch: usize) -> Tensor<B, 3> {
    let [bh, t, d] = x.dims();
    let h = bh / batch;
    x.reshape([batch, h, t, d])
        .swap_dims(1, 2)
        .reshape([batch, t, h * d])
}

/// Shapes: `qkv [B, T, 3C]` → `[B, T, C]`.
pub fn packed_attention<B: Backend>(
    qkv: Tensor<B, 3>,
    heads: usize,
    scale: f64,
    causal: bool,
) -> Tensor<B, 3> {
    let b = qkv.dims()[0];
    let [q, k, v] = split_heads(qkv, heads);
    merge_heads(attention(q, k, v, scale, causal.then_some(0)), b)
}

/// The per-head attention a packed one is made of: `(q, k, v, scale, causal offset)` → `(y,
/// probabilities)` (a backend's `FusedOps::attention_fwd`).
pub type HeadsFwd<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    f64,
    Option<usize>,
) -> (FloatTensor<B>, FloatTensor<B>);

/// Its backward: `(q, k, v, probabilities, dy, scale)` → `(dq, dk, dv)` (`FusedOps::attention_bwd`).
pub type HeadsBwd<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// `FusedOps::packed_attention_fwd` by default: the heads cut out, `heads_fwd` on them, the
/// outputs merged.
pub fn packed_attention_fwd<B: Backend>(
    qkv: FloatTensor<B>,
    heads: usize,
    scale: f64,
    causal: bool,
    heads_fwd: HeadsFwd<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let qkv = wrap::<B, 3>(qkv);
    let b = qkv.dims()[0];
    let [q, k, v] = split_heads(qkv, heads).map(prim);
    let (y, probs) = heads_fwd(q, k, v, scale, causal.then_some(0));
    (prim(merge_heads(wrap::<B, 3>(y), b)), probs)
}

/// `FusedOps::packed_attention_bwd` by default: `heads_bwd` on the heads, the gradients merged
/// and laid side by side as `q | k | v`.
pub fn packed_attention_bwd<B: Backend>(
    qkv: FloatTensor<B>,
    probs: FloatTensor<B>,
    dy: FloatTensor<B>,
    heads: usize,
    scale: f64,
    heads_bwd: HeadsBwd<B>,
) -> FloatTensor<B> {
    let qkv = wrap::<B, 3>(qkv);
    let b = qkv.dims()[0];
    let [q, k, v] = split_heads(qkv, heads).map(prim);
    let dout = prim(to_heads(wrap::<B, 3>(dy), heads));
    let (dq, dk, dv) = heads_bwd(q, k, v, probs, dout, scale);
    let merged = [dq, dk, dv].map(|g| merge_heads(wrap::<B, 3>(g), b));
    prim(Tensor::cat(merged.into(), 2))
}

/// Scores with every key after its query's position set to −∞. Shapes: `[N, Tq, Tk]`.
fn mask_future<B: Backend>(scores: Tensor<B, 3>, offset: usize) -> Tensor<B, 3> {
    let [n, tq, tk] = scores.dims();
    let masked = Tensor::<B, 2, Bool>::tril_mask([tq, tk], offset as i64, &scores.device())
        .unsqueeze::<3>()
        .expand([n, tq, tk]);
    scores.mask_fill(masked, f32::NEG_INFINITY)
}

/// Shapes: `x [.., C]`, `gamma`, `beta [C]` → `[.., C]`.
pub fn norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Option<Tensor<B, 1>>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
    rms: bool,
) -> Tensor<B, D> {
    let normed = if rms {
        let ms = x.clone().square().mean_dim(D - 1);
        x / (ms + eps).sqrt()
    } else {
        let centred = x.clone() - x.mean_dim(D - 1);
        let var = centred.clone().square().mean_dim(D - 1);
        centred / (var + eps).sqrt()
    };
    let mut shape = [1usize; D];
    shape[D - 1] = normed.dims()[D - 1];
    let y = match gamma {
        Some(g) => normed * g.reshape(shape),
        None => normed,
    };
    match beta {
        Some(b) => y + b.reshape(shape),
        None => y,
    }
}

/// Shapes: any → the same.
pub fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let cube = x.clone() * x.clone() * x.clone();
    let minus_2z = (x.clone() + cube * 0.044_715) * (-2.0 * SQRT_2_OVER_PI);
    x / (minus_2z.clamp_max(EXP_CLAMP).exp() + 1.0)
}

/// See [`super::FusedOps::softmax_fwd`].
pub fn softmax_fwd<B: Backend>(
    scores: FloatTensor<B>,
    scale: f64,
    causal: Option<usize>,
) -> FloatTensor<B> {
    let s = wrap::<B, 3>(scores) * scale;
    let s = match causal {
        Some(offset) => mask_future(s, offset),
        None => s,
    };
    prim(softmax(s, 2))
}

/// See [`super::FusedOps::softmax_bwd`].
pub fn softmax_bwd<B: Backend>(
    probs: FloatTensor<B>,
    dprobs: FloatTensor<B>,
    scale: f64,
) -> FloatTensor<B> {
    let (p, dp) = (wrap::<B, 3>(probs), wrap::<B, 3>(dprobs));
    let row = (p.clone() * dp.clone()).sum_dim(2);
    prim(p * (dp - row) * scale)
}

/// See [`super::FusedOps::norm_fwd`]. Shapes: `x [R, C]`.
pub fn norm_fwd<B: Backend>(
    x: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
    beta: Option<FloatTensor<B>>,
    eps: f64,
    rms: bool,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let x = wrap::<B, 2>(x);
    let centred = if rms { x } else { x.clone() - x.mean_dim(1) };
    let var = centred.clone().square().mean_dim(1); // [R, 1]
    let rstd = (var + eps).sqrt().recip();
    let xhat = centred * rstd.clone();
    let mut y = xhat.clone();
    if let Some(g) = gamma {
        y = y * wrap::<B, 1>(g).unsqueeze::<2>();
    }
    if let Some(b) = beta {
        y = y + wrap::<B, 1>(b).unsqueeze::<2>();
    }
    (prim(y), prim(xhat), prim(rstd))
}

/// See [`super::FusedOps::norm_bwd`]. With `g = dy·gamma`: LayerNorm's
/// `dx = (g − mean(g) − x̂·mean(g·x̂))/σ`, RMSNorm's `dx = (g − x̂·mean(g·x̂))/σ`;
/// `dgamma = Σ_rows dy·x̂`, `dbeta = Σ_rows dy`.
#[allow(clippy::type_complexity)]
pub fn norm_bwd<B: Backend>(
    dy: FloatTensor<B>,
    xhat: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
    beta: bool,
    rms: bool,
) -> (
    FloatTensor<B>,
    Option<FloatTensor<B>>,
    Option<FloatTensor<B>>,
) {
    let (dy, xhat, rstd) = (wrap::<B, 2>(dy), wrap::<B, 2>(xhat), wrap::<B, 2>(rstd));
    let c = dy.dims()[1];
    let dgamma = gamma
        .is_some()
        .then(|| prim((dy.clone() * xhat.clone()).sum_dim(0).reshape([c])));
    let dbeta = beta.then(|| prim(dy.clone().sum_dim(0).reshape([c])));
    let g = match gamma {
        Some(gm) => dy * wrap::<B, 1>(gm).unsqueeze::<2>(),
        None => dy,
    };
    let along = (g.clone() * xhat.clone()).mean_dim(1);
    let g = if rms { g } else { g.clone() - g.mean_dim(1) };
    let dx = (g - xhat * along) * rstd;
    (prim(dx), dgamma, dbeta)
}

/// See [`super::FusedOps::gelu_fwd`].
pub fn gelu_fwd<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let shape = burn::tensor::TensorMetadata::shape(&x);
    B::float_reshape(prim(gelu_tanh(wrap::<B, 1>(flat::<B>(x)))), shape)
}

/// See [`super::FusedOps::gelu_with_slope`].
pub fn gelu_with_slope<B: Backend>(x: FloatTensor<B>) -> (FloatTensor<B>, FloatTensor<B>) {
    (gelu_fwd::<B>(x.clone()), gelu_slope::<B>(x))
}

/// See [`super::FusedOps::gelu_bwd`].
pub fn gelu_bwd<B: Backend>(slope: FloatTensor<B>, dy: FloatTensor<B>) -> FloatTensor<B> {
    B::float_mul(dy, slope)
}

/// The GELU's derivative at `x`. With `s = σ(2z)` and `u = −2z` below the clamp:
/// `s + x·s·(1 − s)·2√(2/π)·(1 + 3·0.044715·x²)`; past the clamp the second term is zero, as the
/// clamped exponential's gradient is.
fn gelu_slope<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let shape = burn::tensor::TensorMetadata::shape(&x);
    let x = wrap::<B, 1>(flat::<B>(x));
    let x2 = x.clone() * x.clone();
    let minus_2z = (x.clone() + x2.clone() * x.clone() * 0.044_715) * (-2.0 * SQRT_2_OVER_PI);
    let past = minus_2z.clone().greater_equal_elem(EXP_CLAMP);
    let s = (minus_2z.clamp_max(EXP_CLAMP).exp() + 1.0).recip();
    let du = (x2 * (3.0 * 0.044_715) + 1.0) * (2.0 * SQRT_2_OVER_PI);
    let curve = (x * s.clone() * (s.clone().neg() + 1.0) * du).mask_fill(past, 0.0);
    B::float_reshape(prim(s + curve), shape)
}

/// Any primitive as one axis.
fn flat<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    use burn::tensor::TensorMetadata;
    let n = x.shape().num_elements();
    B::float_reshape(x, burn::tensor::Shape::new([n]))
}

/// Shapes: `x [R, I]`, `w [I, O]`, `b [O]` → `x·w + b [R, O]`.
pub fn linear_fwd<B: Backend>(
    x: FloatTensor<B>,
    w: FloatTensor<B>,
    b: Option<FloatTensor<B>>,
) -> FloatTensor<B> {
    let y = wrap::<B, 2>(x).matmul(wrap(w));
    prim(match b {
        Some(b) => y + wrap::<B, 1>(b).unsqueeze_dim(0),
        None => y,
    })
}

/// `(dx = dy·wᵀ, dw = xᵀ·dy, db = Σ_rows dy)`, each where `need` asks for it.
#[allow(clippy::type_complexity)]
pub fn linear_bwd<B: Backend>(
    x: FloatTensor<B>,
    w: FloatTensor<B>,
    dy: FloatTensor<B>,
    need: [bool; 3],
) -> (
    Option<FloatTensor<B>>,
    Option<FloatTensor<B>>,
    Option<FloatTensor<B>>,
) {
    let dy = wrap::<B, 2>(dy);
    let dx = need[0].then(|| prim(dy.clone().matmul(wrap::<B, 2>(w).transpose())));
    let dw = need[1].then(|| prim(wrap::<B, 2>(x).transpose().matmul(dy.clone())));
    let db = need[2].then(|| prim(dy.sum_dim(0).squeeze_dim::<1>(0)));
    (dx, dw, db)
}

/// Shapes: `logits [N, V]`, `targets` (N class indices) → `(loss [1], P [N, V])`: the mean over
/// rows of `−log softmax(logits)[target]`, and the softmax itself.
pub fn xent_fwd<B: Backend>(
    logits: FloatTensor<B>,
    targets: &[usize],
) -> (FloatTensor<B>, FloatTensor<B>) {
    let logits = wrap::<B, 2>(logits);
    let device = logits.device();
    let n = targets.len();
    let ids: Vec<i64> = targets.iter().map(|&t| t as i64).collect();
    let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [n]), &device);
    let logp = burn::tensor::activation::log_softmax(logits, 1);
    let picked = logp.clone().gather(1, ids.unsqueeze_dim::<2>(1)); // [N, 1]
    let loss = picked.mean().neg();
    (prim(loss), prim(logp.exp()))
}

/// `dlogits = (P − onehot(targets)) · dloss / N`, from the saved `P [N, V]` and `dloss [1]`.
pub fn xent_bwd<B: Backend>(
    probs: FloatTensor<B>,
    targets: &[usize],
    dloss: FloatTensor<B>,
) -> FloatTensor<B> {
    let probs = wrap::<B, 2>(probs);
    let [n, v] = probs.dims();
    let device = probs.device();
    let ids: Vec<i64> = targets.iter().map(|&t| t as i64).collect();
    let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [n]), &device);
    let onehot = ids.one_hot::<2>(v).float();
    let g = wrap::<B, 1>(dloss).unsqueeze_dim::<2>(0) / n.max(1) as f64; // [1, 1]
    prim((probs - onehot) * g)
}

/// A tensor's float primitive.
pub(super) fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A float primitive as a tensor of rank `D`.
pub(super) fn wrap<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}
