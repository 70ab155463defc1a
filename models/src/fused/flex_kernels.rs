//! What every flex kernel shares: the float types they take ([`Real`]), a vectorising `exp`, the
//! SIMD dispatch ([`simd_kernel`]), row blocks spread over rayon's threads, the softmax rows, and
//! the conversions between flex tensors and slices.

use burn::tensor::{Bytes, Element, Shape};
use burn_flex::{FlexTensor, Layout};
use num_traits::Float;
use rayon::prelude::*;

/// Elements a block of rows is cut to; below twice this a kernel runs on the calling thread.
pub(super) const GRAIN: usize = 8192;

/// The float types the kernels take.
pub(super) trait Real:
    Float + Element + bytemuck::Pod + Send + Sync + std::iter::Sum
{
    fn of(v: f64) -> Self {
        <Self as num_traits::NumCast>::from(v).expect("a float constant")
    }
    /// e^x for the kernels: f32 by [`exp_f32`] (vectorises), f64 by libm (the witness twin).
    fn exp_kernel(self) -> Self;
}
impl Real for f32 {
    #[inline(always)]
    fn exp_kernel(self) -> f32 {
        exp_f32(self)
    }
}
impl Real for f64 {
    #[inline(always)]
    fn exp_kernel(self) -> f64 {
        self.exp()
    }
}

/// e^x in f32 arithmetic alone, so that a loop of it vectorises (libm's `expf` is a call per
/// element, a fifth of a small GPT's step): `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2` (n rounded by
/// the 1.5·2²³ trick, ln 2 split in two so that `n·ln 2` is exact), `e^r` by its degree-7 Taylor
/// polynomial with minimax-adjusted coefficients (Cephes' `expf`), and `2ⁿ` built from its
/// exponent bits. Within 1e-7 relative of e^x on `[-87, 88]` (the test
/// `fast_exp_is_within_an_ulp` checks every 1e-4 step); `x` is clamped to that range, so the
/// result is never 0 or ∞ (softmax's arguments are ≤ 0 and GELU clamps its own), and NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -0.000_212_194_44;
    const C: [f32; 6] = [
        0.000_198_756_91,
        0.001_398_199_9,
        0.008_333_452,
        0.041_665_796,
        0.166_666_66,
        0.5,
    ];
    let x = x.clamp(-87.0, 88.0);
    let z = x * std::f32::consts::LOG2_E + ROUND;
    let n = z - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = C[0];
    for c in &C[1..] {
        p = p * r + *c;
    }
    let e = p * r * r + r + 1.0;
    // z's low mantissa bits hold n: the exponent field of 2ⁿ is n + 127.
    let n = (z.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    e * f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// Partial sums a reduction keeps side by side, so that it vectorises; the order the floats
/// are added in depends on the length alone.
pub(super) const LANES: usize = 8;

/// `Σ f(a[i], b[i])` over equal-length slices, in [`LANES`] interleaved partial sums.
#[inline(always)]
pub(super) fn sum_pairs<T: Real>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let mut acc = [T::zero(); LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] = acc[l] + f(x[l], y[l]);
        }
    }
    let mut total = T::zero();
    for v in acc {
        total = total + v;
    }
    for (&x, &y) in ra.iter().zip(rb) {
        total = total + f(x, y);
    }
    total
}

/// `Σ f(a[i])`, as [`sum_pairs`].
#[inline(always)]
pub(super) fn sum_by<T: Real>(a: &[T], f: impl Fn(T) -> T) -> T {
    sum_pairs(a, a, |x, _| f(x))
}

/// The largest element (−∞ for none), in [`LANES`] interleaved maxima.
#[inline(always)]
pub(super) fn max_of<T: Real>(a: &[T]) -> T {
    let mut acc = [T::neg_infinity(); LANES];
    let chunks = a.chunks_exact(LANES);
    let rest = chunks.remainder();
    for x in chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(x[l]);
        }
    }
    acc.into_iter()
        .chain(rest.iter().copied())
        .fold(T::neg_infinity(), T::max)
}

