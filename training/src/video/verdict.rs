//! What the judges read in drawn clips: where each clip's digits went ([`find_direction`]), one
//! judge's verdict on a set of clips ([`ClipVerdict`]) and a panel's ([`PanelVerdict`]).

use super::judge::read_windows;
use crate::checks::BadValue;
use crate::report::Reporter;
use crate::run::TrainError;
use burn::prelude::*;
use nervus_datasets::moving::{self, Clips, FRAME};
use nervus_inference::video::{JUDGED, SHOWCASE, real_clips, write_clips};
use nervus_models::mlp::Mlp;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The centres of both digits in frame `f` if they move apart along `angle`.
fn centres(angle: f64, f: usize) -> [(f64, f64); 2] {
    let mid = FRAME as f64 / 2.0;
    let d = moving::SPEED * f as f64;
    let (uy, ux) = (angle.sin(), angle.cos());
    [(mid + d * uy, mid + d * ux), (mid - d * uy, mid - d * ux)]
}

/// Where a clip's digits went: every clip makes the same journey but in its own direction, so the
/// direction (one of 180, half a turn: the other half swaps the digits) is the one that puts the
/// most ink near the two centres over the judged frames. "Near" is a Gaussian of 3 pixels around
/// each centre: MNIST centres every digit on its centre of mass, so the ink peaks there, where a
/// flat window's sum would plateau over a range of directions.
pub fn find_direction(pixels: &[f32]) -> f64 {
    let score = |angle: f64| -> f64 {
        let mut s = 0.0;
        for f in JUDGED {
            let frame = &pixels[f * FRAME * FRAME..(f + 1) * FRAME * FRAME];
            for (cy, cx) in centres(angle, f) {
                let (y0, y1) = (
                    (cy - 7.0).max(0.0) as usize,
                    (cy + 8.0).min(FRAME as f64) as usize,
                );
                let (x0, x1) = (
                    (cx - 7.0).max(0.0) as usize,
                    (cx + 8.0).min(FRAME as f64) as usize,
                );
                for y in y0..y1 {
                    for x in x0..x1 {
                        // Pixel (y, x) sits at (y + 0.5, x + 0.5).
                        let d2 = (y as f64 + 0.5 - cy).powi(2) + (x as f64 + 0.5 - cx).powi(2);
                        s += frame[y * FRAME + x].clamp(0.0, 1.0) as f64 * (-d2 / 18.0).exp();
                    }
                }
            }
        }
        s
    };
    (0..180)
        .map(|k| k as f64 * std::f64::consts::PI / 180.0)
        .map(|angle| (angle, score(angle)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0.0, |(a, _)| a)
}

/// The judge's reading of clips asked for `pairs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClipVerdict {
    /// Clips whose most-read digit in each place are the two asked for.
    pub mostly_right: usize,
    /// Clips where each place reads as one digit in every judged frame.
    pub held: usize,
    pub clips: usize,
    /// Clips of two different digits that are not mostly right because both places read as the
    /// same one of the two (a 3 and a 7 drawn as two 3s); 0 in verdicts older than the count.
    #[serde(default)]
    pub doubled: usize,
    /// Clips not mostly right, nor doubled, with one place reading as a digit asked for.
    #[serde(default)]
    pub one_right: usize,
}

impl ClipVerdict {
    /// Counts one clip asked for `(a, b)`, whose two places read `p0` and `p1` frame by frame.
    fn count(&mut self, (a, b): (u8, u8), p0: &[u8], p1: &[u8]) {
        let mut modes = [mode(p0), mode(p1)];
        modes.sort();
        let mut asked = [a, b];
        asked.sort();
        if modes == asked {
            self.mostly_right += 1;
        } else if a != b && modes[0] == modes[1] && asked.contains(&modes[0]) {
            self.doubled += 1;
        } else if modes.iter().any(|m| asked.contains(m)) {
            self.one_right += 1;
        }
        if p0.iter().all(|&d| d == p0[0]) && p1.iter().all(|&d| d == p1[0]) {
            self.held += 1;
        }
    }

    /// Clips that are not mostly right, by what went wrong: "doubled 20, one right 12, neither 5".
    pub fn failures(&self) -> String {
        let neither = self.clips - self.mostly_right - self.doubled - self.one_right;
        format!(
            "doubled {}, one right {}, neither {neither}",
            self.doubled, self.one_right
        )
    }
}

/// Reads every clip (0..1 pixels, `CLIP` each) asked for `pairs`, in frames 2–7 of the direction
/// [`find_direction`] finds.
pub fn judge_clips<B: Backend>(
    judge: &Mlp<B>,
    clips: &[Vec<f32>],
    pairs: &[(u8, u8)],
) -> ClipVerdict {
    let mut windows = Vec::new();
    for c in clips {
        let angle = find_direction(c);
        for f in JUDGED {
            let frame = &c[f * FRAME * FRAME..(f + 1) * FRAME * FRAME];
            windows.extend(centres(angle, f).map(|p| moving::window(frame, p)));
        }
    }
    let read = read_windows(judge, &windows);
    let per_clip = JUDGED.len() * 2;
    let mut v = ClipVerdict {
        clips: clips.len(),
        ..Default::default()
    };
    for (k, &pair) in pairs.iter().enumerate() {
        let r = &read[k * per_clip..(k + 1) * per_clip];
        let place =
            |which: usize| -> Vec<u8> { r.iter().skip(which).step_by(2).copied().collect() };
        v.count(pair, &place(0), &place(1));
    }
    v
}

