//! How to draw from a flow-matching model (Euler steps, classifier-free guidance, its interval
//! and time shift), the settings a run saves beside its model and every sampler shares.

use crate::flow::{Guide, sample, sample_guided_from};
use burn::prelude::*;
use nervus_models::flow::Velocity;
use serde::{Deserialize, Serialize};

/// The model's −1..1 back to 0..1 for the judge and for pictures.
pub fn to_unit(v: f32) -> f32 {
    ((v + 1.0) / 2.0).clamp(0.0, 1.0)
}

/// How to draw.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DrawSettings {
    /// Euler steps from noise to image.
    pub steps: usize,
    /// Classifier-free guidance scale.
    pub guidance: f64,
    /// Time shift of the Euler steps ([`crate::flow::shifted`]; 1: evenly spaced, what
    /// every run saved before the option drew with).
    #[serde(default = "unchanged")]
    pub shift: f64,
    /// Guide only the steps at noise levels up to this (1: every step, what every run saved
    /// before the option drew with; [`crate::flow::sample_guided`]).
    #[serde(default = "unchanged")]
    pub guidance_below: f64,
    /// Guidance at the noisier steps, above `guidance_below` (1: the conditional model alone,
    /// what every run saved before the option drew with).
    #[serde(default = "unchanged")]
    pub guidance_above: f64,
}

/// 1, the value of a drawing option that changes nothing (how files older than it read back).
fn unchanged() -> f64 {
    1.0
}

/// A drawing setting out of its range, named by the command-line flag that sets it.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DrawSettingsError {
    #[error("--shift must be a positive number, not {0}")]
    Shift(f64),
    #[error("--guidance-below is a noise level in (0, 1], not {0}")]
    GuidanceBelow(f64),
    #[error("--guidance-above must be a number, not {0}")]
    GuidanceAbove(f64),
    #[error(
        "--guidance-above {0} guides the steps above --guidance-below, which is 1 (every step \
         guided): give --guidance-below a level under 1"
    )]
    AboveWithoutInterval(f64),
}

impl DrawSettings {
    /// Refuses a shift that is not a positive number and a guidance interval outside (0, 1]
    /// (NaN included).
    pub fn check(&self) -> Result<(), DrawSettingsError> {
        if !(self.shift.is_finite() && self.shift > 0.0) {
            return Err(DrawSettingsError::Shift(self.shift));
        }
        if !(self.guidance_below > 0.0 && self.guidance_below <= 1.0) {
            return Err(DrawSettingsError::GuidanceBelow(self.guidance_below));
        }
        if !self.guidance_above.is_finite() {
            return Err(DrawSettingsError::GuidanceAbove(self.guidance_above));
        }
        if self.guidance_above != 1.0 && self.guidance_below >= 1.0 {
            return Err(DrawSettingsError::AboveWithoutInterval(self.guidance_above));
        }
        Ok(())
    }

    /// Draws from noise `x1` for `labels [B, L]` with these settings, as pixels in 0..1.
    /// Shapes: `x1 [B, ..]` → `B·(the rest)` values.
    pub fn draw_pixels<B: Backend, const D: usize, M: Velocity<B, D>>(
        &self,
        model: &M,
        x1: Tensor<B, D>,
        labels: Tensor<B, 2, Int>,
    ) -> Vec<f32> {
        self.draw_pixels_guided(model, Vec::new(), x1, labels)
    }

    /// [`Self::draw_pixels`] with more corrections than classifier-free guidance at
    /// `self.guidance` ([`Guide`]; none: the same arithmetic as `draw_pixels`), through
    /// [`sample_guided_from`] where there are any or a guidance interval. Shapes: `x1 [B, ..]` →
    /// `B·(the rest)` values.
    pub fn draw_pixels_guided<B: Backend, const D: usize, M: Velocity<B, D>>(
        &self,
        model: &M,
        more: Vec<Guide<B>>,
        x1: Tensor<B, D>,
        labels: Tensor<B, 2, Int>,
    ) -> Vec<f32> {
        if more.is_empty() && self.guidance_below >= 1.0 {
            let drawn = sample(model, x1, labels, self.steps, self.guidance, self.shift);
            return drawn.into_data().iter::<f32>().map(to_unit).collect();
        }
        let mut guides = vec![Guide::Unlabelled {
            weight: self.guidance,
        }];
        guides.extend(more);
        // Above the interval every push is this share of its own (guidance 1 pushes nowhere).
        let outside = if self.guidance != 1.0 {
            (self.guidance_above - 1.0) / (self.guidance - 1.0)
        } else {
            0.0
        };
        let drawn = sample_guided_from(
            model,
            x1,
            1.0,
            labels,
            &guides,
            self.steps,
            self.shift,
            self.guidance_below,
            outside,
        );
        drawn.into_data().iter::<f32>().map(to_unit).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Out-of-range settings are refused by name, NaN included; the defaults pass.
    #[test]
    fn draw_settings_out_of_range_are_refused_by_their_flag() {
        let ok = DrawSettings {
            steps: 20,
            guidance: 2.0,
            shift: 1.0,
            guidance_below: 1.0,
            guidance_above: 1.0,
        };
        assert_eq!(ok.check(), Ok(()));
        for shift in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = DrawSettings { shift, ..ok }.check().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("--shift must be a positive number"),
                "{e}"
            );
        }
        for below in [0.0, 1.5, f64::NAN] {
            let e = DrawSettings {
                guidance_below: below,
                ..ok
            }
            .check()
            .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("--guidance-below is a noise level"),
                "{e}"
            );
        }
        for above in [f64::NAN, f64::INFINITY] {
            let e = DrawSettings {
                guidance_above: above,
                guidance_below: 0.6,
                ..ok
            }
            .check()
            .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("--guidance-above must be a number"),
                "{e}"
            );
        }
        // Guidance above an interval that is not there would change nothing: refused.
        let e = DrawSettings {
            guidance_above: 2.0,
            ..ok
        }
        .check()
        .unwrap_err();
        assert_eq!(e, DrawSettingsError::AboveWithoutInterval(2.0));
        let ramp = DrawSettings {
            guidance_above: 2.0,
            guidance_below: 0.6,
            ..ok
        };
        assert_eq!(ramp.check(), Ok(()));
    }

    /// A `training.json` written before the shift and the guidance interval existed reads back
    /// with both off (1), so an old model draws as it did.
    #[test]
    fn old_draw_settings_read_back_with_every_newer_option_off() {
        let old: DrawSettings = serde_json::from_str(r#"{"steps": 20, "guidance": 2.0}"#)
            .expect("an old training.json's draw settings");
        assert_eq!(
            old,
            DrawSettings {
                steps: 20,
                guidance: 2.0,
                shift: 1.0,
                guidance_below: 1.0,
                guidance_above: 1.0,
            }
        );
    }
}
