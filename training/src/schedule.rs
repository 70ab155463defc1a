//! The learning-rate schedule: linear warm-up, then cosine decay to a floor, counted in optimizer
//! steps.
//!
//! 1. For the first `warmup` steps the rate climbs linearly from `peak/warmup` to `peak`: Adam's
//!    first steps move every weight by a full learning rate in the direction of a gradient
//!    estimated from one batch, and warm-up keeps those steps small.
//! 2. Then it follows half a cosine from `peak` down to `floor = decay_to * peak` at the last step.
//! 3. `warmup = 0` and `decay_to = 1` give a flat rate.
//!
//! The schedule's position is its whole state, saved in checkpoints so a resumed run continues on
//! the same curve.

use burn::lr_scheduler::LrScheduler;
use burn::prelude::Backend;

/// A `--warmup` flag in steps: below 1 it is a share of the run's `steps`, else a step count.
pub fn warmup_steps(flag: f64, steps: usize) -> usize {
    if flag < 1.0 {
        (flag * steps as f64).round() as usize
    } else {
        flag as usize
    }
}

/// Warm-up + cosine, step-based.
#[derive(Clone, Debug, PartialEq)]
pub struct WarmupCosine {
    pub peak: f64,
    pub warmup: usize,
    pub total: usize,
    pub decay_to: f64,
    /// Steps taken so far.
    pub step: usize,
}

impl WarmupCosine {
    pub fn new(peak: f64, warmup: usize, total: usize, decay_to: f64) -> Self {
        Self {
            peak,
            warmup: warmup.min(total),
            total: total.max(1),
            decay_to,
            step: 0,
        }
    }

    /// A flat rate.
    pub fn constant(lr: f64) -> Self {
        Self::new(lr, 0, 1, 1.0)
    }

    /// The rate at step `t` (1-based).
    pub fn at(&self, t: usize) -> f64 {
        if t <= self.warmup {
            return self.peak * t as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1);
        let p = ((t - self.warmup) as f64 / span as f64).min(1.0);
        let floor = self.peak * self.decay_to;
        floor + (self.peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
    }
}

impl LrScheduler for WarmupCosine {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> f64 {
        self.step += 1;
        self.at(self.step)
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, step: usize) -> Self {
        self.step = step;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warmup_flag_below_one_is_a_share_of_the_run() {
        assert_eq!(warmup_steps(0.05, 1500), 75);
        assert_eq!(warmup_steps(0.0, 1500), 0);
        assert_eq!(warmup_steps(100.0, 1500), 100);
        assert_eq!(warmup_steps(1.0, 1500), 1);
    }

    #[test]
    fn warmup_climbs_then_cosine_reaches_the_floor() {
        let s = WarmupCosine::new(1.0, 10, 110, 0.1);
        assert_eq!(s.at(1), 0.1);
        assert_eq!(s.at(10), 1.0);
        assert!(
            (s.at(60) - 0.55).abs() < 1e-12,
            "halfway down: {}",
            s.at(60)
        );
        assert!((s.at(110) - 0.1).abs() < 1e-12);
        assert!((s.at(500) - 0.1).abs() < 1e-12, "stays at the floor");
    }

    #[test]
    fn flat_and_no_warmup() {
        let c = WarmupCosine::constant(0.02);
        assert!((1..100).all(|t| c.at(t) == 0.02));
        let s = WarmupCosine::new(1.0, 0, 100, 0.0);
        assert!((s.at(1) - 1.0).abs() < 1e-3 && s.at(100).abs() < 1e-12);
    }

    #[test]
    fn resumes_where_it_stopped() {
        type B = burn_ndarray::NdArray<f32>;
        let mut a = WarmupCosine::new(1.0, 5, 50, 0.1);
        for _ in 0..17 {
            a.step();
        }
        let mut b = WarmupCosine::new(1.0, 5, 50, 0.1).load_record::<B>(a.to_record::<B>());
        assert_eq!(a.step(), b.step());
    }
}