/// The most frequent value (the smallest on a tie).
fn mode(v: &[u8]) -> u8 {
    let mut count = [0usize; 256];
    for &d in v {
        count[d as usize] += 1;
    }
    (0..=255u8)
        .max_by_key(|&d| (count[d as usize], std::cmp::Reverse(d)))
        .unwrap_or(0)
}

/// Several judges' readings of the same clips, one verdict a judge (judges trained alike but for
/// their seed). One judge's count moves by several clips with its seed, so counts are quoted with
/// every judge's figure beside the median.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PanelVerdict {
    pub verdicts: Vec<ClipVerdict>,
}

impl PanelVerdict {
    /// Every judge of `judges` reads `clips` asked for `pairs` ([`judge_clips`]).
    pub fn of<B: Backend>(judges: &[Mlp<B>], clips: &[Vec<f32>], pairs: &[(u8, u8)]) -> Self {
        Self {
            verdicts: judges
                .iter()
                .map(|j| judge_clips(j, clips, pairs))
                .collect(),
        }
    }
    pub fn mostly_right(&self) -> Vec<usize> {
        self.verdicts.iter().map(|v| v.mostly_right).collect()
    }
    pub fn held(&self) -> Vec<usize> {
        self.verdicts.iter().map(|v| v.held).collect()
    }
    /// The median judge's "mostly right" (the lower of the two middle ones for an even panel).
    pub fn median_mostly_right(&self) -> usize {
        self.median_judge().map_or(0, |v| v.mostly_right)
    }
    /// The median judge's "mostly right" as a share of the clips.
    pub fn median_mostly_right_share(&self) -> f64 {
        self.median_mostly_right() as f64 / self.clips().max(1) as f64
    }
    pub fn median_held(&self) -> usize {
        median(self.held())
    }
    pub fn clips(&self) -> usize {
        self.verdicts.first().map_or(0, |v| v.clips)
    }
    /// The verdict of the judge whose "mostly right" is the median (the lower middle one for an
    /// even panel; the first of equals).
    pub fn median_judge(&self) -> Option<&ClipVerdict> {
        let mut order: Vec<&ClipVerdict> = self.verdicts.iter().collect();
        order.sort_by_key(|v| v.mostly_right);
        order.get(order.len().saturating_sub(1) / 2).copied()
    }
    /// "mostly right 22/55 (judges 23, 22, 17), held 6/55 (judges 6, 9, 4)"; one judge's counts
    /// alone when the panel has one.
    pub fn summary(&self) -> String {
        let n = self.clips();
        let each = |v: Vec<usize>| -> String {
            if v.len() < 2 {
                return String::new();
            }
            let list: Vec<String> = v.iter().map(usize::to_string).collect();
            format!(" (judges {})", list.join(", "))
        };
        format!(
            "mostly right {}/{n}{}, held {}/{n}{}",
            self.median_mostly_right(),
            each(self.mostly_right()),
            self.median_held(),
            each(self.held())
        )
    }
}

/// The lower median (0 for none).
fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// The judges' ceiling: one real test clip of each of `pairs` read by the panel, reported with
/// its flicker and what the median judge found wrong; a sheet and a GIF of the showcase pairs'
/// real clips go to `out/real-clips.png` and `.gif`. Returns the verdict and the flicker.
pub fn ceiling<B: Backend>(
    judges: &[Mlp<B>],
    test: &Clips,
    pairs: &[(u8, u8)],
    out: &Path,
    report: &Reporter,
) -> Result<(PanelVerdict, f64), TrainError> {
    let real: Vec<Vec<f32>> = real_clips(test, pairs)
        .into_iter()
        .map(|c| c.pixels)
        .collect();
    let verdict = PanelVerdict::of(judges, &real, pairs);
    let flicker = moving::flicker(&real.concat());
    report.line(format!(
        "real clips of the {} pairs: {}, flicker {flicker:.3}",
        pairs.len(),
        verdict.summary(),
    ));
    if let Some(median) = verdict.median_judge() {
        report.line(format!(
            "real clips not mostly right, by the median judge: {}",
            median.failures()
        ));
    }
    let showcase: Vec<Vec<f32>> = real_clips(test, &SHOWCASE)
        .into_iter()
        .map(|c| c.pixels)
        .collect();
    write_clips(
        &showcase,
        &out.join("real-clips.png"),
        &out.join("real-clips.gif"),
    )
    .map_err(TrainError::Hook)?;
    Ok((verdict, flicker))
}

