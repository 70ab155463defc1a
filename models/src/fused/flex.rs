//! flex's kernels for [`FusedOps`]: each a single pass (or two) over contiguous rows, split across
//! rayon's threads in blocks of whole rows.
//!
//! The blocks are fixed by the tensor's shape alone ([`GRAIN`] elements a block), never by the
//! number of threads, and a column sum (a norm's `dgamma`, `dbeta`) adds its blocks' partial sums
//! in block order: a result is the same on every machine and every run.
//!
//! f32 and f64 take the same code; any other dtype takes the composed route.

use super::{FusedOps, composed};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bytes, DType, Element, Shape};
use burn_flex::{Flex, FlexTensor, Layout};
use num_traits::Float;
use rayon::prelude::*;

/// Elements a block of rows is cut to; below twice this a kernel runs on the calling thread.
const GRAIN: usize = 8192;

use crate::gelu::SQRT_2_OVER_PI;

/// The float types the kernels take.
pub(super) trait Real:
    Float + Element + bytemuck::Pod + Send + Sync + std::iter::Sum
{
    fn of(v: f64) -> Self {
        <Self as num_traits::NumCast>::from(v).expect("a float constant")
    }
}
impl Real for f32 {}
impl Real for f64 {}

pub(super) fn values<T: Real>(t: &FlexTensor) -> &[T] {
    t.as_slice::<T>()
        .expect("a contiguous tensor of the kernel's dtype")
}

pub(super) fn tensor<T: Real>(data: Vec<T>, shape: Shape) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(data),
        Layout::contiguous(shape),
        T::dtype(),
    )
}

/// Rows in a block of `cols`-wide rows.
fn block_rows(cols: usize) -> usize {
    (GRAIN / cols.max(1)).max(1)
}

/// Calls `f(first_row, out_rows)` on blocks of whole rows of `out` (`cols` wide), on rayon's
/// threads when there is enough work.
fn for_row_blocks<T: Real>(out: &mut [T], cols: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let rows = block_rows(cols);
    if out.len() < 2 * GRAIN || cols == 0 {
        f(0, out);
    } else {
        out.par_chunks_mut(rows * cols)
            .enumerate()
            .for_each(|(i, chunk)| f(i * rows, chunk));
    }
}

/// One row of weights in place: `row[..seen]` ← softmax of itself, `row[seen..]` ← 0.
pub(super) fn softmax_row<T: Real>(row: &mut [T], seen: usize) {
    let max = row[..seen].iter().fold(T::neg_infinity(), |m, &v| m.max(v));
    let mut sum = T::zero();
    for v in &mut row[..seen] {
        *v = (*v - max).exp();
        sum = sum + *v;
    }
    let inv = sum.recip();
    for v in &mut row[..seen] {
        *v = *v * inv;
    }
    row[seen..].fill(T::zero());
}

/// One row of a softmax's backward pass in place: `g` ← `scale · p ⊙ (g − Σ p ⊙ g)`, from the
/// weights' gradient `g` and the weights `p`.
pub(super) fn softmax_grad_row<T: Real>(g: &mut [T], p: &[T], scale: T) {
    let along: T = g.iter().zip(p).map(|(&a, &b)| a * b).sum();
    for (g, &p) in g.iter_mut().zip(p) {
        *g = scale * p * (*g - along);
    }
}

fn softmax_fwd<T: Real>(s: &FlexTensor, scale: f64, causal: Option<usize>) -> FlexTensor {
    let shape = s.layout().shape().clone();
    let [_, tq, tk] = shape.dims::<3>();
    let src = values::<T>(s);
    let scale = T::of(scale);
    let mut out = vec![T::zero(); src.len()];
    for_row_blocks(&mut out, tk, |row0, block| {
        for (r, o) in block.chunks_mut(tk).enumerate() {
            let row = row0 + r;
            let seen = causal.map_or(tk, |offset| (row % tq + offset + 1).min(tk));
            for (o, &v) in o[..seen].iter_mut().zip(&src[row * tk..]) {
                *o = v * scale;
            }
            softmax_row(o, seen);
        }
    });
    tensor(out, shape)
}

