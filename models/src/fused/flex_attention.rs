//! flex's kernel for causal self-attention read straight from the packed `qkv [B, T, 3C]` rows a
//! GPT-2 projection makes, and written straight into `[B, T, C]` rows (heads side by side).
//!
//! The composed route cuts `qkv` into heads (`reshape` + `swap_dims`, which flex copies one element
//! at a time) and merges them back, forward and backward. Here each (sequence, head) pair is one
//! task on rayon's threads: its `q`, `k`, `v` are strided views of `qkv` (row stride `3C`), and
//! its products are `gemm` calls on those views, single-threaded inside the task:
//! - forward: `S = scale·Q·Kᵀ`, `P = softmax(S)` by rows (keys after the query get weight 0),
//!   `O = P·V` into the pair's columns of `y`; `P` is kept for the backward pass;
//! - backward: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = scale·P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = dS·K`,
//!   `dK = dSᵀ·Q`, each into the pair's columns of `dqkv`.
//!
//! Tasks write disjoint blocks of the outputs (their own head's columns of their own sequence's
//! rows, their own `T × T` block of `P`), so the results do not depend on the threads.

use super::flex_kernels::{Real, simd_kernel, softmax_bwd_rows, softmax_row, tensor, values};
use burn::tensor::Shape;
use burn_flex::FlexTensor;
use gemm::Parallelism;
use rayon::prelude::*;

/// A raw pointer that tasks share; each task touches its own disjoint elements only.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: the tasks below write disjoint elements through it and read only what no task writes.
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn at(self, offset: usize) -> *mut T {
        // SAFETY: callers stay inside the allocation (offsets from the tensor's own shape).
        unsafe { self.0.add(offset) }
    }
}

/// `dst (m × n) = beta·lhs (m × k)·rhs (k × n)`, each given by its pointer and (row, column)
/// strides, on the calling thread.
///
/// # Safety
/// As [`product_with`].
#[allow(clippy::too_many_arguments)]
unsafe fn product<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: (*mut T, usize, usize),
    lhs: (*const T, usize, usize),
    rhs: (*const T, usize, usize),
    beta: T,
) {
    // SAFETY: as the caller promises.
    unsafe { product_with(m, n, k, dst, lhs, rhs, beta, false, Parallelism::None) }
}

/// `dst (m × n) = [dst +] beta·lhs (m × k)·rhs (k × n)` (`accumulate` adds to what `dst` holds),
/// each given by its pointer and (row, column) strides; `par` as gemm takes it.
///
/// # Safety
/// The pointers and strides must address `m × k`, `k × n` and `m × n` elements inside live
/// allocations, and `dst` must not overlap the others or another thread's writes.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product_with<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: (*mut T, usize, usize),
    lhs: (*const T, usize, usize),
    rhs: (*const T, usize, usize),
    beta: T,
    accumulate: bool,
    par: Parallelism,
) {
    let alpha = if accumulate { T::one() } else { T::zero() };
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2 as isize,
            dst.1 as isize,
            accumulate,
            lhs.0,
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0,
            rhs.2 as isize,
            rhs.1 as isize,
            alpha,
            beta,
            false,
            false,
            false,
            par,
        );
    }
}

simd_kernel! {
    /// A `[T, T]` block of scores in place: each row its softmax (causal: over keys up to the query).
    fn softmax_rows<T: Real>(args: (&mut [T], usize, bool)){
        let (p, t, causal) = args;
        for (i, row) in p.chunks_mut(t).enumerate() {
            softmax_row(row, if causal { i + 1 } else { t });
        }
    }
}

