//! flex's kernel for one AdamW step of one parameter: the moments, the bias corrections, the
//! decay and the update in one pass over the parameter's storage, in place where the tensors are
//! not shared, split across rayon's threads in fixed blocks. Burn's `AdamW` takes about a dozen
//! tensor operations for the same step, each a pass and most an allocation, all on the calling
//! thread between training steps.
//!
//! Each element goes through the same floating-point operations, in the same order and at the same
//! precision, as Burn 0.21's `AdamW` (`burn-optim`, `adamw.rs` and `AdaptiveMomentumW`), so the
//! result is the same to the bit (`adamw_matches_burns_to_the_bit`):
//! `m ← m·β₁ + g·(1−β₁)`, `v ← v·β₂ + (g·g)·(1−β₂)` (on the first step `g·(1−β₁)` and
//! `(g·g)·(1−β₂)`), `δ = (m / c₁) / (√(v / c₂) + ε)` with `cᵢ = 1 − βᵢᵗ`, and
//! `p ← p·(1 − lr·λ) − δ·lr` (without the product when `lr·λ` is 0).

use super::flex_kernels::{GRAIN, Real, simd_kernel, tensor, values};
use burn_flex::FlexTensor;
use rayon::prelude::*;

/// One step's scalars, computed as Burn computes them: the betas, ε and the corrections in f32,
/// the learning rate and the decay kept in f64 until they meet the tensor's dtype.
#[derive(Clone, Copy, Debug)]
pub struct Scalars {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// The step's number, from 1.
    pub time: usize,
    pub lr: f64,
    /// `lr·λ`, the share of the parameter the decay takes away.
    pub decay_rate: f64,
}

/// The scalars of one step in the kernel's type.
#[derive(Clone, Copy)]
struct Step<T> {
    beta1: T,
    beta2: T,
    one_minus_beta1: T,
    one_minus_beta2: T,
    correction1: T,
    correction2: T,
    eps: T,
    lr: T,
    keep: Option<T>,
    first: bool,
}

impl<T: Real> Step<T> {
    fn of(s: &Scalars) -> Self {
        let time = s.time as i32;
        let f = |v: f32| T::of(v as f64);
        Self {
            beta1: f(s.beta1),
            beta2: f(s.beta2),
            one_minus_beta1: f(1.0 - s.beta1),
            one_minus_beta2: f(1.0 - s.beta2),
            correction1: f(1f32 - s.beta1.powi(time)),
            correction2: f(1f32 - s.beta2.powi(time)),
            eps: f(s.eps),
            lr: T::of(s.lr),
            keep: (s.decay_rate != 0.0).then(|| T::of(1.0 - s.decay_rate)),
            first: s.time <= 1,
        }
    }
}

/// `t` contiguous from offset 0 and filling its buffer. `t` itself is dropped here, so a lone
/// handle stays the only one and `storage_mut` then writes in place; a shared buffer is copied by
/// `storage_mut` (copy on write), never written under another handle.
fn contiguous(t: FlexTensor) -> FlexTensor {
    t.to_contiguous()
}

/// One AdamW step: `param`, its gradient `grad` and the moments (`None` on the first step) →
/// `(param, m, v)`. Shapes: all the same.
pub fn step<T: Real>(
    param: FlexTensor,
    grad: &FlexTensor,
    moments: Option<(FlexTensor, FlexTensor)>,
    s: &Scalars,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let shape = param.layout().shape().clone();
    let n = shape.num_elements();
    let mut p = contiguous(param);
    let (mut m, mut v) = match moments {
        Some((m, v)) => (contiguous(m), contiguous(v)),
        None => (
            tensor(vec![T::zero(); n], shape.clone()),
            tensor(vec![T::zero(); n], shape),
        ),
    };
    let grad = grad.to_contiguous();
    let g = values::<T>(&grad);
    let k = Step::<T>::of(s);
    let (ps, ms, vs) = (
        &mut p.storage_mut::<T>()[..n],
        &mut m.storage_mut::<T>()[..n],
        &mut v.storage_mut::<T>()[..n],
    );
    if n < 2 * GRAIN {
        update((ps, ms, vs, g, k));
    } else {
        ps.par_chunks_mut(GRAIN)
            .zip(ms.par_chunks_mut(GRAIN))
            .zip(vs.par_chunks_mut(GRAIN))
            .zip(g.par_chunks(GRAIN))
            .for_each(|(((p, m), v), g)| update((p, m, v, g, k)));
    }
    (p, m, v)
}

/// One block's parameter, first and second moments (written in place), gradient, and the step.
type Block<'a, T> = (&'a mut [T], &'a mut [T], &'a mut [T], &'a [T], Step<T>);

simd_kernel! {
    /// The step on one block, in place.
    fn update<T: Real>(args: Block<'_, T>) {
        let (p, m, v, g, k) = args;
        for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
            let (gm, gv) = (g * k.one_minus_beta1, (g * g) * k.one_minus_beta2);
            if k.first {
                *m = gm;
                *v = gv;
            } else {
                *m = *m * k.beta1 + gm;
                *v = *v * k.beta2 + gv;
            }
            let delta = (*m / k.correction1) / ((*v / k.correction2).sqrt() + k.eps);
            let kept = match k.keep {
                Some(keep) => *p * keep,
                None => *p,
            };
            *p = kept - delta * k.lr;
        }
    }
}
