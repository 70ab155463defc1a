//! flex's kernels for [`FusedOps`]: each a single pass (or two) over contiguous rows, split across
//! rayon's threads in blocks of whole rows.
//!
//! The blocks are fixed by the tensor's shape alone ([`GRAIN`] elements a block), never by the
//! number of threads, and a column sum (a norm's `dgamma`, `dbeta`) adds its blocks' partial sums
//! in block order: a result is the same on every machine and every run.
//!
//! f32 and f64 take the same code; any other dtype takes the composed route.

use super::flex_kernels::{
    GRAIN, Real, block_rows, for_row_blocks, simd_kernel, softmax_bwd_rows, softmax_row, sum_by,
    sum_pairs, tensor, values,
};
use super::{FusedOps, composed};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_flex::{Flex, FlexTensor};
use rayon::prelude::*;

fn softmax_fwd<T: Real>(s: &FlexTensor, scale: f64, causal: Option<usize>) -> FlexTensor {
    let shape = s.layout().shape().clone();
    let [_, tq, tk] = shape.dims::<3>();
    let src = values::<T>(s);
    let scale = T::of(scale);
    let mut out = vec![T::zero(); src.len()];
    for_row_blocks(&mut out, tk, (src, tq, tk, scale, causal), softmax_fwd_rows);
    tensor(out, shape)
}

type SoftmaxArgs<'a, T> = (&'a [T], usize, usize, T, Option<usize>);

simd_kernel! {
    fn softmax_fwd_rows<T: Real>(args: (usize, &mut [T], SoftmaxArgs<T>)){
        let (row0, block, (src, tq, tk, scale, causal)) = args;
        for (r, o) in block.chunks_mut(tk).enumerate() {
            let row = row0 + r;
            let seen = causal.map_or(tk, |offset| (row % tq + offset + 1).min(tk));
            for (o, &v) in o[..seen].iter_mut().zip(&src[row * tk..]) {
                *o = v * scale;
            }
            softmax_row(o, seen);
        }
    }
}

fn softmax_bwd<T: Real>(p: &FlexTensor, dp: &FlexTensor, scale: f64) -> FlexTensor {
    let shape = p.layout().shape().clone();
    let tk = shape.dims::<3>()[2];
    let mut out = values::<T>(dp).to_vec();
    let p = values::<T>(p);
    let scale = T::of(scale);
    for_row_blocks(&mut out, tk, (p, tk, scale), softmax_bwd_rows);
    tensor(out, shape)
}

/// What [`norm_rows`] reads.
#[derive(Clone, Copy)]
struct NormArgs<'a, T> {
    src: &'a [T],
    gamma: Option<&'a [T]>,
    beta: Option<&'a [T]>,
    eps: T,
    n: T,
    c: usize,
    rms: bool,
}

simd_kernel! {
    /// Rows `row0..` of a norm's forward pass: `y`, `x̂` and `1/σ`.
    #[allow(clippy::type_complexity)]
    fn norm_rows<T: Real>(args: (usize, &mut [T], &mut [T], &mut [T], NormArgs<T>)){
        let (row0, y, xhat, rstd, a) = args;
        let NormArgs {
            src,
            gamma,
            beta,
            eps,
            n,
            c,
            rms,
        } = a;
        for (r, ((y, xh), rs)) in y
            .chunks_mut(c)
            .zip(xhat.chunks_mut(c))
            .zip(rstd.iter_mut())
            .enumerate()
      {
            let x = &src[(row0 + r) * c..(row0 + r + 1) * c];
            let mean = if rms { T::zero() } else { sum_by(x, |v| v) / n };
            let var = sum_by(x, |v| (v - mean) * (v - mean)) / n;
            let inv = (var + eps).sqrt().recip();
            *rs = inv;
            for (xh, &v) in xh.iter_mut().zip(x) {
                *xh = (v - mean) * inv;
            }
            y.copy_from_slice(xh);
            if let Some(g) = gamma {
                for (y, &g) in y.iter_mut().zip(g) {
                    *y = *y * g;
                }
            }
            if let Some(b) = beta {
                for (y, &b) in y.iter_mut().zip(b) {
                    *y = *y + b;
                }
            }
        }
    }
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
    let args = NormArgs {
        src,
        gamma,
        beta,
        eps,
        n,
        c,
        rms,
    };
    let br = block_rows(c);
    if src.len() < 2 * GRAIN || c == 0 {
        norm_rows((0, &mut y[..], &mut xhat[..], &mut rstd[..], args));
    } else {
        y.par_chunks_mut(br * c)
            .zip(xhat.par_chunks_mut(br * c))
            .zip(rstd.par_chunks_mut(br))
            .enumerate()
            .for_each(|(i, ((y, xh), rs))| norm_rows((i * br, y, xh, rs, args)));
    }
    (
        tensor(y, shape.clone()),
        tensor(xhat, shape),
        tensor(rstd, Shape::new([rows, 1])),
    )
}

