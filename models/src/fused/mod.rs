//! Fused operations with their own backward pass: attention, LayerNorm/RMSNorm, GPT-2's GELU,
//! linear layers and cross-entropy.
//!
//! Under `Autodiff<B>`, Burn 0.21 records attention, softmax, a norm and the tanh GELU as the
//! dozen or so tensor operations they are written with, each a graph node with a backward step of
//! its own, each a pass over memory, and (on flex) each on one thread below a few million
//! elements. Here each of them is one node: its forward pass saves what its backward pass needs
//! (the attention weights; the normalised rows and 1/σ; the GELU's derivative), and its backward pass
//! is the hand-derived one of `reference/`, computed from those.
//!
//! The mechanism is Burn's backend extension (the Burn book's "Backend Extension" chapter):
//! - [`FusedOps`] extends `Backend` with the row-wise kernels (`*_fwd`, `*_bwd`), whose default
//!   bodies are Burn's composed tensor operations, so any backend can implement it empty;
//! - `Autodiff<B>` implements the ops (`fused_*`) as single graph nodes whose backward calls
//!   `B`'s kernels ([`autodiff`]);
//! - flex implements the kernels on its buffers, split across threads ([`flex`]).
//!
//! The models stay generic over `B: Backend`: the functions below ([`attention`], [`norm`],
//! [`gelu_tanh`]) look up, once per call, whether `B` is one of the backends that implement
//! [`FusedOps`] (flex, ndarray, either under autodiff) and otherwise run the composed version
//! ([`composed`]), Burn's own autodiff included. So wgpu and CUDA builds run exactly what they
//! ran before. `NERVUS_FUSED=0` in the environment (read once) turns the fused path off for a
//! whole process, for benchmarks; [`composed_here`] does it for one thread, for tests.

pub mod autodiff;
pub mod composed;
pub mod flex;
mod flex_adamw;
mod flex_attention;
mod flex_kernels;
mod flex_linear;
mod flex_xent;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use composed::{prim, wrap};
use std::any::{Any, TypeId};
use std::cell::Cell;
use std::sync::OnceLock;

/// Row-wise kernels (defaults: Burn's composed operations) and the fused operations built on them
/// (defaults: the forward kernel alone; `Autodiff<B>` records one node with its own backward).
///
/// Shapes: attention scores and weights `[N, Tq, Tk]`; norm and GELU inputs `[R, C]` (rows);
/// a row's 1/σ `[R, 1]`.
pub trait FusedOps: Backend {
    /// Attention weights `P = softmax(scale·S)` by rows, where, with `causal = Some(offset)`, key
    /// `j` is hidden from query `i` when `j > i + offset` (weight exactly zero).
    fn softmax_fwd(
        scores: FloatTensor<Self>,
        scale: f64,
        causal: Option<usize>,
    ) -> FloatTensor<Self> {
        composed::softmax_fwd::<Self>(scores, scale, causal)
    }

    /// The scores' gradient from the weights' gradient: `dS = scale · P ⊙ (dP − rowsum(P ⊙ dP))`.
    fn softmax_bwd(
        probs: FloatTensor<Self>,
        dprobs: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        composed::softmax_bwd::<Self>(probs, dprobs, scale)
    }

    /// LayerNorm (`rms = false`) or RMSNorm of each row, then `· gamma + beta` where given.
    /// Returns `(y, x̂, 1/σ)`: the output, the normalised rows and each row's `1/σ` (`[R, 1]`).
    fn norm_fwd(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
        rms: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        composed::norm_fwd::<Self>(x, gamma, beta, eps, rms)
    }

    /// `(dx, dgamma, dbeta)` from `dy`, the saved `x̂` and `1/σ`; `dgamma` when `gamma` is given,
    /// `dbeta` when `beta` is.
    #[allow(clippy::type_complexity)]
    fn norm_bwd(
        dy: FloatTensor<Self>,
        xhat: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: bool,
        rms: bool,
    ) -> (
        FloatTensor<Self>,
        Option<FloatTensor<Self>>,
        Option<FloatTensor<Self>>,
    ) {
        composed::norm_bwd::<Self>(dy, xhat, rstd, gamma, beta, rms)
    }