fn softmax_bwd<T: Real>(p: &FlexTensor, dp: &FlexTensor, scale: f64) -> FlexTensor {
    let shape = p.layout().shape().clone();
    let tk = shape.dims::<3>()[2];
    let mut out = values::<T>(dp).to_vec();
    let p = values::<T>(p);
    let scale = T::of(scale);
    for_row_blocks(&mut out, tk, |row0, block| {
        for (r, g) in block.chunks_mut(tk).enumerate() {
            let at = (row0 + r) * tk;
            softmax_grad_row(g, &p[at..at + tk], scale);
        }
    });
    tensor(out, shape)
}

fn norm_fwd<T: Real>(
    x: &FlexTensor,
    gamma: Option<&[T]>,
    beta: Option<&[T]>,
    eps: f64,
    rms: bool,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let shape = x.layout().shape().clone();
    let [rows, c] = shape.dims::<2>();
    let src = values::<T>(x);
    let (eps, n) = (T::of(eps), T::of(c as f64));
    let mut y = vec![T::zero(); src.len()];
    let mut xhat = vec![T::zero(); src.len()];
    let mut rstd = vec![T::zero(); rows];
    let work = |row0: usize, y: &mut [T], xhat: &mut [T], rstd: &mut [T]| {
        for (r, ((y, xh), rs)) in y
            .chunks_mut(c)
            .zip(xhat.chunks_mut(c))
            .zip(rstd.iter_mut())
            .enumerate()
        {
            let x = &src[(row0 + r) * c..(row0 + r + 1) * c];
            let mean = if rms {
                T::zero()
            } else {
                x.iter().copied().sum::<T>() / n
            };
            let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<T>() / n;
            let inv = (var + eps).sqrt().recip();
            *rs = inv;
            for (j, ((y, xh), &v)) in y.iter_mut().zip(xh.iter_mut()).zip(x).enumerate() {
                let h = (v - mean) * inv;
                *xh = h;
                let g = gamma.map_or(T::one(), |g| g[j]);
                let b = beta.map_or(T::zero(), |b| b[j]);
                *y = h * g + b;
            }
        }
    };
    let br = block_rows(c);
    if src.len() < 2 * GRAIN || c == 0 {
        work(0, &mut y, &mut xhat, &mut rstd);
    } else {
        y.par_chunks_mut(br * c)
            .zip(xhat.par_chunks_mut(br * c))
            .zip(rstd.par_chunks_mut(br))
            .enumerate()
            .for_each(|(i, ((y, xh), rs))| work(i * br, y, xh, rs));
    }
    (
        tensor(y, shape.clone()),
        tensor(xhat, shape),
        tensor(rstd, Shape::new([rows, 1])),
    )
}

#[allow(clippy::type_complexity)]
fn norm_bwd<T: Real>(
    dy: &FlexTensor,
    xhat: &FlexTensor,
    rstd: &FlexTensor,
    gamma: Option<&[T]>,
    beta: bool,
    rms: bool,
) -> (FlexTensor, Option<FlexTensor>, Option<FlexTensor>) {
    let shape = dy.layout().shape().clone();
    let [_, c] = shape.dims::<2>();
    let (dy, xhat, rstd) = (values::<T>(dy), values::<T>(xhat), values::<T>(rstd));
    let n = T::of(c as f64);
    let mut dx = vec![T::zero(); dy.len()];
    // One partial (dgamma, dbeta) per block, added in block order below.
    let work = |row0: usize, dx: &mut [T]| -> (Vec<T>, Vec<T>) {
        let mut dg = vec![T::zero(); if gamma.is_some() { c } else { 0 }];
        let mut db = vec![T::zero(); if beta { c } else { 0 }];
        for (r, dx) in dx.chunks_mut(c).enumerate() {
            let at = (row0 + r) * c;
            let (dy, xh) = (&dy[at..at + c], &xhat[at..at + c]);
            let g = |j: usize| gamma.map_or(dy[j], |gm| dy[j] * gm[j]);
            let (mut sum_g, mut sum_gx) = (T::zero(), T::zero());
            for (j, &h) in xh.iter().enumerate() {
                sum_g = sum_g + g(j);
                sum_gx = sum_gx + g(j) * h;
            }
            let m1 = if rms { T::zero() } else { sum_g / n };
            let m2 = sum_gx / n;
            let inv = rstd[row0 + r];
            for (j, (o, &h)) in dx.iter_mut().zip(xh).enumerate() {
                *o = (g(j) - m1 - h * m2) * inv;
            }
            for ((o, &d), &h) in dg.iter_mut().zip(dy).zip(xh) {
                *o = *o + d * h;
            }
            for (o, &d) in db.iter_mut().zip(dy) {
                *o = *o + d;
            }
        }
        (dg, db)
    };
    let br = block_rows(c);
    let partials: Vec<(Vec<T>, Vec<T>)> = if dy.len() < 2 * GRAIN || c == 0 {
        vec![work(0, &mut dx)]
    } else {
        dx.par_chunks_mut(br * c)
            .enumerate()
            .map(|(i, chunk)| work(i * br, chunk))
            .collect()
    };
    let add = |pick: fn(&(Vec<T>, Vec<T>)) -> &Vec<T>| {
        let mut total = vec![T::zero(); c];
        for p in &partials {
            for (t, &v) in total.iter_mut().zip(pick(p)) {
                *t = *t + v;
            }
        }
        tensor(total, Shape::new([c]))
    };
    let dgamma = gamma.is_some().then(|| add(|p| &p.0));
    let dbeta = beta.then(|| add(|p| &p.1));
    (tensor(dx, shape), dgamma, dbeta)
}

