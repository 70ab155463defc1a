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

use super::flex::{Real, simd_kernel, tensor, values};
use super::flex_attention::product_with;
use burn::tensor::Shape;
use burn_flex::FlexTensor;
use gemm::Parallelism;

/// Shapes: `x [R, I]`, `w [I, O]`, `b [O]` → `[R, O]`.
pub fn forward<T: Real>(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> FlexTensor {
    let [r, i] = x.layout().shape().dims::<2>();
    let o = w.layout().shape().dims::<2>()[1];
    let (x, w) = (values::<T>(x), values::<T>(w));
    let mut y = match b {
        Some(b) => values::<T>(b).repeat(r),
        None => out_buffer(r * o, i),
    };
    // SAFETY: x is [R, I], w [I, O] and y [R, O], each contiguous and row-major; y is our own.
    unsafe {
        product_with(
            r,
            o,
            i,
            (y.as_mut_ptr(), o, 1),
            (x.as_ptr(), i, 1),
            (w.as_ptr(), o, 1),
            T::one(),
            b.is_some(),
            Parallelism::Rayon(0),
        );
        // Without a bias, gemm has written every element without reading any.
        y.set_len(r * o);
    }
    tensor(y, Shape::new([r, o]))
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
    let dx = need[0].then(|| {
        let mut dx = out_buffer(r * i, o);
        // SAFETY: dy is [R, O], w [I, O] read as wᵀ [O, I] (row stride 1, column stride O).
        unsafe {
            product_with(
                r,
                i,
                o,
                (dx.as_mut_ptr(), i, 1),
                (dy.as_ptr(), o, 1),
                (w.as_ptr(), 1, o),
                T::one(),
                false,
                Parallelism::Rayon(0),
            );
            // gemm has written every element without reading any.
            dx.set_len(r * i);
        }
        tensor(dx, Shape::new([r, i]))
    });
    let dw = need[1].then(|| {
        let mut dw = out_buffer(i * o, r);
        // SAFETY: x is [R, I] read as xᵀ [I, R] (row stride 1, column stride I), dy [R, O].
        unsafe {
            product_with(
                i,
                o,
                r,
                (dw.as_mut_ptr(), o, 1),
                (x.as_ptr(), 1, i),
                (dy.as_ptr(), o, 1),
                T::one(),
                false,
                Parallelism::Rayon(0),
            );
            // gemm has written every element without reading any.
            dw.set_len(i * o);
        }
        tensor(dw, Shape::new([i, o]))
    });
    let db = need[2].then(|| {
        let mut db = vec![T::zero(); o];
        column_sums((&mut db[..], dy));
        tensor(db, Shape::new([o]))
    });
    (dx, dw, db)
}

/// Room for a product's `n` outputs over an inner dimension `k`, for gemm to write whole (read
/// never): left unwritten, except that an empty sum (`k = 0`) is zeros, which gemm may not write.
fn out_buffer<T: Real>(n: usize, k: usize) -> Vec<T> {
    if k == 0 {
        vec![T::zero(); n]
    } else {
        Vec::with_capacity(n)
    }
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