    /// GPT-2's tanh GELU (see [`crate::gelu`]).
    fn gelu_fwd(x: FloatTensor<Self>) -> FloatTensor<Self> {
        composed::gelu_fwd::<Self>(x)
    }

    /// The GELU and its derivative at each input, `(y, dy/dx)`, for training: the backward pass
    /// is then one product.
    fn gelu_with_slope(x: FloatTensor<Self>) -> (FloatTensor<Self>, FloatTensor<Self>) {
        composed::gelu_with_slope::<Self>(x)
    }

    /// `dx = dy ⊙ slope`, from the slope saved by [`FusedOps::gelu_with_slope`].
    fn gelu_bwd(slope: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        composed::gelu_bwd::<Self>(slope, dy)
    }

    /// Self-attention from packed rows: `qkv [B, T, 3C]` (GPT-2's `c_attn` output: `q | k | v`,
    /// head `h` owning columns `h·D..(h+1)·D` of each) → `(y [B, T, C], P [B·H, T, T])`, the
    /// heads' outputs side by side and their weights.
    fn packed_attention_fwd(
        qkv: FloatTensor<Self>,
        heads: usize,
        scale: f64,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        composed::packed_attention_fwd::<Self>(qkv, heads, scale, causal, Self::attention_fwd)
    }

    /// `dqkv [B, T, 3C]` from the saved `qkv`, `P` and `dy [B, T, C]`.
    fn packed_attention_bwd(
        qkv: FloatTensor<Self>,
        probs: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        heads: usize,
        scale: f64,
    ) -> FloatTensor<Self> {
        composed::packed_attention_bwd::<Self>(qkv, probs, dy, heads, scale, Self::attention_bwd)
    }

    /// The attention of [`FusedOps::packed_attention_fwd`], output only.
    fn fused_packed_attention(
        qkv: FloatTensor<Self>,
        heads: usize,
        scale: f64,
        causal: bool,
    ) -> FloatTensor<Self> {
        Self::packed_attention_fwd(qkv, heads, scale, causal).0
    }

    /// `softmax(scale·q·kᵀ, masked)·v`: `q [N, Tq, D]`, `k [N, Tk, D]`, `v [N, Tk, Dv]` →
    /// `(out [N, Tq, Dv], P [N, Tq, Tk])`: the backend's products around [`FusedOps::softmax_fwd`].
    fn attention_fwd(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
        causal: Option<usize>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let scores = Self::float_matmul(q, Self::float_swap_dims(k, 1, 2));
        let probs = Self::softmax_fwd(scores, scale, causal);
        (Self::float_matmul(probs.clone(), v), probs)
    }

    /// `(dq, dk, dv)` from the saved `q`, `k`, `v`, `P` and `dout`: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`,
    /// `dS` by [`FusedOps::softmax_bwd`], `dQ = dS·K`, `dK = dSᵀ·Q`.
    fn attention_bwd(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        probs: FloatTensor<Self>,
        dout: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let dv = Self::float_matmul(Self::float_swap_dims(probs.clone(), 1, 2), dout.clone());
        let dprobs = Self::float_matmul(dout, Self::float_swap_dims(v, 1, 2));
        let dscores = Self::softmax_bwd(probs, dprobs, scale);
        let dq = Self::float_matmul(dscores.clone(), k);
        let dk = Self::float_matmul(Self::float_swap_dims(dscores, 1, 2), q);
        (dq, dk, dv)
    }

