//! The decoder's weight matrices, f32 or int8, and the products it takes with them.
//!
//! A matrix is stored by output rows, `[out, in]` (the transpose of Burn's `Linear` layout), so
//! that one output is one contiguous dot product. An int8 matrix keeps one f32 scale per `group`
//! consecutive inputs of each row (`group == in`: one scale a row), with `w ≈ scale · q`,
//! `q ∈ [−127, 127]`, and the scale chosen so that the group's largest |w| maps to 127.
//!
//! Products: one token (`x [in]`) is a matrix-vector product split over output rows across the
//! threads; more tokens (`x [T, in]`) go through `gemm`, an int8 matrix a block of rows at a time
//! dequantised into a small f32 buffer, so a long prompt costs what it costs in f32.

use gemm::Parallelism;
use rayon::prelude::*;

/// Output rows a thread takes at a time in a matrix-vector product.
const ROWS_PER_TASK: usize = 64;

/// An int8 matrix `[rows, cols]` with a scale per row and group of `group` columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Matrix {
    pub rows: usize,
    pub cols: usize,
    pub group: usize,
    /// `[rows, cols]`, row-major.
    pub q: Vec<i8>,
    /// `[rows, cols / group]`.
    pub scales: Vec<f32>,
}

impl Q8Matrix {
    /// Quantises `w [rows, cols]` (row-major) with a scale per `group` columns of a row (`group`
    /// must divide `cols`).
    pub fn quantize(w: &[f32], rows: usize, cols: usize, group: usize) -> Self {
        assert!(
            group > 0 && cols.is_multiple_of(group) && w.len() == rows * cols,
            "quantize: {rows}×{cols} in groups of {group}, {} values",
            w.len()
        );
        let mut q = vec![0i8; w.len()];
        let mut scales = Vec::with_capacity(rows * cols / group);
        for (src, dst) in w.chunks(group).zip(q.chunks_mut(group)) {
            let amax = src.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            for (d, s) in dst.iter_mut().zip(src) {
                *d = (s * inv).round().clamp(-127.0, 127.0) as i8;
            }
            scales.push(scale);
        }
        Self {
            rows,
            cols,
            group,
            q,
            scales,
        }
    }

    /// Row `r` as f32 into `out [cols]`.
    fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let q = &self.q[r * self.cols..(r + 1) * self.cols];
        let s = &self.scales[r * self.cols / self.group..(r + 1) * self.cols / self.group];
        for ((o, q), s) in out.chunks_mut(self.group).zip(q.chunks(self.group)).zip(s) {
            for (o, &q) in o.iter_mut().zip(q) {
                *o = q as f32 * s;
            }
        }
    }

    /// The whole matrix as f32, `[rows, cols]`.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, row) in out.chunks_mut(self.cols).enumerate() {
            self.dequantize_row(r, row);
        }
        out
    }

    /// Row `r`'s dot product with `x [cols]`.
    fn dot(&self, r: usize, x: &[f32]) -> f32 {
        let q = &self.q[r * self.cols..(r + 1) * self.cols];
        let s = &self.scales[r * self.cols / self.group..(r + 1) * self.cols / self.group];
        q.chunks(self.group)
            .zip(x.chunks(self.group))
            .zip(s)
            .map(|((q, x), s)| dot_q8(q, x) * s)
            .sum()
    }
}

/// A weight matrix `[out, in]`, as f32 or int8.
#[derive(Clone, Debug, PartialEq)]
pub enum Matrix {
    F32 {
        rows: usize,
        cols: usize,
        /// `[rows, cols]`, row-major.
        data: Vec<f32>,
    },
    Q8(Q8Matrix),
}

impl Matrix {
    /// From Burn's `Linear` layout `w [in, out]` (row-major), transposed.
    pub fn from_in_out(w: &[f32], inputs: usize, outputs: usize) -> Self {
        let t = crate::checkpoint::NamedTensor::new("", vec![inputs, outputs], w.to_vec());
        Matrix::F32 {
            rows: outputs,
            cols: inputs,
            data: t.transposed().data,
        }
    }

    /// `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        match self {
            Matrix::F32 { rows, cols, .. } => (*rows, *cols),
            Matrix::Q8(m) => (m.rows, m.cols),
        }
    }

    /// `x [T, in]` → `out [T, out]` (overwritten): `out = x · Wᵀ`.
    pub fn product(&self, x: &[f32], out: &mut [f32]) {
        let (rows, cols) = self.dims();
        let t = x.len() / cols;
        assert_eq!(x.len(), t * cols, "product: x is not [T, {cols}]");
        assert_eq!(out.len(), t * rows, "product: out is not [{t}, {rows}]");
        if t == 1 {
            out.par_chunks_mut(ROWS_PER_TASK)
                .enumerate()
                .for_each(|(c, out)| {
                    let r0 = c * ROWS_PER_TASK;
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = match self {
                            Matrix::F32 { data, .. } => {
                                dot_f32(&data[(r0 + i) * cols..(r0 + i + 1) * cols], x)
                            }
                            Matrix::Q8(m) => m.dot(r0 + i, x),
                        };
                    }
                });
            return;
        }
        match self {
            Matrix::F32 { data, .. } => {
                // SAFETY: every slice is as long as the shapes given say.
                unsafe { gemm_rows(t, rows, cols, x, data, out.as_mut_ptr(), rows, 0) };
            }
            Matrix::Q8(m) => {
                const BLOCK: usize = 128;
                let dst = SendPtr(out.as_mut_ptr());
                (0..rows.div_ceil(BLOCK)).into_par_iter().for_each(|b| {
                    let r0 = b * BLOCK;
                    let n = BLOCK.min(rows - r0);
                    let mut w = vec![0.0f32; n * cols];
                    for (i, row) in w.chunks_mut(cols).enumerate() {
                        m.dequantize_row(r0 + i, row);
                    }
                    // SAFETY: each block writes its own columns `r0..r0 + n` of `out`.
                    unsafe { gemm_rows(t, n, cols, x, &w, dst.get(), rows, r0) };
                });
            }
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);