/// Defines a kernel function compiled three times: for AVX-512, for AVX2 with FMA, and for the
/// baseline, the widest the CPU has chosen when it is called (the check is a cached flag). Its
/// loops then vectorise at that width: a 16-lane f32 loop where the build targets plain x86-64,
/// whose SSE2 holds 4. The body is written once, as an `#[inline(always)]` function inlined into
/// each copy; arguments come as one tuple. (pulp's closure dispatch was tried first: the compiler
/// kept a closure's body out of the dispatch, so the loops stayed SSE2, per `perf annotate`.)
macro_rules! simd_kernel {
    ($(#[$m:meta])* $vis:vis fn $name:ident<T: Real>($args:ident: $ty:ty) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name<T: Real>($args: $ty) $(-> $ret)? {
            #[inline(always)]
            fn body<T: Real>($args: $ty) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
                fn v4<T: Real>($args: $ty) $(-> $ret)? {
                    body($args)
                }
                #[target_feature(enable = "avx2,fma")]
                fn v3<T: Real>($args: $ty) $(-> $ret)? {
                    body($args)
                }
                if $crate::fused::flex_kernels::has_avx512() {
                    // SAFETY: the CPU has every feature v4 is compiled for.
                    return unsafe { v4($args) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has every feature v3 is compiled for.
                    return unsafe { v3($args) };
                }
            }
            body($args)
        }
    };
}
pub(super) use simd_kernel;

/// Whether this CPU has the AVX-512 subsets [`simd_kernel`] compiles for.
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512dq")
        && std::is_x86_feature_detected!("avx512bw")
}

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
pub(super) fn block_rows(cols: usize) -> usize {
    (GRAIN / cols.max(1)).max(1)
}

/// Calls `f(first_row, out_rows)` on blocks of whole rows of `out` (`cols` wide), on rayon's
/// threads when there is enough work.
/// `f` is a kernel of `(first_row, out_rows, args)` (see [`simd_kernel`]).
pub(super) fn for_row_blocks<T: Real, A: Copy + Sync>(
    out: &mut [T],
    cols: usize,
    args: A,
    f: impl Fn((usize, &mut [T], A)) + Copy + Sync,
) {
    let rows = block_rows(cols);
    if out.len() < 2 * GRAIN || cols == 0 {
        f((0, out, args));
    } else {
        out.par_chunks_mut(rows * cols)
            .enumerate()
            .for_each(|(i, chunk)| f((i * rows, chunk, args)));
    }
}

/// One row of weights in place: `row[..seen]` ← softmax of itself, `row[seen..]` ← 0.
#[inline(always)]
pub(super) fn softmax_row<T: Real>(row: &mut [T], seen: usize) {
    let (live, masked) = row.split_at_mut(seen);
    let max = max_of(live);
    for v in live.iter_mut() {
        *v = (*v - max).exp_kernel();
    }
    let inv = sum_by(live, |v| v).recip();
    for v in live.iter_mut() {
        *v = *v * inv;
    }
    masked.fill(T::zero());
}

/// One row of a softmax's backward pass in place: `g` ← `scale · p ⊙ (g − Σ p ⊙ g)`, from the
/// weights' gradient `g` and the weights `p`.
#[inline(always)]
pub(super) fn softmax_grad_row<T: Real>(g: &mut [T], p: &[T], scale: T) {
    let along = sum_pairs(g, p, |a, b| a * b);
    for (g, &p) in g.iter_mut().zip(p) {
        *g = scale * p * (*g - along);
    }
}

simd_kernel! {
    /// Rows of a softmax's backward pass in place (`block` starts at row `row0` of `p`).
    pub(super) fn softmax_bwd_rows<T: Real>(args: (usize, &mut [T], (&[T], usize, T))){
        let (row0, block, (p, tk, scale)) = args;
        for (r, g) in block.chunks_mut(tk).enumerate() {
            let at = (row0 + r) * tk;
            softmax_grad_row(g, &p[at..at + tk], scale);
        }
    }
}