    /// The attention of [`FusedOps::attention_fwd`], output only.
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
        causal: Option<usize>,
    ) -> FloatTensor<Self> {
        Self::attention_fwd(q, k, v, scale, causal).0
    }

    /// The norm of [`FusedOps::norm_fwd`], output only.
    fn fused_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
        rms: bool,
    ) -> FloatTensor<Self> {
        Self::norm_fwd(x, gamma, beta, eps, rms).0
    }

    /// The GELU of [`FusedOps::gelu_fwd`].
    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu_fwd(x)
    }

    /// A linear layer on rows: `x [R, I]`, `w [I, O]` (Burn's layout), `b [O]` → `x·w + b`
    /// `[R, O]`.
    fn linear_fwd(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        composed::linear_fwd::<Self>(x, w, b)
    }

    /// `(dx = dy·wᵀ, dw = xᵀ·dy, db = Σ_rows dy)` from the saved `x`, `w` and `dy [R, O]`, each
    /// where `need` asks for it.
    #[allow(clippy::type_complexity)]
    fn linear_bwd(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        need: [bool; 3],
    ) -> (
        Option<FloatTensor<Self>>,
        Option<FloatTensor<Self>>,
        Option<FloatTensor<Self>>,
    ) {
        composed::linear_bwd::<Self>(x, w, dy, need)
    }

    /// Cross-entropy against class indices: `logits [N, V]`, `targets` (N indices below V) →
    /// `(loss [1], P [N, V])`, the mean over rows of `−log softmax(logits)[target]` and the
    /// softmax, kept for the backward pass.
    fn xent_fwd(
        logits: FloatTensor<Self>,
        targets: &[usize],
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        composed::xent_fwd::<Self>(logits, targets)
    }

    /// `dlogits = (P − onehot(targets)) · dloss / N` from the saved `P` and `dloss [1]`.
    fn xent_bwd(
        probs: FloatTensor<Self>,
        targets: &[usize],
        dloss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::xent_bwd::<Self>(probs, targets, dloss)
    }

    /// The loss of [`FusedOps::xent_fwd`].
    fn fused_xent(logits: FloatTensor<Self>, targets: &[usize]) -> FloatTensor<Self> {
        Self::xent_fwd(logits, targets).0
    }

    /// The layer of [`FusedOps::linear_fwd`].
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        Self::linear_fwd(x, w, b)
    }
}

// Inference backends: flex's kernels are in `flex.rs`; ndarray uses the composed defaults (it is
// here so that the f64 parity tests run the fused backward passes).
impl FusedOps for burn_ndarray::NdArray<f64> {}
impl FusedOps for burn_ndarray::NdArray<f32> {}

