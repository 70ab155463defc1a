//! Timestep conditioning as diffusers' DiT builds it: `Timesteps(num_channels = 256,
//! flip_sin_to_cos = True, downscale_freq_shift = 1)` followed by `TimestepEmbedding`
//! (`linear_1 [256, D] → SiLU → linear_2 [D, D]`).
//!
//! The sinusoid: for `t` on the 0..1000 scale and `half = channels/2`,
//! `freq_k = exp(−ln(10000)·k/(half − shift))`, `k = 0..half`, and `emb = [cos(t·freq), sin(t·freq)]`
//! (cos first: that is what `flip_sin_to_cos` flips to). diffusers' `CombinedTimestepLabelEmbeddings`
//! uses `shift = 1`, so the slowest wave has frequency exactly 1/10000; Facebook's DiT
//! (`TimestepEmbedder.timestep_embedding`) divides by `half`, i.e. `shift = 0`, and its slowest
//! wave is `10000^(1/half) ≈ 1.075` times faster. Same layout, different numbers: weights
//! trained with one do not transfer to the other unchanged.
//!
//! The sinusoid has no parameters and `t` is not differentiated (it is sampled, not learned), so
//! it has only a forward pass. The MLP after it is two Linears around a SiLU; its backward pass
//! is theirs in reverse: `linear_2`, then SiLU's slope `σ(h)·(1 + h·(1 − σ(h)))`, then `linear_1`.

use super::{Mat, linear, silu};

/// The number of sinusoid channels DiT feeds its timestep MLP.
pub const FREQ_CHANNELS: usize = 256;
/// `max_period` of the sinusoid: the slowest wave's period is about this many timesteps.
pub const MAX_PERIOD: f64 = 10000.0;
/// diffusers' `downscale_freq_shift` for DiT.
pub const DIFFUSERS_SHIFT: f64 = 1.0;
/// The same quantity in Facebook's DiT, which divides by `half`.
pub const FACEBOOK_SHIFT: f64 = 0.0;

/// `freq_k = exp(−ln(MAX_PERIOD)·k/(half − shift))` for `k = 0..channels/2`.
pub fn frequencies(channels: usize, shift: f64) -> Vec<f64> {
    assert!(
        channels >= 4 && channels.is_multiple_of(2),
        "timestep: need an even channel count"
    );
    let half = channels / 2;
    (0..half)
        .map(|k| (-MAX_PERIOD.ln() * k as f64 / (half as f64 - shift)).exp())
        .collect()
}

/// `t [B]` → `[B, channels]`, each row `[cos(t·freq), sin(t·freq)]`.
pub fn sinusoid(t: &[f64], channels: usize, shift: f64) -> Mat {
    let freqs = frequencies(channels, shift);
    let half = channels / 2;
    let mut out = Mat::zeros(t.len(), channels);
    for (b, &tb) in t.iter().enumerate() {
        for (k, f) in freqs.iter().enumerate() {
            let arg = tb * f;
            *out.at_mut(b, k) = arg.cos();
            *out.at_mut(b, half + k) = arg.sin();
        }
    }
    out
}

/// diffusers' `TimestepEmbedding` weights, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct TimestepEmbeddingParams {
    /// `[channels, D]`.
    pub linear_1_w: Mat,
    /// `[D]`.
    pub linear_1_b: Vec<f64>,
    /// `[D, D]`.
    pub linear_2_w: Mat,
    /// `[D]`.
    pub linear_2_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct TimestepEmbeddingCache {
    /// The sinusoid `[B, channels]`.
    pub input: Mat,
    /// `linear_1`'s output `[B, D]`, SiLU's input.
    pub hidden: Mat,
    /// `SiLU(hidden)` `[B, D]`, `linear_2`'s input.
    pub act: Mat,
}

/// Gradients of [`TimestepEmbeddingParams`], plus the gradient at the sinusoid (unused in
/// training, where `t` is not learned, but checked so that `linear_1`'s backward is complete).
#[derive(Clone, Debug)]
pub struct TimestepEmbeddingGrads {
    pub dinput: Mat,
    pub linear_1_w: Mat,
    pub linear_1_b: Vec<f64>,
    pub linear_2_w: Mat,
    pub linear_2_b: Vec<f64>,
}