/// What [`norm_grad_rows`] reads.
#[derive(Clone, Copy)]
struct NormGradArgs<'a, T> {
    dy: &'a [T],
    xhat: &'a [T],
    rstd: &'a [T],
    gamma: Option<&'a [T]>,
    beta: bool,
    n: T,
    c: usize,
    rms: bool,
}

simd_kernel! {
    /// Rows `row0..` of a norm's backward pass: `dx`, and this block's partial `(dγ, dβ)`.
    fn norm_grad_rows<T: Real>(args: (usize, &mut [T], NormGradArgs<T>)) -> (Vec<T>, Vec<T>) {
        let (row0, dx, a) = args;
        let NormGradArgs {
            dy,
            xhat,
            rstd,
            gamma,
            beta,
            n,
            c,
            rms,
        } = a;
        let mut dg = vec![T::zero(); if gamma.is_some() { c } else { 0 }];
        let mut db = vec![T::zero(); if beta { c } else { 0 }];
        for (r, dx) in dx.chunks_mut(c).enumerate() {
            let at = (row0 + r) * c;
            let (dy, xh) = (&dy[at..at + c], &xhat[at..at + c]);
            // dx holds g = dy ⊙ γ until the last line.
            dx.copy_from_slice(dy);
            if let Some(gm) = gamma {
                for (g, &gm) in dx.iter_mut().zip(gm) {
                    *g = *g * gm;
                }
            }
            let m1 = if rms {
                T::zero()
            } else {
                sum_by(dx, |g| g) / n
            };
            let m2 = sum_pairs(dx, xh, |g, h| g * h) / n;
            let inv = rstd[row0 + r];
            for (o, &h) in dx.iter_mut().zip(xh) {
                *o = (*o - m1 - h * m2) * inv;
            }
            for ((o, &d), &h) in dg.iter_mut().zip(dy).zip(xh) {
                *o = *o + d * h;
            }
            for (o, &d) in db.iter_mut().zip(dy) {
                *o = *o + d;
            }
        }
        (dg, db)
    }
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
    let args = NormGradArgs {
        dy,
        xhat,
        rstd,
        gamma,
        beta,
        n,
        c,
        rms,
    };
    let br = block_rows(c);
    let partials: Vec<(Vec<T>, Vec<T>)> = if dy.len() < 2 * GRAIN || c == 0 {
        vec![norm_grad_rows((0, &mut dx[..], args))]
    } else {
        dx.par_chunks_mut(br * c)
            .enumerate()
            .map(|(i, chunk)| norm_grad_rows((i * br, chunk, args)))
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
#[inline(always)]
fn gelu_parts<T: Real>(x: T) -> (T, T) {
    let u = (x + x * x * x * T::of(0.044_715)) * T::of(-2.0 * composed::SQRT_2_OVER_PI);
    let e = u.min(T::of(composed::EXP_CLAMP)).exp_kernel();
    (u, (e + T::one()).recip())
}

fn gelu_fwd<T: Real>(x: &FlexTensor) -> FlexTensor {
    let shape = x.layout().shape().clone();
    let src = values::<T>(x);
    let mut out = vec![T::zero(); src.len()];
    for_row_blocks(&mut out, 1, src, gelu_block);
    tensor(out, shape)
}

simd_kernel! {
    fn gelu_block<T: Real>(args: (usize, &mut [T], &[T])){
        let (i0, block, src) = args;
        for (o, &x) in block.iter_mut().zip(&src[i0..]) {
            *o = x * gelu_parts(x).1;
        }
    }
}

simd_kernel! {
    fn product_block<T: Real>(args: (usize, &mut [T], (&[T], &[T]))){
        let (i0, block, (a, b)) = args;
        for ((o, &a), &b) in block.iter_mut().zip(&a[i0..]).zip(&b[i0..]) {
            *o = a * b;
        }
    }
}

simd_kernel! {
    /// `y ← gelu(x)` and `slope ← gelu'(x)` over one block of elements.
    fn gelu_slope_block<T: Real>(args: (&[T], &mut [T], &mut [T])){
        let (x, y, slope) = args;
        let clamp = T::of(composed::EXP_CLAMP);
        let (k, c3) = (T::of(2.0 * composed::SQRT_2_OVER_PI), T::of(3.0 * 0.044_715));
        for ((y, sl), &x) in y.iter_mut().zip(slope.iter_mut()).zip(x) {
            let (u, s) = gelu_parts(x);
            *y = x * s;
            let curve = x * s * (T::one() - s) * k * (T::one() + c3 * x * x);
            *sl = if u < clamp { s + curve } else { s };
        }
    }
}

fn gelu_with_slope<T: Real>(x: &FlexTensor) -> (FlexTensor, FlexTensor) {
    let shape = x.layout().shape().clone();
    let src = values::<T>(x);
    let (mut y, mut slope) = (vec![T::zero(); src.len()], vec![T::zero(); src.len()]);
    if src.len() < 2 * GRAIN {
        gelu_slope_block((src, &mut y[..], &mut slope[..]));
    } else {
        y.par_chunks_mut(GRAIN)
            .zip(slope.par_chunks_mut(GRAIN))
            .enumerate()
            .for_each(|(i, (y, sl))| gelu_slope_block((&src[i * GRAIN..], y, sl)));
    }
    (tensor(y, shape.clone()), tensor(slope, shape))
}

fn gelu_bwd<T: Real>(slope: &FlexTensor, dy: &FlexTensor) -> FlexTensor {
    let shape = slope.layout().shape().clone();
    let (slope, dy) = (values::<T>(slope), values::<T>(dy));
    let mut out = vec![T::zero(); slope.len()];
    for_row_blocks(&mut out, 1, (dy, slope), product_block);
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
            composed::packed_attention_fwd::<Flex>(
                qkv,
                heads,
                scale,
                causal,
                <Flex as FusedOps>::attention_fwd
            )
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
            composed::packed_attention_bwd::<Flex>(
                qkv,
                p,
                dy,
                heads,
                scale,
                <Flex as FusedOps>::attention_bwd
            )
        )
    }

    fn xent_fwd(
        logits: FloatTensor<Self>,
        targets: &[usize],
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use super::flex_xent::forward;
        let z = logits.to_contiguous();
        by_dtype!(
            z,
            forward::<T>(&z, targets),
            composed::xent_fwd::<Flex>(z, targets)
        )
    }

    fn xent_bwd(
        probs: FloatTensor<Self>,
        targets: &[usize],
        dloss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        use super::flex_xent::backward;
        let (p, g) = (probs.to_contiguous(), dloss.to_contiguous());
        by_dtype!(
            p,
            backward::<T>(&p, targets, &g),
            composed::xent_bwd::<Flex>(p, targets, g)
        )
    }

    fn linear_fwd(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        use super::flex_linear::forward;
        let (x, w, b) = (
            x.to_contiguous(),
            w.to_contiguous(),
            b.map(|b| b.to_contiguous()),
        );
        by_dtype!(
            x,
            forward::<T>(&x, &w, b.as_ref()),
            composed::linear_fwd::<Flex>(x, w, b)
        )
    }

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
        use super::flex_linear::backward;
        let (x, w, dy) = (x.to_contiguous(), w.to_contiguous(), dy.to_contiguous());
        by_dtype!(
            x,
            backward::<T>(&x, &w, &dy, need),
            composed::linear_bwd::<Flex>(x, w, dy, need)
        )
    }
}