thread_local! {
    static THREAD_OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether the fused path is on for this thread: `NERVUS_FUSED=0` turns it off for the process,
/// [`composed_here`] for a thread.
pub fn enabled() -> bool {
    static PROCESS: OnceLock<bool> = OnceLock::new();
    THREAD_OVERRIDE.with(|c| c.get()).unwrap_or_else(|| {
        *PROCESS.get_or_init(|| std::env::var("NERVUS_FUSED").map_or(true, |v| v.trim() != "0"))
    })
}

/// Runs `f` with the fused path off on this thread: every op below takes Burn's composed route
/// (and Burn's own autodiff). The witness tests compare the two.
pub fn composed_here<R>(f: impl FnOnce() -> R) -> R {
    let before = THREAD_OVERRIDE.with(|c| c.replace(Some(false)));
    let out = f();
    THREAD_OVERRIDE.with(|c| c.set(before));
    out
}

/// `a` as a `T`, when `A` and `T` are the same type.
fn cast<A: 'static, T: 'static>(a: A) -> T {
    let mut slot = Some(a);
    (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<T>>()
        .and_then(Option::take)
        .expect("cast between identical types")
}

/// Runs `$body` with the type alias `$F` set to `B` when `B` is one of the backends that
/// implement [`FusedOps`]; the body returns from the enclosing function.
macro_rules! on_fused {
    ($B:ty, $F:ident => $body:block) => {
        if enabled() {
            let id = TypeId::of::<$B>();
            {
                type $F = burn_autodiff::Autodiff<burn_flex::Flex>;
                if id == TypeId::of::<$F>() $body
            }
            {
                type $F = burn_flex::Flex;
                if id == TypeId::of::<$F>() $body
            }
            {
                type $F = burn_autodiff::Autodiff<burn_ndarray::NdArray<f64>>;
                if id == TypeId::of::<$F>() $body
            }
            {
                type $F = burn_autodiff::Autodiff<burn_ndarray::NdArray<f32>>;
                if id == TypeId::of::<$F>() $body
            }
            {
                type $F = burn_ndarray::NdArray<f64>;
                if id == TypeId::of::<$F>() $body
            }
            {
                type $F = burn_ndarray::NdArray<f32>;
                if id == TypeId::of::<$F>() $body
            }
        }
    };
}

/// Whether the fused path serves `B` (a CPU backend that implements [`FusedOps`], and not turned
/// off): a layer may then prefer a layout the fused kernels read directly.
pub fn serves<B: Backend>() -> bool {
    on_fused!(B, F => {
        let _ = std::marker::PhantomData::<F>;
        return true;
    });
    false
}

/// Attention of every query over the keys: `softmax(scale·q·kᵀ)·v`, each row's weights summing to
/// one; with `causal = Some(offset)`, query `i` (at position `offset + i`) sees keys `0..=offset+i`.
///
/// Shapes: `q [N, Tq, D]`, `k [N, Tk, D]`, `v [N, Tk, Dv]` → `[N, Tq, Dv]`.
pub fn attention<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    scale: f64,
    causal: Option<usize>,
) -> Tensor<B, 3> {
    on_fused!(B, F => {
        let out = F::fused_attention(
            prim(cast::<_, Tensor<F, 3>>(q)),
            prim(cast::<_, Tensor<F, 3>>(k)),
            prim(cast::<_, Tensor<F, 3>>(v)),
            scale,
            causal,
        );
        return cast(wrap::<F, 3>(out));
    });
    composed::attention(q, k, v, scale, causal)
}

/// Self-attention of every position over itself and the positions before it (`causal`) or over
/// all of them, from GPT-2's packed projection: `qkv = [q | k | v]`, head `h` owning columns
/// `h·D..(h+1)·D` of each third. Returns the heads' outputs side by side, ready for `c_proj`.
///
/// Shapes: `qkv [B, T, 3C]` → `[B, T, C]`.
pub fn packed_attention<B: Backend>(
    qkv: Tensor<B, 3>,
    heads: usize,
    scale: f64,
    causal: bool,
) -> Tensor<B, 3> {
    on_fused!(B, F => {
        let out = F::fused_packed_attention(prim(cast::<_, Tensor<F, 3>>(qkv)), heads, scale, causal);
        return cast(wrap::<F, 3>(out));
    });
    composed::packed_attention(qkv, heads, scale, causal)
}

/// LayerNorm (`rms = false`: subtract the mean, divide by `√(var + eps)`) or RMSNorm (divide by
/// `√(mean(x²) + eps)`) over the last axis, then times `gamma` and plus `beta` where given.
///
/// Shapes: `x [.., C]`, `gamma`, `beta [C]` → `[.., C]`.
pub fn norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Option<Tensor<B, 1>>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
    rms: bool,
) -> Tensor<B, D> {
    let dims = x.dims();
    let c = dims[D - 1];
    on_fused!(B, F => {
        let rows = cast::<_, Tensor<F, D>>(x).reshape([dims.iter().product::<usize>() / c.max(1), c]);
        let out = F::fused_norm(
            prim(rows),
            gamma.map(|g| prim(cast::<_, Tensor<F, 1>>(g))),
            beta.map(|b| prim(cast::<_, Tensor<F, 1>>(b))),
            eps,
            rms,
        );
        return cast(wrap::<F, 2>(out).reshape(dims));
    });
    composed::norm(x, gamma, beta, eps, rms)
}

/// GPT-2's tanh GELU, `x·σ(2z)` with `z = √(2/π)·(x + 0.044715·x³)` (see [`crate::gelu`]).
///
/// Shapes: any → the same.
pub fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let dims = x.dims();
    on_fused!(B, F => {
        let flat = cast::<_, Tensor<F, D>>(x).reshape([dims.iter().product::<usize>()]);
        let out = F::fused_gelu(prim(flat));
        return cast(wrap::<F, 1>(out).reshape(dims));
    });
    composed::gelu_tanh(x)
}

