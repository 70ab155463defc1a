//! flex's kernels for a linear layer on rows, each product one `gemm` call on the buffers as they
//! lie (the transposes are strides, never copies):
//! - forward: `y = x·w + b`, the bias written into `y` first and the product added to it;
//! - backward: `dx = dy·wᵀ`, `dw = xᵀ·dy`, `db` the column sums of `dy`, added row after row.
//!
//! The outputs are allocated as `f32`/`f64` vectors, not zeroed where gemm writes them whole. (flex's own `matmul` allocates its output as
//! bytes, which Burn's byte buffer then copies once more to align: a zeroing and a copy of every
//! product's output, a tenth of a small GPT's step in `perf`.)
//!
//! gemm is asked for rayon's threads: inside a training part (one thread) that is one, so the
//! product stays on the part's core. It splits the output, never the sum, so the result does not
//! depend on the threads.

use super::flex_attention::product_with;
use super::flex_kernels::{Real, simd_kernel, tensor, values};
use burn::tensor::Shape;
use burn_flex::FlexTensor;
use gemm::Parallelism;

/// Shapes: `x [R, I]`, `w [I, O]`, `b [O]` → `[R, O]`.
pub fn forward<T: Real>(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> FlexTensor {
    let [r, i] = x.layout().shape().dims::<2>();
    let o = w.layout().shape().dims::<2>()[1];
    let (x, w) = (values::<T>(x), values::<T>(w));
    // SAFETY: x is [R, I] and w [I, O], each contiguous and row-major.
    unsafe {
        fresh_product(
            r,
            o,
            i,
            (x.as_ptr(), i, 1),
            (w.as_ptr(), o, 1),
            b.map(values::<T>),
        )
    }
}

/// Shapes: `x [R, I]`, `w [I, O]`, `dy [R, O]` → `(dx [R, I], dw [I, O], db [O])`, each where
/// `need` asks for it.
#[allow(clippy::type_complexity)]
pub fn backward<T: Real>(
    x: &FlexTensor,
    w: &FlexTensor,
    dy: &FlexTensor,
    need: [bool; 3],
) -> (Option<FlexTensor>, Option<FlexTensor>, Option<FlexTensor>) {
    let [r, i] = x.layout().shape().dims::<2>();
    let o = w.layout().shape().dims::<2>()[1];
    let (x, w, dy) = (values::<T>(x), values::<T>(w), values::<T>(dy));
    // SAFETY: dy is [R, O], w [I, O] read as wᵀ [O, I] (row stride 1, column stride O).
    let dx = need[0]
        .then(|| unsafe { fresh_product(r, i, o, (dy.as_ptr(), o, 1), (w.as_ptr(), 1, o), None) });
    // SAFETY: x is [R, I] read as xᵀ [I, R] (row stride 1, column stride I), dy [R, O].
    let dw = need[1]
        .then(|| unsafe { fresh_product(i, o, r, (x.as_ptr(), 1, i), (dy.as_ptr(), o, 1), None) });
    let db = need[2].then(|| {
        let mut db = vec![T::zero(); o];
        column_sums((&mut db[..], dy));
        tensor(db, Shape::new([o]))
    });
    (dx, dw, db)
}

/// A new `[m, n]` tensor: `lhs (m × k)·rhs (k × n)`, plus `bias [n]` on every row where given
/// (written first, the product added to it). Without a bias the output is not zeroed first: gemm
/// writes every element without reading any (an empty sum, `k = 0`, is zeros, which gemm may not
/// write, so that case starts from zeros).
///
/// # Safety
/// `lhs` and `rhs` (pointer, row stride, column stride) must address `m × k` and `k × n` elements
/// inside live allocations.
unsafe fn fresh_product<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    lhs: (*const T, usize, usize),
    rhs: (*const T, usize, usize),
    bias: Option<&[T]>,
) -> FlexTensor {
    let mut out = match bias {
        Some(b) => b.repeat(m),
        None if k == 0 => vec![T::zero(); m * n],
        None => Vec::with_capacity(m * n),
    };
    // SAFETY: the views as the caller promises; `out` is our own, with room for m × n.
    unsafe {
        product_with(
            m,
            n,
            k,
            (out.as_mut_ptr(), n, 1),
            lhs,
            rhs,
            T::one(),
            bias.is_some(),
            Parallelism::Rayon(0),
        );
        out.set_len(m * n);
    }
    tensor(out, Shape::new([m, n]))
}

simd_kernel! {
    /// `sums[j] += Σ_rows rows[·, j]`, row after row (`rows` is `[R, sums.len()]`).
    fn column_sums<T: Real>(args: (&mut [T], &[T])){
        let (sums, rows) = args;
        for row in rows.chunks_exact(sums.len().max(1)) {
            for (s, &v) in sums.iter_mut().zip(row) {
                *s = *s + v;
            }
        }
    }
}
