//! Clips of two digits moving apart, made up on the spot from MNIST.
//!
//! Each digit is shrunk to 14×14 (2×2 averages) and both start centred on the middle of a 32×32
//! frame; over 8 frames they move in opposite directions along one random direction, 1.5 pixels
//! a frame each. Starting them together takes "where" out of the question, so the two labels say
//! nearly everything about a clip (scattered digits made the labels nearly worthless in the
//! reference crate). Sub-pixel positions are drawn by bilinear sampling; where the digits overlap
//! the brighter pixel wins.
//!
//! Because every clip makes the same journey, where each digit is in every frame is known without
//! looking: [`Clip::windows`] cuts the 14×14 window around each digit, which is what the judge
//! reads.

use crate::mnist::{SIDE as DIGIT_SIDE, Split};
use crate::rng::Rng;

/// Frame side in pixels.
pub const FRAME: usize = 32;
/// Frames per clip.
pub const FRAMES: usize = 8;
/// The shrunken digit's side, and the judge's window.
pub const WINDOW: usize = 14;
/// Pixels each digit moves per frame.
pub const SPEED: f64 = 1.5;

/// One clip: `FRAMES × FRAME × FRAME` pixels in 0..1, frame after frame, and the centre `(y, x)`
/// of each digit in each frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Clip {
    pub pixels: Vec<f32>,
    pub centres: Vec<[(f64, f64); 2]>,
    pub digits: [u8; 2],
}

/// A 28×28 MNIST image shrunk to 14×14 by 2×2 averages, in 0..1.
pub fn shrink(image: &[u8]) -> Vec<f32> {
    assert_eq!(
        image.len(),
        DIGIT_SIDE * DIGIT_SIDE,
        "shrink: a 28×28 image"
    );
    let mut out = vec![0f32; WINDOW * WINDOW];
    for (k, v) in out.iter_mut().enumerate() {
        let (y, x) = (2 * (k / WINDOW), 2 * (k % WINDOW));
        let sum: u32 = [(0, 0), (0, 1), (1, 0), (1, 1)]
            .iter()
            .map(|(dy, dx)| image[(y + dy) * DIGIT_SIDE + x + dx] as u32)
            .sum();
        *v = sum as f32 / (4.0 * 255.0);
    }
    out
}

/// The digit's value at continuous digit coordinates `(y, x)` (pixel `k` sits at `k`), bilinear,
/// zero outside.
fn bilinear(digit: &[f32], y: f64, x: f64) -> f32 {
    let (y0, x0) = (y.floor(), x.floor());
    let (fy, fx) = ((y - y0) as f32, (x - x0) as f32);
    let at = |yy: f64, xx: f64| -> f32 {
        if yy < 0.0 || xx < 0.0 || yy >= WINDOW as f64 || xx >= WINDOW as f64 {
            0.0
        } else {
            digit[yy as usize * WINDOW + xx as usize]
        }
    };
    at(y0, x0) * (1.0 - fy) * (1.0 - fx)
        + at(y0, x0 + 1.0) * (1.0 - fy) * fx
        + at(y0 + 1.0, x0) * fy * (1.0 - fx)
        + at(y0 + 1.0, x0 + 1.0) * fy * fx
}

/// Makes the clip of digits `a` and `b` (14×14, 0..1) moving apart along `angle` (radians):
/// `a` along it, `b` the opposite way.
pub fn make_clip(a: &[f32], b: &[f32], angle: f64, digits: [u8; 2]) -> Clip {
    let mid = FRAME as f64 / 2.0;
    let (uy, ux) = (angle.sin(), angle.cos());
    let mut pixels = vec![0f32; FRAMES * FRAME * FRAME];
    let mut centres = Vec::with_capacity(FRAMES);
    for f in 0..FRAMES {
        let d = SPEED * f as f64;
        let c = [(mid + d * uy, mid + d * ux), (mid - d * uy, mid - d * ux)];
        let frame = &mut pixels[f * FRAME * FRAME..(f + 1) * FRAME * FRAME];
        for (digit, (cy, cx)) in [a, b].into_iter().zip(c) {
            // Frame pixel (y, x) covers [y, y + 1); the digit's centre is at 7 in its own frame.
            let (oy, ox) = (cy - WINDOW as f64 / 2.0, cx - WINDOW as f64 / 2.0);
            for y in 0..FRAME {
                for x in 0..FRAME {
                    let v = bilinear(digit, y as f64 - oy, x as f64 - ox);
                    let p = &mut frame[y * FRAME + x];
                    *p = p.max(v);
                }
            }
        }
        centres.push(c);
    }
    Clip {
        pixels,
        centres,
        digits,
    }
}