/// A linear layer (Burn's `Linear`: `weight [I, O]`, optional `bias [O]`) on the last axis, as
/// one product over all rows: `x·weight + bias`. The fused path writes the bias into the product's
/// output and takes the three gradients from one node; the composed route is `Linear::forward`.
///
/// Shapes: `x [.., I]` → `[.., O]`.
pub fn linear<B: Backend, const D: usize>(
    layer: &burn::nn::Linear<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    linear_parts(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// [`linear`] from its weight `[I, O]` and bias `[O]`.
///
/// Shapes: `x [.., I]` → `[.., O]`.
pub fn linear_parts<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, D> {
    let dims = x.dims();
    let i = dims[D - 1];
    on_fused!(B, F => {
        let rows = cast::<_, Tensor<F, D>>(x).reshape([dims.iter().product::<usize>() / i.max(1), i]);
        let w = cast::<_, Tensor<F, 2>>(weight);
        let b = bias.map(|b| prim(cast::<_, Tensor<F, 1>>(b)));
        let out = wrap::<F, 2>(F::fused_linear(prim(rows), prim(w), b));
        let mut shape = dims;
        shape[D - 1] = out.dims()[1];
        return cast(out.reshape(shape));
    });
    burn::tensor::module::linear(x, weight, bias)
}

/// The mean cross-entropy of `logits` against class indices: `mean_i(−log softmax(logits_i)[t_i])`,
/// Burn's `CrossEntropyLoss` without its options. The fused path computes each row's softmax once,
/// keeps it, and takes the gradient as `(P − onehot) / N` in one pass; the targets are read back to
/// the host for it (these are CPU backends). Every other backend runs `CrossEntropyLoss`.
///
/// Shapes: `logits [N, V]`, `targets [N]` → `[1]`.
///
/// # Panics
/// When a target is negative or not below `V`, naming it.
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let v = logits.dims()[1];
    on_fused!(B, F => {
        let ids: Vec<usize> = targets
            .into_data()
            .iter::<i64>()
            .enumerate()
            .map(|(i, t)| match usize::try_from(t) {
                Ok(t) if t < v => t,
                _ => panic!("cross-entropy target {t} at row {i} is outside the {v} classes"),
            })
            .collect();
        let out = F::fused_xent(prim(cast::<_, Tensor<F, 2>>(logits)), &ids);
        return cast(wrap::<F, 1>(out));
    });
    burn::nn::loss::CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, targets)
}

/// An AdamW step's first and second moments, `None` before the first step.
pub type Moments<B, const D: usize> = Option<(Tensor<B, D>, Tensor<B, D>)>;

pub use flex_adamw::Scalars as AdamWScalars;

/// One AdamW step of one parameter on flex in a single pass (`flex_adamw`): `param`, its gradient
/// and its moments → `(param, m, v)`, the same to the bit as Burn's `AdamW` with these scalars
/// (no AMSGrad, no cautious decay). `Err` hands the tensors back untouched where the fused path
/// does not serve `B` (a backend other than flex, a dtype other than f32 and f64, or
/// `NERVUS_FUSED=0`); Burn's `AdamW` then takes the step. Shapes: all the same.
#[allow(clippy::type_complexity)]
pub fn adamw_step<B: Backend, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    moments: Moments<B, D>,
    scalars: &AdamWScalars,
) -> Result<(Tensor<B, D>, Tensor<B, D>, Tensor<B, D>), (Tensor<B, D>, Tensor<B, D>, Moments<B, D>)>
{
    let dtype = param.dtype();
    let same = grad.dtype() == dtype
        && moments
            .as_ref()
            .is_none_or(|(m, v)| m.dtype() == dtype && v.dtype() == dtype);
    let real = matches!(dtype, burn::tensor::DType::F32 | burn::tensor::DType::F64);
    if !(enabled() && same && real && TypeId::of::<B>() == TypeId::of::<burn_flex::Flex>()) {
        return Err((param, grad, moments));
    }
    let flex = |t: Tensor<B, D>| cast::<FloatTensor<B>, burn_flex::FlexTensor>(prim(t));
    let back = |t: burn_flex::FlexTensor| wrap::<B, D>(cast::<_, FloatTensor<B>>(t));
    let (p, g) = (flex(param), flex(grad));
    let moments = moments.map(|(m, v)| (flex(m), flex(v)));
    let (p, m, v) = if dtype == burn::tensor::DType::F32 {
        flex_adamw::step::<f32>(p, &g, moments, scalars)
    } else {
        flex_adamw::step::<f64>(p, &g, moments, scalars)
    };
    Ok((back(p), back(m), back(v)))
}

#[cfg(test)]
mod tests;
