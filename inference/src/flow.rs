//! Drawing by flow matching: start from noise at `t = 1` and walk the model's velocity field back
//! to `t = 0` in Euler steps. Classifier-free guidance runs the model with and without the label and
//! exaggerates the difference: `v = v_u + g·(v_c − v_u)` (`g = 1` is the plain conditional model,
//! `g = 0` ignores the label). A time shift `s` spends the same number of steps differently:
//! `t' = s·t / (1 + (s − 1)·t)` (diffusers' `FlowMatchEulerDiscreteScheduler` `shift`), so `s > 1`
//! takes more, shorter steps at high noise, where a drawing's layout is decided, and fewer near the
//! end; `s = 1` is the even spacing.
//!
//! Guidance in general ([`sample_guided`]) pushes the conditional velocity `v_c` away from worse
//! answers: `v = v_c + Σ (w_k − 1)·(v_c − v_k)`. Classifier-free guidance is the case where the
//! worse answer is the same model's without labels; a negative prompt asks it for other labels.

use burn::prelude::*;
use nervus_models::flow::Velocity;

/// The shifted time of an evenly spaced `t` in 0..1 (`shift = 1`: `t` itself, to the bit).
pub fn shifted(t: f64, shift: f64) -> f64 {
    shift * t / (1.0 + (shift - 1.0) * t)
}

/// Euler from `t = 1` to `t = 0` in `steps` equal steps: `x ← x + (t_next − t)·v(x, t)`.
/// Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn euler<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    steps: usize,
    velocity: impl FnMut(Tensor<B, D>, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    euler_shifted(x1, steps, 1.0, velocity)
}

/// [`euler`] at the times [`shifted`] by `shift`. Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn euler_shifted<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    steps: usize,
    shift: f64,
    mut velocity: impl FnMut(Tensor<B, D>, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    walk(x1, 1.0, steps, shift, |x, _, t| velocity(x, t))
}