impl Clip {
    /// Frame `f`'s pixels.
    pub fn frame(&self, f: usize) -> &[f32] {
        &self.pixels[f * FRAME * FRAME..(f + 1) * FRAME * FRAME]
    }

    /// The 14×14 window around digit `which` (0 or 1) in frame `f`: top-left at the rounded
    /// centre less 7, kept inside the frame.
    pub fn window(&self, f: usize, which: usize) -> Vec<f32> {
        window(self.frame(f), self.centres[f][which])
    }
}

/// The 14×14 window of `frame` around `centre`, kept inside the frame.
pub fn window(frame: &[f32], centre: (f64, f64)) -> Vec<f32> {
    let max = (FRAME - WINDOW) as f64;
    let top = (centre.0 - WINDOW as f64 / 2.0).round().clamp(0.0, max) as usize;
    let left = (centre.1 - WINDOW as f64 / 2.0).round().clamp(0.0, max) as usize;
    (0..WINDOW * WINDOW)
        .map(|k| frame[(top + k / WINDOW) * FRAME + left + k % WINDOW])
        .collect()
}

/// The mean absolute change between consecutive frames, over every pixel of every clip, in 0..1
/// units: how much a clip moves. (`pixels` holds whole clips, `FRAMES × FRAME²` each.)
pub fn flicker(pixels: &[f32]) -> f64 {
    let clip = FRAMES * FRAME * FRAME;
    let area = FRAME * FRAME;
    assert!(
        pixels.len().is_multiple_of(clip) && !pixels.is_empty(),
        "flicker: whole clips"
    );
    let (mut sum, mut n) = (0f64, 0usize);
    for c in pixels.chunks(clip) {
        for f in 1..FRAMES {
            let (prev, cur) = (&c[(f - 1) * area..f * area], &c[f * area..(f + 1) * area]);
            sum += prev
                .iter()
                .zip(cur)
                .map(|(a, b)| (a - b).abs() as f64)
                .sum::<f64>();
            n += area;
        }
    }
    sum / n as f64
}

/// Clips drawn from one MNIST split, reproducibly.
#[derive(Clone, Debug)]
pub struct Clips {
    digits: Vec<Vec<f32>>,
    labels: Vec<u8>,
    by_class: Vec<Vec<usize>>,
}

impl Clips {
    /// Shrinks every digit of `split` once.
    pub fn new(split: &Split) -> Self {
        let digits: Vec<Vec<f32>> = (0..split.len()).map(|i| shrink(split.image(i))).collect();
        let mut by_class = vec![Vec::new(); 10];
        for (i, &l) in split.labels.iter().enumerate() {
            by_class[l as usize].push(i);
        }
        assert!(
            by_class.iter().all(|c| !c.is_empty()),
            "moving digits: the split needs every digit 0–9"
        );
        Self {
            digits,
            labels: split.labels.clone(),
            by_class,
        }
    }

    /// A clip of two random digits in a random direction.
    pub fn random(&self, rng: &mut Rng) -> Clip {
        let (i, j) = (rng.below(self.digits.len()), rng.below(self.digits.len()));
        let angle = rng.uniform() * std::f64::consts::TAU;
        make_clip(
            &self.digits[i],
            &self.digits[j],
            angle,
            [self.labels[i], self.labels[j]],
        )
    }