impl SendPtr {
    /// Through a method, so that a closure captures the whole (`Sync`) wrapper, not its field.
    fn get(self) -> *mut f32 {
        self.0
    }
}
// SAFETY: used only to hand disjoint column blocks of one buffer to the threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// `dst[:, col0..col0 + n] = x [T, k] · w [n, k]ᵀ`, where `dst` is row-major with `ld` columns.
///
/// # Safety
/// `x` holds `t·k` values, `w` holds `n·k`, and `dst` is valid for `t` rows of `ld` columns with
/// `col0 + n ≤ ld`, not written by anyone else in those columns meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_rows(
    t: usize,
    n: usize,
    k: usize,
    x: &[f32],
    w: &[f32],
    dst: *mut f32,
    ld: usize,
    col0: usize,
) {
    let par = if col0 == 0 && n == ld {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            t,
            n,
            k,
            dst.add(col0),
            1,
            ld as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
}

macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($a:ident: $t:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name($($a: $t),*) -> $ret {
            #[inline(always)]
            fn body($($a: $t),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn v3($($a: $t),*) -> $ret {
                    body($($a),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has every feature v3 is compiled for.
                    return unsafe { v3($($a),*) };
                }
            }
            body($($a),*)
        }
    };
}

multiversion! {
    /// `Σ a_i b_i`, in 16 running sums (so that it vectorises).
    pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        let (ac, bc) = (a.chunks_exact(16), b.chunks_exact(16));
        let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
        for (a, b) in ac.zip(bc) {
            for i in 0..16 {
                acc[i] = a[i].mul_add(b[i], acc[i]);
            }
        }
        acc.iter().sum::<f32>() + tail
    }
}

multiversion! {
    /// `Σ q_i x_i` for int8 `q`, in 16 running sums.
    pub fn dot_q8(q: &[i8], x: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        let (qc, xc) = (q.chunks_exact(16), x.chunks_exact(16));
        let tail: f32 = qc.remainder().iter().zip(xc.remainder()).map(|(q, x)| *q as f32 * x).sum();
        for (q, x) in qc.zip(xc) {
            for i in 0..16 {
                acc[i] = (q[i] as f32).mul_add(x[i], acc[i]);
            }
        }
        acc.iter().sum::<f32>() + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    fn naive(x: &[f32], w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let t = x.len() / cols;
        let mut out = vec![0.0f64; t * rows];
        for i in 0..t {
            for r in 0..rows {
                out[i * rows + r] = (0..cols)
                    .map(|c| x[i * cols + c] as f64 * w[r * cols + c] as f64)
                    .sum();
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{i}: {x} vs {y}");
        }
    }

    #[test]
    fn products_match_a_naive_sum_in_f32_and_int8() {
        // 300 rows: more than one task and a partial block; 37 columns: dot products' tails.
        let (rows, cols) = (300, 37 * 4);
        let w = values(rows * cols, 7);
        for t in [1, 5] {
            let x = values(t * cols, 11 + t as u32);
            let want = naive(&x, &w, rows, cols);
            let mut out = vec![f32::NAN; t * rows];
            Matrix::F32 {
                rows,
                cols,
                data: w.clone(),
            }
            .product(&x, &mut out);
            close(&out, &want, 1e-5);
            // int8: against the naive product of the dequantised matrix (the same numbers).
            for group in [cols, 37] {
                let q = Q8Matrix::quantize(&w, rows, cols, group);
                let deq = q.dequantize();
                let want = naive(&x, &deq, rows, cols);
                let mut out = vec![f32::NAN; t * rows];
                Matrix::Q8(q).product(&x, &mut out);
                close(&out, &want, 1e-5);
            }
        }
    }

    #[test]
    fn quantisation_error_is_within_half_a_step() {
        let (rows, cols) = (8, 64);
        let mut w = values(rows * cols, 3);
        w[5] = 9.0; // one large weight: its row's step is large, the other rows' are not.
        for group in [64, 16] {
            let q = Q8Matrix::quantize(&w, rows, cols, group);
            let deq = q.dequantize();
            for (i, (a, b)) in w.iter().zip(&deq).enumerate() {
                let step = q.scales[i / group];
                assert!((a - b).abs() <= 0.5 * step * (1.0 + 1e-6), "{i}: {a} → {b}");
            }
            assert_eq!(q.q[5], 127);
        }
        // A zero row quantises to zeros with scale 0, and dequantises to zeros (not NaN).
        let z = Q8Matrix::quantize(&[0.0; 16], 1, 16, 16);
        assert_eq!(z.dequantize(), vec![0.0; 16]);
    }

    #[test]
    fn from_in_out_transposes() {
        // Burn's [in 2, out 3] → [out 3, in 2].
        let m = Matrix::from_in_out(&[1., 2., 3., 4., 5., 6.], 2, 3);
        assert_eq!(
            m,
            Matrix::F32 {
                rows: 3,
                cols: 2,
                data: vec![1., 4., 2., 5., 3., 6.]
            }
        );
    }
}