/// `(u, s)` with `u = −2z` and `s = σ(2z) = 1/(1 + e^min(u, clamp))`.
#[inline]
fn gelu_parts<T: Real>(x: T) -> (T, T) {
    let u = (x + x * x * x * T::of(0.044_715)) * T::of(-2.0 * SQRT_2_OVER_PI);
    let e = u.min(T::of(crate::gelu::EXP_CLAMP)).exp();
    (u, (e + T::one()).recip())
}

fn gelu_fwd<T: Real>(x: &FlexTensor) -> FlexTensor {
    let shape = x.layout().shape().clone();
    let src = values::<T>(x);
    let mut out = vec![T::zero(); src.len()];
    for_row_blocks(&mut out, 1, |i0, block| {
        for (o, &x) in block.iter_mut().zip(&src[i0..]) {
            *o = x * gelu_parts(x).1;
        }
    });
    tensor(out, shape)
}

fn gelu_with_slope<T: Real>(x: &FlexTensor) -> (FlexTensor, FlexTensor) {
    let shape = x.layout().shape().clone();
    let src = values::<T>(x);
    let clamp = T::of(crate::gelu::EXP_CLAMP);
    let (k, c3) = (T::of(2.0 * SQRT_2_OVER_PI), T::of(3.0 * 0.044_715));
    let work = |i0: usize, y: &mut [T], slope: &mut [T]| {
        for ((y, sl), &x) in y.iter_mut().zip(slope.iter_mut()).zip(&src[i0..]) {
            let (u, s) = gelu_parts(x);
            *y = x * s;
            *sl = s;
            if u < clamp {
                *sl = s + x * s * (T::one() - s) * k * (T::one() + c3 * x * x);
            }
        }
    };
    let (mut y, mut slope) = (vec![T::zero(); src.len()], vec![T::zero(); src.len()]);
    if src.len() < 2 * GRAIN {
        work(0, &mut y, &mut slope);
    } else {
        y.par_chunks_mut(GRAIN)
            .zip(slope.par_chunks_mut(GRAIN))
            .enumerate()
            .for_each(|(i, (y, sl))| work(i * GRAIN, y, sl));
    }
    (tensor(y, shape.clone()), tensor(slope, shape))
}

fn gelu_bwd<T: Real>(slope: &FlexTensor, dy: &FlexTensor) -> FlexTensor {
    let shape = slope.layout().shape().clone();
    let (slope, dy) = (values::<T>(slope), values::<T>(dy));
    let mut out = vec![T::zero(); slope.len()];
    for_row_blocks(&mut out, 1, |i0, block| {
        for ((o, &s), &d) in block.iter_mut().zip(&slope[i0..]).zip(&dy[i0..]) {
            *o = d * s;
        }
    });
    tensor(out, shape)
}

