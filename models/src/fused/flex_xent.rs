//! flex's kernels for cross-entropy against class indices: each row's softmax once (kept for the
//! backward pass) and its `−log P[target]`, the rows' losses added in f64 in row order; backward
//! `(P − onehot) · dloss / N` in one pass.

use super::flex_kernels::{Real, simd_kernel, softmax_row, tensor, values};
use burn::tensor::Shape;
use burn_flex::FlexTensor;

/// Shapes: `logits [N, V]`, `targets` (N) → `(loss [1], P [N, V])`.
pub fn forward<T: Real>(logits: &FlexTensor, targets: &[usize]) -> (FlexTensor, FlexTensor) {
    let [n, v] = logits.layout().shape().dims::<2>();
    let z = values::<T>(logits);
    let mut probs = z.to_vec();
    softmax_all((&mut probs[..], v));
    // −log P[t] = (z_max − z_t) − log P[argmax]: exact where P[t] itself would underflow, and
    // P[argmax] ≥ 1/V never does.
    let f = |x: T| num_traits::ToPrimitive::to_f64(&x).unwrap_or(f64::NAN);
    let total: f64 = targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let row = &z[i * v..(i + 1) * v];
            let top = (0..v).fold(0, |m, j| if row[j] > row[m] { j } else { m });
            (f(row[top]) - f(row[t])) - f(probs[i * v + top]).ln()
        })
        .sum();
    let loss = T::of(total / n.max(1) as f64);
    (
        tensor(vec![loss], Shape::new([1])),
        tensor(probs, Shape::new([n, v])),
    )
}

simd_kernel! {
    /// Every `v`-wide row of `rows` in place: its softmax.
    fn softmax_all<T: Real>(args: (&mut [T], usize)) {
        let (rows, v) = args;
        for row in rows.chunks_exact_mut(v.max(1)) {
            softmax_row(row, v);
        }
    }
}

/// Shapes: `P [N, V]`, `targets` (N), `dloss [1]` → `dlogits [N, V]`.
pub fn backward<T: Real>(probs: &FlexTensor, targets: &[usize], dloss: &FlexTensor) -> FlexTensor {
    let [n, v] = probs.layout().shape().dims::<2>();
    let g = values::<T>(dloss)[0] / T::of(n.max(1) as f64);
    let mut d = values::<T>(probs).to_vec();
    scale_all((&mut d[..], g));
    for (i, &t) in targets.iter().enumerate() {
        d[i * v + t] = d[i * v + t] - g;
    }
    tensor(d, Shape::new([n, v]))
}

simd_kernel! {
    /// `xs ← xs · g`.
    fn scale_all<T: Real>(args: (&mut [T], T)) {
        let (xs, g) = args;
        for x in xs.iter_mut() {
            *x = *x * g;
        }
    }
}