/// Shapes: `qkv [B, T, 3C]` → `(y [B, T, C], P [B·H, T, T])`.
pub fn forward<T: Real>(
    qkv: &FlexTensor,
    heads: usize,
    scale: f64,
    causal: bool,
) -> (FlexTensor, FlexTensor) {
    let [b, t, c3] = qkv.layout().shape().dims::<3>();
    let c = c3 / 3;
    let d = c / heads;
    let src = values::<T>(qkv);
    let mut y = vec![T::zero(); b * t * c];
    let mut probs = vec![T::zero(); b * heads * t * t];
    let y_ptr = Shared(y.as_mut_ptr());
    let scale = T::of(scale);
    probs
        .par_chunks_mut(t * t)
        .enumerate()
        .for_each(|(pair, p)| {
            let (seq, h) = (pair / heads, pair % heads);
            let base = seq * t * c3 + h * d;
            let (q, k, v) = (&src[base..], &src[base + c..], &src[base + 2 * c..]);
            // SAFETY: q, k, v are [T, D] views with row stride 3C inside `src`; `p` is this
            // task's own [T, T] block; the y block (rows of `seq`, columns of `h`) is this
            // task's alone.
            unsafe {
                product(
                    t,
                    t,
                    d,
                    (p.as_mut_ptr(), t, 1),
                    (q.as_ptr(), c3, 1),
                    (k.as_ptr(), 1, c3),
                    scale,
                );
            }
            softmax_rows((&mut p[..], t, causal));
            unsafe {
                product(
                    t,
                    d,
                    t,
                    (y_ptr.at(seq * t * c + h * d), c, 1),
                    (p.as_ptr(), t, 1),
                    (v.as_ptr(), c3, 1),
                    T::one(),
                );
            }
        });
    (
        tensor(y, Shape::new([b, t, c])),
        tensor(probs, Shape::new([b * heads, t, t])),
    )
}

/// Shapes: `qkv [B, T, 3C]`, `P [B·H, T, T]`, `dy [B, T, C]` → `dqkv [B, T, 3C]`.
pub fn backward<T: Real>(
    qkv: &FlexTensor,
    probs: &FlexTensor,
    dy: &FlexTensor,
    heads: usize,
    scale: f64,
) -> FlexTensor {
    let [b, t, c3] = qkv.layout().shape().dims::<3>();
    let c = c3 / 3;
    let d = c / heads;
    let (src, probs, dy) = (values::<T>(qkv), values::<T>(probs), values::<T>(dy));
    let mut dqkv = vec![T::zero(); b * t * c3];
    let out = Shared(dqkv.as_mut_ptr());
    let scale = T::of(scale);
    (0..b * heads).into_par_iter().for_each(|pair| {
        let (seq, h) = (pair / heads, pair % heads);
        let base = seq * t * c3 + h * d;
        let (q, k, v) = (&src[base..], &src[base + c..], &src[base + 2 * c..]);
        let p = &probs[pair * t * t..(pair + 1) * t * t];
        let dout = &dy[seq * t * c + h * d..];
        let mut ds = vec![T::zero(); t * t];
        // SAFETY: every view addresses [T, D] or [T, T] elements inside its buffer (row strides
        // 3C, C or T); each task writes only its own head's columns of its own sequence's rows of
        // dqkv, and its own scratch `ds`.
        unsafe {
            // dV = Pᵀ·dO
            product(
                t,
                d,
                t,
                (out.at(base + 2 * c), c3, 1),
                (p.as_ptr(), 1, t),
                (dout.as_ptr(), c, 1),
                T::one(),
            );
            // dP = dO·Vᵀ
            product(
                t,
                t,
                d,
                (ds.as_mut_ptr(), t, 1),
                (dout.as_ptr(), c, 1),
                (v.as_ptr(), 1, c3),
                T::one(),
            );
        }
        softmax_bwd_rows((0, &mut ds[..], (p, t, scale)));
        unsafe {
            // dQ = dS·K, dK = dSᵀ·Q
            product(
                t,
                d,
                t,
                (out.at(base), c3, 1),
                (ds.as_ptr(), t, 1),
                (k.as_ptr(), c3, 1),
                T::one(),
            );
            product(
                t,
                d,
                t,
                (out.at(base + c), c3, 1),
                (ds.as_ptr(), 1, t),
                (q.as_ptr(), c3, 1),
                T::one(),
            );
        }
    });
    tensor(dqkv, Shape::new([b, t, c3]))
}