/// Pairs of digits as a user writes them: `3-7,0-1`.
pub fn parse_pairs(s: &str) -> Result<Vec<(u8, u8)>, BadValue> {
    let bad = |p: &str| BadValue {
        flag: "--pairs",
        value: format!("`{p}`"),
        rule: "each pair is two digits 0–9 like 3-7, pairs separated by commas",
    };
    s.split(',')
        .map(|p| {
            let (a, b) = p.split_once('-').ok_or_else(|| bad(p))?;
            let digit = |d: &str| match d.trim().parse::<u8>() {
                Ok(v) if v < 10 => Ok(v),
                _ => Err(bad(p)),
            };
            Ok((digit(a)?, digit(b)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_datasets::mnist::Mnist;
    use nervus_datasets::moving::Clips;
    use nervus_datasets::rng::Rng;

    #[test]
    fn the_direction_finder_finds_a_real_clips_direction() {
        let data = Mnist::vendored();
        let clips = Clips::new(&data.test);
        let mut rng = Rng::new(5);
        let mut right = 0;
        for _ in 0..40 {
            let c = clips.random(&mut rng);
            let found = find_direction(&c.pixels);
            // The true direction modulo half a turn, against the found one.
            let truth = (c.centres[7][0].0 - 16.0).atan2(c.centres[7][0].1 - 16.0);
            let diff = (found - truth).rem_euclid(std::f64::consts::PI);
            if diff.min(std::f64::consts::PI - diff) < 0.1 {
                right += 1;
            }
        }
        assert!(right >= 36, "found {right} of 40 directions");
    }

    #[test]
    fn the_mode_prefers_the_most_frequent_then_the_smallest() {
        assert_eq!(mode(&[3, 7, 7, 3, 7]), 7);
        assert_eq!(mode(&[9, 2]), 2);
    }

    /// Every clip lands in one of four kinds (mostly right, doubled, one right, neither), and
    /// "held" is counted beside them.
    #[test]
    fn a_verdict_says_what_went_wrong() {
        let mut v = ClipVerdict {
            clips: 7,
            ..Default::default()
        };
        // Asked for 3 and 7: right either way round (one misread does not change the mode)...
        v.count((3, 7), &[3, 3, 3, 3, 3, 3], &[7, 7, 1, 7, 7, 7]); // not held
        v.count((3, 7), &[7; 6], &[3; 6]);
        // ...doubled: both places a 3, or both a 7...
        v.count((3, 7), &[3; 6], &[3, 3, 3, 3, 7, 7]); // not held
        v.count((7, 3), &[7; 6], &[7; 6]);
        // ...one right: a 3 and a 5; neither: two 5s.
        v.count((3, 7), &[3; 6], &[5; 6]);
        v.count((3, 7), &[5; 6], &[5; 6]);
        // Asked for two 1s and drawn as two 1s is right, not doubled.
        v.count((1, 1), &[1; 6], &[1; 6]);
        assert_eq!(
            (v.mostly_right, v.doubled, v.one_right, v.held),
            (3, 2, 1, 5)
        );
        assert_eq!(v.failures(), "doubled 2, one right 1, neither 1");
        let panel = PanelVerdict {
            verdicts: vec![
                ClipVerdict {
                    mostly_right: 9,
                    doubled: 1,
                    ..v.clone()
                },
                ClipVerdict {
                    mostly_right: 2,
                    doubled: 2,
                    ..v.clone()
                },
                ClipVerdict {
                    mostly_right: 5,
                    doubled: 3,
                    ..v.clone()
                },
            ],
        };
        assert_eq!(panel.median_judge().map(|j| j.doubled), Some(3));
    }

    #[test]
    fn pairs_parse_and_a_bad_one_is_named() {
        assert_eq!(
            parse_pairs("3-7,0-1, 5-5"),
            Ok(vec![(3, 7), (0, 1), (5, 5)])
        );
        for bad in ["3-7,0", "3-17", "a-b", "3-7,"] {
            let e = parse_pairs(bad).unwrap_err();
            assert_eq!(e.flag, "--pairs", "{bad}");
        }
        let e = parse_pairs("3-7,2-x").unwrap_err();
        assert_eq!(e.value, "`2-x`");
    }

    #[test]
    fn a_panel_quotes_its_median_and_every_judge() {
        let v = |mostly_right, held| ClipVerdict {
            mostly_right,
            held,
            clips: 55,
            ..Default::default()
        };
        let panel = PanelVerdict {
            verdicts: vec![v(23, 6), v(17, 9), v(22, 4)],
        };
        assert_eq!(panel.median_mostly_right(), 22);
        assert_eq!(panel.median_held(), 6);
        assert_eq!(
            panel.summary(),
            "mostly right 22/55 (judges 23, 17, 22), held 6/55 (judges 6, 9, 4)"
        );
        let one = PanelVerdict {
            verdicts: vec![v(15, 1)],
        };
        assert_eq!(one.summary(), "mostly right 15/55, held 1/55");
        let even = PanelVerdict {
            verdicts: vec![v(4, 0), v(9, 0)],
        };
        assert_eq!(even.median_mostly_right(), 4);
    }
}