/// [`euler_shifted`] from noise level `start` (1: pure noise) instead of 1, at the times
/// `start · shifted(t)`, telling the velocity the step's noise level as a number as well.
fn walk<B: Backend, const D: usize>(
    x1: Tensor<B, D>,
    start: f64,
    steps: usize,
    shift: f64,
    mut velocity: impl FnMut(Tensor<B, D>, f64, Tensor<B, 1>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    let b = x1.dims()[0];
    let device = x1.device();
    let mut x = x1;
    for i in 0..steps {
        // `start = 1` multiplies by one: the times, to the bit, of every drawing made before it.
        let t = start * shifted(1.0 - i as f64 / steps as f64, shift);
        let t_next = start * shifted(1.0 - (i + 1) as f64 / steps as f64, shift);
        let v = velocity(x.clone(), t, Tensor::full([b], t, &device));
        x = x + v * (t_next - t);
    }
    x
}

/// Draws from noise `x1` for `labels [B, L]`, with guidance `g`, in `steps` Euler steps at times
/// shifted by `shift` (1: evenly spaced): the conditional and unconditional velocities come from
/// one batched call.
pub fn sample<B: Backend, const D: usize, M: Velocity<B, D>>(
    model: &M,
    x1: Tensor<B, D>,
    labels: Tensor<B, 2, Int>,
    steps: usize,
    guidance: f64,
    shift: f64,
) -> Tensor<B, D> {
    let [b, l] = labels.dims();
    let null = Tensor::<B, 2, Int>::full([b, l], model.null_label(), &labels.device());
    let both = Tensor::cat(vec![labels, null], 0);
    euler_shifted(x1, steps, shift, |x, t| {
        let v = model.velocity(
            Tensor::cat(vec![x.clone(), x], 0),
            Tensor::cat(vec![t.clone(), t], 0),
            both.clone(),
        );
        let mut halves = v.chunk(2, 0).into_iter();
        let (vc, vu) = (
            halves.next().expect("conditional"),
            halves.next().expect("unconditional"),
        );
        vu.clone() + (vc - vu) * guidance
    })
}

/// One correction of a guided step: a worse answer to push away from, and its weight `w`. The
/// step gains `(w − 1)·(v_c − v_worse)`, so `w = 1` adds nothing.
#[derive(Clone, Debug)]
pub enum Guide<B: Backend> {
    /// The same model without labels: classifier-free guidance.
    Unlabelled { weight: f64 },
    /// The same model asked for other labels `[B, L]`: a negative prompt.
    Labels {
        labels: Tensor<B, 2, Int>,
        weight: f64,
    },
}

/// Euler from noise `x1` for `labels [B, L]` with any number of corrections:
/// `v = v_c + Σ (w_k − 1)·(v_c − v_k)`, at the steps whose noise level is at most `below` (the
/// others take the conditional velocity alone: `below = 1` guides every step, lower values leave
/// the noisiest steps, where a drawing's layout is decided, unguided, as in Kynkäänniemi et al.,
/// "Applying guidance in a limited interval", 2024). Every question put to `model` (the labels,
/// no labels, other labels) goes in one batched call a step. With only `Unlabelled { weight: g }` and `below = 1` this is [`sample`] at guidance
/// `g` (to rounding: `sample` keeps its own arithmetic so that old drawings are drawn again to the
/// bit). Shapes: `x1 [B, ..]` → `[B, ..]`.
pub fn sample_guided<B: Backend, const D: usize, M: Velocity<B, D>>(
    model: &M,
    x1: Tensor<B, D>,
    labels: Tensor<B, 2, Int>,
    guides: &[Guide<B>],
    steps: usize,
    shift: f64,
    below: f64,
) -> Tensor<B, D> {
    sample_guided_from(model, x1, 1.0, labels, guides, steps, shift, below, 0.0)
}

/// [`sample_guided`] from `xt`, a drawing at noise level `start` in (0, 1] (a real sample noised
/// that far, say: how much of it the walk keeps), in `steps` steps at the times `start · t'`,
/// and with the steps above `below` guided by the share `outside` of every push (weight
/// `1 + outside·(w − 1)`; 0: the conditional model alone, what [`sample_guided`] does there).
/// `start = 1, outside = 0` is [`sample_guided`]. Shapes: `xt [B, ..]` → `[B, ..]`.
#[allow(clippy::too_many_arguments)]
pub fn sample_guided_from<B: Backend, const D: usize, M: Velocity<B, D>>(
    model: &M,
    xt: Tensor<B, D>,
    start: f64,
    labels: Tensor<B, 2, Int>,
    guides: &[Guide<B>],
    steps: usize,
    shift: f64,
    below: f64,
    outside: f64,
) -> Tensor<B, D> {
    let [b, l] = labels.dims();
    // The questions for `model`: its labels first, then one set per guide that asks it (the
    // unlabelled question once, however many guides use its answer); `slot[k]` is where guide
    // `k`'s answer comes in the batch.
    let mut asked = vec![labels.clone()];
    let mut unlabelled = None;
    let mut slot = Vec::with_capacity(guides.len());
    for guide in guides {
        slot.push(match guide {
            Guide::Unlabelled { .. } => *unlabelled.get_or_insert_with(|| {
                asked.push(Tensor::full([b, l], model.null_label(), &labels.device()));
                asked.len() - 1
            }),
            Guide::Labels { labels: other, .. } => {
                assert_eq!(other.dims(), [b, l], "guide labels: one set per sample");
                asked.push(other.clone());
                asked.len() - 1
            }
        });
    }
    let n = asked.len();
    let asked = Tensor::cat(asked, 0);
    walk(xt, start, steps, shift, |x, level, t| {
        // The tolerance keeps a step that starts at `below` itself (0.7 as 1 − 6/20, say) guided
        // whatever the rounding of the subtraction.
        let share = if level > below + 1e-9 { outside } else { 1.0 };
        if share == 0.0 {
            return model.velocity(x, t, labels.clone());
        }
        let v = model.velocity(
            Tensor::cat(vec![x.clone(); n], 0),
            Tensor::cat(vec![t.clone(); n], 0),
            asked.clone(),
        );
        let answers = v.chunk(n, 0);
        let vc = answers[0].clone();
        let mut out = vc.clone();
        for (guide, &k) in guides.iter().zip(&slot) {
            let weight = match guide {
                Guide::Unlabelled { weight } | Guide::Labels { weight, .. } => *weight,
            };
            if weight != 1.0 {
                out = out + (vc.clone() - answers[k].clone()) * (share * (weight - 1.0));
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    type TB = burn_ndarray::NdArray<f64>;

    fn vals<const D: usize>(t: Tensor<TB, D>) -> Vec<f64> {
        t.into_data().iter::<f64>().collect()
    }

    /// For a single data point `x0` the exact flow-matching field is `v(x, t) = (x − x0)/t`; each
    /// Euler step stays on the straight line, so Euler lands exactly on `x0` at `t = 0`.
    #[test]
    fn euler_follows_a_straight_flow_to_its_data_point() {
        let dev = Default::default();
        let x0 = Tensor::<TB, 2>::from_data([[0.5, -1.5, 2.0]], &dev);
        let x1 = Tensor::<TB, 2>::from_data([[1.2, 0.3, -0.7]], &dev);
        let out = euler(x1, 7, |x, t| (x - x0.clone()) / t.unsqueeze_dim::<2>(1));
        let (got, want) = (vals(out), vals(x0));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// The shift keeps both ends, is monotone, puts the evenly spaced midpoint at `s / (1 + s)`,
    /// and at `s = 1` is the identity to the bit (so every drawing made before it existed is
    /// drawn again unchanged).
    #[test]
    fn the_time_shift_keeps_the_ends_and_moves_the_middle() {
        for s in [0.5, 1.0, 2.0, 3.0] {
            assert_eq!(shifted(1.0, s), 1.0);
            assert_eq!(shifted(0.0, s), 0.0);
            assert!((shifted(0.5, s) - s / (1.0 + s)).abs() < 1e-15, "shift {s}");
            let ts: Vec<f64> = (0..=20).map(|i| shifted(i as f64 / 20.0, s)).collect();
            assert!(ts.windows(2).all(|w| w[1] > w[0]), "shift {s}: {ts:?}");
        }
        for i in 0..=1000 {
            let t = i as f64 / 1000.0;
            assert_eq!(shifted(t, 1.0).to_bits(), t.to_bits());
        }
    }

    /// A shifted schedule is still a walk along the straight flow, so it lands exactly on the
    /// data point too; and its steps are what the shift says: the first of 10 at shift 3 goes from
    /// 1 to 0.9·3/(1 + 2·0.9) = 27/28 of the way.
    #[test]
    fn a_shifted_euler_lands_on_the_data_point_and_visits_the_shifted_times() {
        let dev = Default::default();
        let x0 = Tensor::<TB, 2>::from_data([[0.5, -1.5, 2.0]], &dev);
        let x1 = Tensor::<TB, 2>::from_data([[1.2, 0.3, -0.7]], &dev);
        let mut seen = Vec::new();
        let out = euler_shifted(x1, 10, 3.0, |x, t| {
            seen.push(vals(t.clone())[0]);
            (x - x0.clone()) / t.unsqueeze_dim::<2>(1)
        });
        let (got, want) = (vals(out), vals(x0));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[0], 1.0);
        assert!((seen[1] - 27.0 / 28.0).abs() < 1e-15, "{seen:?}");
        // Even spacing would have visited 0.9 second; the shift spends more steps up high.
        assert!(seen[5] > 0.5 + 0.2, "{seen:?}");
    }

    /// A linear field `v = a·x` from t = 1 to 0 has the answer `x1·e^{−a}`; Euler's error is first
    /// order, so doubling the steps halves it.
    #[test]
    fn euler_error_halves_when_steps_double() {
        let dev = Default::default();
        let a: f64 = 0.8;
        let err = |steps| {
            let x1 = Tensor::<TB, 1>::from_data([1.0], &dev);
            let x = vals(euler(x1, steps, |x, _| x * a))[0];
            (x - (-a).exp()).abs()
        };
        let (e1, e2) = (err(20), err(40));
        assert!(
            e1 > 0.0 && (e1 / e2 - 2.0).abs() < 0.1,
            "errors {e1:e}, {e2:e}"
        );
    }

    /// A toy velocity field `a·x + b·label + c·t`: it depends on the label, so guidance has
    /// something to act on. Null label 10.
    struct Linear(f64, f64, f64);
    impl Velocity<TB, 2> for Linear {
        fn velocity(
            &self,
            x: Tensor<TB, 2>,
            t: Tensor<TB, 1>,
            labels: Tensor<TB, 2, Int>,
        ) -> Tensor<TB, 2> {
            x * self.0 + labels.float() * self.1 + t.unsqueeze_dim::<2>(1) * self.2
        }
        fn null_label(&self) -> i64 {
            10
        }
    }

    /// The model being drawn with.
    const TOY: Linear = Linear(0.3, 0.1, 0.2);

    #[test]
    fn guidance_one_is_the_conditional_sampler() {
        let dev = Default::default();
        let x1 = Tensor::<TB, 2>::from_data([[0.2, -0.4], [1.0, 0.5]], &dev);
        let labels = Tensor::<TB, 2, Int>::from_data([[3i64], [7]], &dev);
        let guided = vals(sample(&TOY, x1.clone(), labels.clone(), 10, 1.0, 1.0));
        let conditional = vals(euler(x1, 10, |x, t| TOY.velocity(x, t, labels.clone())));
        for (g, c) in guided.iter().zip(&conditional) {
            // v_u + 1·(v_c − v_u) differs from v_c by rounding only.
            assert!((g - c).abs() < 1e-12, "{guided:?} vs {conditional:?}");
        }
        let unguided = vals(sample(
            &TOY,
            Tensor::<TB, 2>::from_data([[0.2, -0.4], [1.0, 0.5]], &dev),
            labels,
            10,
            0.0,
            1.0,
        ));
        assert!(
            unguided
                .iter()
                .zip(&guided)
                .any(|(u, g)| (u - g).abs() > 1e-3),
            "guidance 0 ignores the label"
        );
    }

    fn close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            // Written so that NaN fails.
            assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
        }
    }

    fn start() -> (Tensor<TB, 2>, Tensor<TB, 2, Int>) {
        let dev = Default::default();
        (
            Tensor::<TB, 2>::from_data([[0.2, -0.4], [1.0, 0.5]], &dev),
            Tensor::<TB, 2, Int>::from_data([[3i64], [7]], &dev),
        )
    }

    /// The toy model's "no label" for the two samples of `start()`.
    fn null() -> Tensor<TB, 2, Int> {
        Tensor::full([2, 1], 10, &Default::default())
    }

    /// `TOY` drawn from `start()` with these guides.
    fn toy_drawn(guides: &[Guide<TB>], steps: usize, shift: f64, below: f64) -> Vec<f64> {
        let (x1, labels) = start();
        vals(sample_guided(&TOY, x1, labels, guides, steps, shift, below))
    }

    #[test]
    fn unlabelled_guidance_alone_is_the_plain_sampler() {
        let (x1, labels) = start();
        for g in [0.0, 1.0, 2.5, 5.0] {
            let guides: [Guide<TB>; 1] = [Guide::Unlabelled { weight: g }];
            let got = toy_drawn(&guides, 10, 2.0, 1.0);
            let want = vals(sample(&TOY, x1.clone(), labels.clone(), 10, g, 2.0));
            close(&got, &want, 1e-12);
        }
    }

    /// Other labels are asked of the same model in the same batch, and every guide adds its own
    /// push: classifier-free guidance and a negative prompt together walk
    /// `v_c + (g − 1)(v_c − v_u) + (d − 1)(v_c − v_other)`.
    #[test]
    fn guides_add_up_and_other_labels_push_away_from_their_answer() {
        let (x1, labels) = start();
        let dev = Default::default();
        let other = Tensor::<TB, 2, Int>::from_data([[5i64], [2]], &dev);
        let (g, d) = (3.0, 2.5);
        let guides: [Guide<TB>; 2] = [
            Guide::Unlabelled { weight: g },
            Guide::Labels {
                labels: other.clone(),
                weight: d,
            },
        ];
        let got = toy_drawn(&guides, 6, 1.0, 1.0);
        let null = null();
        let want = vals(euler(x1.clone(), 6, |x, t| {
            let vc = TOY.velocity(x.clone(), t.clone(), labels.clone());
            let vu = TOY.velocity(x.clone(), t.clone(), null.clone());
            let vo = TOY.velocity(x, t, other.clone());
            vc.clone() + (vc.clone() - vu) * (g - 1.0) + (vc - vo) * (d - 1.0)
        }));
        close(&got, &want, 1e-12);
        // Asking for the very labels being drawn pushes nowhere, whatever the weight.
        let same: [Guide<TB>; 1] = [Guide::Labels {
            labels: labels.clone(),
            weight: 4.0,
        }];
        let got = toy_drawn(&same, 6, 1.0, 1.0);
        let want = vals(euler(x1, 6, |x, t| TOY.velocity(x, t, labels.clone())));
        close(&got, &want, 1e-12);
    }

    /// Starting at noise level `start`, the walk visits `start · (1 − i/n)` and ends at 0: the
    /// same as Euler by hand over those times; for one data point (the exact field
    /// `(x − x0)/t`) it lands on the data point from any start.
    #[test]
    fn a_walk_from_a_noise_level_scales_the_times() {
        let (x1, labels) = start();
        let dev = Default::default();
        let null = null();
        let g = 3.0;
        let guides: [Guide<TB>; 1] = [Guide::Unlabelled { weight: g }];
        let (from, steps) = (0.4, 8);
        let got = vals(sample_guided_from(
            &TOY,
            x1.clone(),
            from,
            labels.clone(),
            &guides,
            steps,
            1.0,
            1.0,
            0.0,
        ));
        let mut x = x1.clone();
        for i in 0..steps {
            let t = from * (1.0 - i as f64 / steps as f64);
            let t_next = from * (1.0 - (i + 1) as f64 / steps as f64);
            let tt = Tensor::<TB, 1>::full([2], t, &dev);
            let vc = TOY.velocity(x.clone(), tt.clone(), labels.clone());
            let vu = TOY.velocity(x.clone(), tt, null.clone());
            x = x + (vc.clone() + (vc - vu) * (g - 1.0)) * (t_next - t);
        }
        close(&got, &vals(x), 1e-12);
        // From 1 it is `sample_guided`, to the bit.
        let whole = vals(sample_guided(
            &TOY,
            x1.clone(),
            labels.clone(),
            &guides,
            steps,
            1.0,
            1.0,
        ));
        let from_one = vals(sample_guided_from(
            &TOY, x1, 1.0, labels, &guides, steps, 1.0, 1.0, 0.0,
        ));
        assert_eq!(whole, from_one);
        // One data point, noised to 0.3 and walked back in 5 steps, is found again.
        let x0 = Tensor::<TB, 2>::from_data([[0.5, -1.5], [2.0, 0.25]], &dev);
        let noise = Tensor::<TB, 2>::from_data([[1.2, 0.3], [-0.7, 0.9]], &dev);
        let xt = x0.clone() * 0.7 + noise * 0.3;
        let point = Point(x0.clone());
        let none: [Guide<TB>; 0] = [];
        let labels = Tensor::<TB, 2, Int>::from_data([[0i64], [0]], &dev);
        let back = vals(sample_guided_from(
            &point, xt, 0.3, labels, &none, 5, 1.0, 1.0, 0.0,
        ));
        close(&back, &vals(x0), 1e-12);
    }

    /// The exact flow-matching field of a single data point: `v(x, t) = (x − x0)/t`.
    struct Point(Tensor<TB, 2>);
    impl Velocity<TB, 2> for Point {
        fn velocity(
            &self,
            x: Tensor<TB, 2>,
            t: Tensor<TB, 1>,
            _labels: Tensor<TB, 2, Int>,
        ) -> Tensor<TB, 2> {
            (x - self.0.clone()) / t.unsqueeze_dim::<2>(1)
        }
        fn null_label(&self) -> i64 {
            0
        }
    }

    /// Above `below`, a share of every push: guidance `g` becomes `1 + share·(g − 1)` at those
    /// steps and stays `g` at the rest; share 0 is the unguided noisy steps of `sample_guided`.
    #[test]
    fn a_share_of_guidance_above_the_interval() {
        let (x1, labels) = start();
        let null = null();
        let (g, below, steps) = (5.0, 0.55, 10);
        let guides: [Guide<TB>; 1] = [Guide::Unlabelled { weight: g }];
        let at = |share| {
            vals(sample_guided_from(
                &TOY,
                x1.clone(),
                1.0,
                labels.clone(),
                &guides,
                steps,
                1.0,
                below,
                share,
            ))
        };
        for share in [0.0, 0.5, 1.0] {
            let got = at(share);
            let want = vals(euler(x1.clone(), steps, |x, t| {
                let vc = TOY.velocity(x.clone(), t.clone(), labels.clone());
                let vu = TOY.velocity(x, t.clone(), null.clone());
                let here = if vals(t)[0] > below {
                    1.0 + share * (g - 1.0)
                } else {
                    g
                };
                vc.clone() + (vc - vu) * (here - 1.0)
            }));
            close(&got, &want, 1e-12);
        }
        // Share 0 is `sample_guided`, to the bit.
        let unguided_above = vals(sample_guided(
            &TOY,
            x1.clone(),
            labels.clone(),
            &guides,
            steps,
            1.0,
            below,
        ));
        assert_eq!(at(0.0), unguided_above);
    }

    /// Guidance only at noise levels up to `below`: the noisier steps walk the conditional field
    /// alone, the rest the guided one; `below = 1` guides them all.
    #[test]
    fn guidance_below_a_level_leaves_the_noisier_steps_unguided() {
        let (x1, labels) = start();
        let null = null();
        let g = 4.0;
        let guides: [Guide<TB>; 1] = [Guide::Unlabelled { weight: g }];
        for below in [0.55, 1.0] {
            let got = toy_drawn(&guides, 10, 1.0, below);
            let want = vals(euler(x1.clone(), 10, |x, t| {
                let vc = TOY.velocity(x.clone(), t.clone(), labels.clone());
                if vals(t.clone())[0] > below {
                    vc
                } else {
                    let vu = TOY.velocity(x, t, null.clone());
                    vc.clone() + (vc - vu) * (g - 1.0)
                }
            }));
            close(&got, &want, 1e-12);
        }
        // Steps at 1.0, 0.9, … 0.6 are unguided at 0.55; that is not the fully guided walk.
        let at = |below| toy_drawn(&guides, 10, 1.0, below);
        assert!(
            at(0.55)
                .iter()
                .zip(at(1.0))
                .all(|(p, q)| (p - q).abs() > 1e-3)
        );
    }
}