/// `emb [B, channels]` (usually [`sinusoid`]) → `[B, D]`.
pub fn forward(emb: &Mat, p: &TimestepEmbeddingParams) -> (Mat, TimestepEmbeddingCache) {
    let hidden = linear::forward(emb, &p.linear_1_w, &p.linear_1_b);
    let act = silu::forward(&hidden);
    let y = linear::forward(&act, &p.linear_2_w, &p.linear_2_b);
    let cache = TimestepEmbeddingCache {
        input: emb.clone(),
        hidden,
        act,
    };
    (y, cache)
}

/// Given `dy [B, D]`, the gradients with respect to the input and every weight.
pub fn backward(
    cache: &TimestepEmbeddingCache,
    p: &TimestepEmbeddingParams,
    dy: &Mat,
) -> TimestepEmbeddingGrads {
    let l2 = linear::backward(&cache.act, &p.linear_2_w, dy);
    let dh = silu::backward(&cache.hidden, &l2.dx);
    let l1 = linear::backward(&cache.input, &p.linear_1_w, &dh);
    TimestepEmbeddingGrads {
        dinput: l1.dx,
        linear_1_w: l1.dw,
        linear_1_b: l1.db,
        linear_2_w: l2.dw,
        linear_2_b: l2.db,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const D: usize = 8;

    #[test]
    fn sinusoid_layout_cos_first() {
        let e = sinusoid(&[0.0, 500.0], FREQ_CHANNELS, DIFFUSERS_SHIFT);
        let half = FREQ_CHANNELS / 2;
        // t = 0: every cos is 1 and every sin 0.
        assert!(e.row(0)[..half].iter().all(|&v| v == 1.0));
        assert!(e.row(0)[half..].iter().all(|&v| v == 0.0));
        // k = 0 has frequency 1: cos(500), sin(500).
        assert_eq!(e.at(1, 0), 500f64.cos());
        assert_eq!(e.at(1, half), 500f64.sin());
        // diffusers' slowest frequency is exactly 1/MAX_PERIOD (up to exp/ln rounding).
        let f = frequencies(FREQ_CHANNELS, DIFFUSERS_SHIFT);
        assert!((f[half - 1] * MAX_PERIOD - 1.0).abs() < 1e-12);
    }

    #[test]
    fn diffusers_and_facebook_differ_in_the_slowest_wave() {
        let d = frequencies(FREQ_CHANNELS, DIFFUSERS_SHIFT);
        let f = frequencies(FREQ_CHANNELS, FACEBOOK_SHIFT);
        let half = FREQ_CHANNELS / 2;
        // Same first frequency (1), different last: 10000^(−1) against 10000^(−127/128).
        assert_eq!(d[0], f[0]);
        let ratio = f[half - 1] / d[half - 1];
        println!("slowest wave: Facebook/diffusers frequency ratio {ratio:.4}");
        assert!((ratio - MAX_PERIOD.powf(1.0 / half as f64)).abs() < 1e-12);
        assert!((1.06..1.09).contains(&ratio), "ratio {ratio}");
        // At t = 999 the slowest channel's sin differs by ~7% between the two.
        let sd = (999.0 * d[half - 1]).sin();
        let sf = (999.0 * f[half - 1]).sin();
        println!("sin(999·f_slowest): diffusers {sd:.5}, Facebook {sf:.5}");
        assert!(((sf - sd) / sd).abs() > 0.05);
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    fn numeric<P: Clone>(
        p: &P,
        field: impl Fn(&mut P) -> &mut [f64],
        loss: impl Fn(&P) -> f64,
    ) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, 1e-3, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    #[test]
    fn timestep_embedding_backward_matches_numerical() {
        // The real input: the sinusoid at four timesteps across the range. Weights of std 0.3 on
        // 256 inputs of size ~0.7 make linear_1's outputs of std ~3: SiLU in every regime.
        let t = [3.0, 250.5, 600.0, 999.0];
        let emb = sinusoid(&t, FREQ_CHANNELS, DIFFUSERS_SHIFT);
        let p = TimestepEmbeddingParams {
            linear_1_w: Mat::new(FREQ_CHANNELS, D, randn(221, FREQ_CHANNELS * D, 0.3)),
            linear_1_b: randn(222, D, 0.5),
            linear_2_w: Mat::new(D, D, randn(223, D * D, 0.5)),
            linear_2_b: randn(224, D, 0.5),
        };
        let dy = Mat::new(t.len(), D, randn(225, t.len() * D, 1.0));
        let loss = |e: &Mat, p: &TimestepEmbeddingParams| dot(&forward(e, p).0, &dy);
        let (_, cache) = forward(&emb, &p);
        let g = backward(&cache, &p, &dy);
        let f = |field: fn(&mut TimestepEmbeddingParams) -> &mut [f64]| {
            numeric(&p, field, |p| loss(&emb, p))
        };
        let checks = [
            (
                "dinput",
                g.dinput.data.clone(),
                numeric(&emb, |e| &mut e.data[..], |e| loss(e, &p)),
            ),
            (
                "linear_1.w",
                g.linear_1_w.data.clone(),
                f(|p| &mut p.linear_1_w.data[..]),
            ),
            (
                "linear_1.b",
                g.linear_1_b.clone(),
                f(|p| &mut p.linear_1_b[..]),
            ),
            (
                "linear_2.w",
                g.linear_2_w.data.clone(),
                f(|p| &mut p.linear_2_w.data[..]),
            ),
            (
                "linear_2.b",
                g.linear_2_b.clone(),
                f(|p| &mut p.linear_2_b[..]),
            ),
        ];
        // L is linear in linear_2's weights (rounding only, ~1e-12); through SiLU the truncation
        // is h²·|L'''|/6 with L''' ≲ |W|³·|silu'''| — a few 1e-7 at most. 1e-6 is the ceiling.
        for (name, a, n) in &checks {
            println!(
                "timestep_embedding {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-6);
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};
    use crate::timestep::TimestepEmbeddingConfig;

    #[test]
    fn timestep_embedding_matches_burn_autodiff() {
        let (b, d) = (3, 8);
        let t = vec![0.0, 417.25, 999.0];
        let p = TimestepEmbeddingParams {
            linear_1_w: Mat::new(
                FREQ_CHANNELS,
                d,
                f32_exact(randn(411, FREQ_CHANNELS * d, 0.3)),
            ),
            linear_1_b: f32_exact(randn(412, d, 0.5)),
            linear_2_w: Mat::new(d, d, f32_exact(randn(413, d * d, 0.5))),
            linear_2_b: f32_exact(randn(414, d, 0.5)),
        };
        let m = load(
            TimestepEmbeddingConfig::new(d).init::<AB>(&Default::default()),
            &[
                ("linear_1.weight", &[FREQ_CHANNELS, d], &p.linear_1_w.data),
                ("linear_1.bias", &[d], &p.linear_1_b),
                ("linear_2.weight", &[d, d], &p.linear_2_w.data),
                ("linear_2.bias", &[d], &p.linear_2_b),
            ],
        );
        let s = sinusoid(&t, FREQ_CHANNELS, DIFFUSERS_SHIFT);
        let burn_s = crate::timestep::sinusoid(tensor::<AB, 1>(t.clone(), [b]), FREQ_CHANNELS, 1.0);
        // Same formula in f64 on both sides; the arguments reach 1000 so rounding is ~1e-13.
        assert_close("sinusoid", &to_vec(burn_s), &s.data, 1e-12);
        let y = m.forward(tensor::<AB, 1>(t, [b]));
        let (want, cache) = forward(&s, &p);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let dy = Mat::new(b, d, randn(415, b * d, 1.0));
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [b, d]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        let got = grads_by_path(&m, &grads);
        assert_close(
            "linear_1.weight",
            &got["linear_1.weight"],
            &g.linear_1_w.data,
            1e-11,
        );
        assert_close("linear_1.bias", &got["linear_1.bias"], &g.linear_1_b, 1e-11);
        assert_close(
            "linear_2.weight",
            &got["linear_2.weight"],
            &g.linear_2_w.data,
            1e-11,
        );
        assert_close("linear_2.bias", &got["linear_2.bias"], &g.linear_2_b, 1e-11);
    }
}