    /// A clip of the requested digits `a` and `b`: random examples of each, random direction.
    pub fn of(&self, a: u8, b: u8, rng: &mut Rng) -> Clip {
        let pick = |d: u8, rng: &mut Rng| {
            let class = &self.by_class[d as usize];
            class[rng.below(class.len())]
        };
        let (i, j) = (pick(a, rng), pick(b, rng));
        let angle = rng.uniform() * std::f64::consts::TAU;
        make_clip(&self.digits[i], &self.digits[j], angle, [a, b])
    }
}

/// The 55 unordered pairs of digits, `(a, b)` with `a ≤ b`.
pub fn pairs() -> Vec<(u8, u8)> {
    (0..10u8)
        .flat_map(|a| (a..10).map(move |b| (a, b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mnist::Mnist;

    fn square() -> Vec<f32> {
        // A 4×4 bright square in the middle of the 14×14 window.
        (0..WINDOW * WINDOW)
            .map(|k| {
                let (y, x) = (k / WINDOW, k % WINDOW);
                if (5..9).contains(&y) && (5..9).contains(&x) {
                    1.0
                } else {
                    0.0
                }
            })
            .collect()
    }

    #[test]
    fn digits_start_together_and_move_apart_at_the_stated_speed() {
        let clip = make_clip(&square(), &square(), 0.3, [1, 2]);
        let [a0, b0] = clip.centres[0];
        assert_eq!(a0, b0);
        assert_eq!(a0, (16.0, 16.0));
        for f in 1..FRAMES {
            let [a, b] = clip.centres[f];
            let dist = ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt();
            assert!(
                (dist - 2.0 * SPEED * f as f64).abs() < 1e-12,
                "frame {f}: {dist}"
            );
        }
    }

    #[test]
    fn a_square_lands_where_its_centre_says() {
        // Angle 0 moves digit a along +x: at frame 2 it is 3 pixels right of the middle, whole
        // pixels, so the square is exact: rows 14..18, columns 17..21.
        let clip = make_clip(&square(), &[0.0; WINDOW * WINDOW], 0.0, [0, 0]);
        let f = clip.frame(2);
        let lit: Vec<(usize, usize)> = (0..FRAME * FRAME)
            .filter(|&k| f[k] > 0.5)
            .map(|k| (k / FRAME, k % FRAME))
            .collect();
        assert_eq!(lit.len(), 16, "{lit:?}");
        assert!(
            lit.iter()
                .all(|&(y, x)| (14..18).contains(&y) && (17..21).contains(&x)),
            "{lit:?}"
        );
        // The window around that centre holds the whole square, where it was in the digit.
        assert_eq!(clip.window(2, 0), square());
    }

    #[test]
    fn shrinking_averages_two_by_two() {
        let mut img = vec![0u8; DIGIT_SIDE * DIGIT_SIDE];
        img[0] = 255;
        img[1] = 255;
        img[DIGIT_SIDE + 1] = 255;
        let s = shrink(&img);
        assert_eq!(s[0], 0.75);
        assert!(s[1..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_still_clip_has_no_flicker_and_a_moving_one_some() {
        let still = vec![0.5f32; FRAMES * FRAME * FRAME];
        assert_eq!(flicker(&still), 0.0);
        let data = Mnist::vendored();
        let clips = Clips::new(&data.test);
        let mut rng = Rng::new(3);
        let px: Vec<f32> = (0..20)
            .flat_map(|_| clips.random(&mut rng).pixels)
            .collect();
        let f = flicker(&px);
        assert!(f > 0.02 && f < 0.1, "flicker of real clips {f}");
    }

    #[test]
    fn clips_are_a_function_of_the_seed_and_ask_for_their_digits() {
        let data = Mnist::vendored();
        let clips = Clips::new(&data.test);
        let a = clips.of(3, 7, &mut Rng::new(9));
        let b = clips.of(3, 7, &mut Rng::new(9));
        assert_eq!(a, b);
        assert_eq!(a.digits, [3, 7]);
        assert_ne!(a, clips.of(3, 7, &mut Rng::new(10)));
        assert_eq!(pairs().len(), 55);
    }
}