/// Runs `$kernel::<f32>` or `::<f64>` on the dtype of `$t`, else `$fallback`.
macro_rules! by_dtype {
    ($t:expr, $kernel:ident::<T>($($arg:expr),*), $fallback:expr) => {
        match $t.dtype() {
            DType::F32 => $kernel::<f32>($($arg),*),
            DType::F64 => $kernel::<f64>($($arg),*),
            _ => $fallback,
        }
    };
}

impl FusedOps for Flex {
    fn softmax_fwd(
        scores: FloatTensor<Self>,
        scale: f64,
        causal: Option<usize>,
    ) -> FloatTensor<Self> {
        let s = scores.to_contiguous();
        by_dtype!(
            s,
            softmax_fwd::<T>(&s, scale, causal),
            composed::softmax_fwd::<Flex>(s, scale, causal)
        )
    }

    fn softmax_bwd(
        probs: FloatTensor<Self>,
        dprobs: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        let (p, dp) = (probs.to_contiguous(), dprobs.to_contiguous());
        by_dtype!(
            p,
            softmax_bwd::<T>(&p, &dp, scale),
            composed::softmax_bwd::<Flex>(p, dp, scale)
        )
    }

    fn norm_fwd(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
        rms: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let x = x.to_contiguous();
        let (g, b) = (
            gamma.map(|g| g.to_contiguous()),
            beta.map(|b| b.to_contiguous()),
        );
        match x.dtype() {
            DType::F32 => {
                norm_fwd::<f32>(&x, g.as_ref().map(values), b.as_ref().map(values), eps, rms)
            }
            DType::F64 => {
                norm_fwd::<f64>(&x, g.as_ref().map(values), b.as_ref().map(values), eps, rms)
            }
            _ => composed::norm_fwd::<Flex>(x, g, b, eps, rms),
        }
    }

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
        let (dy, xhat, rstd) = (
            dy.to_contiguous(),
            xhat.to_contiguous(),
            rstd.to_contiguous(),
        );
        let g = gamma.map(|g| g.to_contiguous());
        match dy.dtype() {
            DType::F32 => norm_bwd::<f32>(&dy, &xhat, &rstd, g.as_ref().map(values), beta, rms),
            DType::F64 => norm_bwd::<f64>(&dy, &xhat, &rstd, g.as_ref().map(values), beta, rms),
            _ => composed::norm_bwd::<Flex>(dy, xhat, rstd, g, beta, rms),
        }
    }

    fn gelu_fwd(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let x = x.to_contiguous();
        by_dtype!(x, gelu_fwd::<T>(&x), composed::gelu_fwd::<Flex>(x))
    }

    fn gelu_with_slope(x: FloatTensor<Self>) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let x = x.to_contiguous();
        by_dtype!(
            x,
            gelu_with_slope::<T>(&x),
            composed::gelu_with_slope::<Flex>(x)
        )
    }

    fn gelu_bwd(slope: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        let (slope, dy) = (slope.to_contiguous(), dy.to_contiguous());
        by_dtype!(
            slope,
            gelu_bwd::<T>(&slope, &dy),
            composed::gelu_bwd::<Flex>(slope, dy)
        )
    }

    fn packed_attention_fwd(
        qkv: FloatTensor<Self>,
        heads: usize,
        scale: f64,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use super::flex_attention::forward;
        let qkv = qkv.to_contiguous();
        by_dtype!(
            qkv,
            forward::<T>(&qkv, heads, scale, causal),
            composed::packed_attention_fwd::<Flex>(qkv, heads, scale, causal)
        )
    }

    fn packed_attention_bwd(
        qkv: FloatTensor<Self>,
        probs: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        heads: usize,
        scale: f64,
    ) -> FloatTensor<Self> {
        use super::flex_attention::backward;
        let (qkv, p, dy) = (
            qkv.to_contiguous(),
            probs.to_contiguous(),
            dy.to_contiguous(),
        );
        by_dtype!(
            qkv,
            backward::<T>(&qkv, &p, &dy, heads, scale),
            composed::packed_attention_bwd::<Flex>(qkv, p, dy, heads, scale)
        )
    }
}
