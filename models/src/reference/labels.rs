//! Conditioning on two labels per sample, and the frame-index sinusoid.
//!
//! **Summed label embedding.** Sample `s` carries two labels `(a_s, b_s)`, both looked up in one
//! table `[V, D]` and added: `y_s = T[a_s] + T[b_s]`. The sum is symmetric, so "3 and 7" is the
//! same conditioning as "7 and 3" (to the bit: f64 addition commutes). The backward pass is two
//! embedding backward passes into the same table: `dy_s` is added into row `a_s` and into row
//! `b_s`; when `a_s == b_s` the row was used twice and receives `2·dy_s`, which is why the
//! pass adds and never assigns.
//!
//! **Frame embedding.** A fixed function of the frame index `f`, the 1-D sin-cos position
//! embedding of MAE and Latte (`get_1d_sincos_pos_embed_from_grid`): for `D` channels and
//! `k = 0..D/2`, `ω_k = 1/10000^(2k/D)`, and `[sin(f·ω), cos(f·ω)]` — sin half first, then cos
//! (the opposite of the timestep sinusoid's cos-first, and with `D/2`, not `D/2 − 1`, in the
//! exponent's denominator). It has no parameters and `f` is an integer, so there is no backward.

use super::Mat;

/// `table [V, D]`, labels `a [S]`, `b [S]` → `[S, D]`, row `s` = `T[a_s] + T[b_s]`.
pub fn forward(table: &Mat, a: &[usize], b: &[usize]) -> Mat {
    assert_eq!(a.len(), b.len(), "labels: two labels per sample");
    let d = table.cols;
    let mut out = Mat::zeros(a.len(), d);
    for (s, (&la, &lb)) in a.iter().zip(b).enumerate() {
        assert!(
            la < table.rows && lb < table.rows,
            "labels: ({la}, {lb}) outside a table of {}",
            table.rows
        );
        for j in 0..d {
            *out.at_mut(s, j) = table.at(la, j) + table.at(lb, j);
        }
    }
    out
}

/// Given `dy [S, D]`, the gradient of the table `[vocab, D]`.
pub fn backward(a: &[usize], b: &[usize], dy: &Mat, vocab: usize) -> Mat {
    assert_eq!(a.len(), dy.rows, "labels: one upstream row per sample");
    let d = dy.cols;
    let mut dt = Mat::zeros(vocab, d);
    for (s, (&la, &lb)) in a.iter().zip(b).enumerate() {
        // Two adds, one per use; into the same row twice when la == lb.
        for label in [la, lb] {
            for j in 0..d {
                *dt.at_mut(label, j) += dy.at(s, j);
            }
        }
    }
    dt
}

/// The 1-D sin-cos embedding of frame indices `0..frames`, `[frames, d]`: row `f` is
/// `[sin(f·ω_k), cos(f·ω_k)]`, `ω_k = 10000^(−2k/d)`, `k = 0..d/2`.
pub fn frame_embedding(frames: usize, d: usize) -> Mat {
    assert!(
        d >= 2 && d.is_multiple_of(2),
        "frame_embedding: need an even width"
    );
    let half = d / 2;
    let mut out = Mat::zeros(frames, d);
    for f in 0..frames {
        for k in 0..half {
            let omega = 1.0 / 10000f64.powf(2.0 * k as f64 / d as f64);
            let arg = f as f64 * omega;
            *out.at_mut(f, k) = arg.sin();
            *out.at_mut(f, half + k) = arg.cos();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const V: usize = 10;
    const D: usize = 8;

    #[test]
    fn three_and_seven_is_seven_and_three() {
        let t = Mat::new(V, D, randn(331, V * D, 3.0));
        assert_eq!(forward(&t, &[3], &[7]), forward(&t, &[7], &[3]));
    }

    #[test]
    fn labels_backward_matches_numerical() {
        // Sample 1 uses label 4 twice; label 2 appears in three samples; 0 and 9 never.
        let (a, b) = ([3, 4, 2, 2], [7, 4, 5, 1]);
        let t = Mat::new(V, D, randn(332, V * D, 3.0));
        let dy = Mat::new(a.len(), D, randn(333, a.len() * D, 1.0));
        let n = numerical_grad(&t.data, 1e-3, |v| {
            let y = forward(&Mat::new(V, D, v.to_vec()), &a, &b);
            y.data.iter().zip(&dy.data).map(|(p, q)| p * q).sum()
        });
        let g = backward(&a, &b, &dy, V);
        // L is linear in the table: the centred difference is exact but for rounding.
        let r = worst_rel(&g.data, &n);
        println!("labels dtable: worst relative difference {r:.2e}");
        assert_close("labels dtable", &g.data, &n, 1e-9);
        // The a == b sample's row got exactly twice its blame (nothing else used label 4).
        for j in 0..D {
            assert_eq!(g.at(4, j), 2.0 * dy.at(1, j));
        }
        assert!(g.row(0).iter().chain(g.row(9)).all(|&v| v == 0.0));
    }

    #[test]
    fn frame_embedding_values() {
        let e = frame_embedding(4, D);
        // Frame 0: sin 0 = 0, cos 0 = 1.
        assert_eq!(e.row(0), &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        // k = 0 has ω = 1: frame 3 is sin 3, cos 3; k = 1 has ω = 10000^(−1/4) = 0.1.
        assert_eq!(e.at(3, 0), 3f64.sin());
        assert_eq!(e.at(3, 4), 3f64.cos());
        assert!((e.at(3, 1) - 0.3f64.sin()).abs() < 1e-15);
        // Every (sin, cos) pair lies on the unit circle.
        for f in 0..4 {
            for k in 0..D / 2 {
                let (s, c) = (e.at(f, k), e.at(f, D / 2 + k));
                assert!((s * s + c * c - 1.0).abs() < 1e-15);
            }
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::label_embed::LabelEmbeddingConfig;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};
    use burn::prelude::*;

    #[test]
    fn summed_labels_match_burn_autodiff() {
        let (classes, d) = (10, 6);
        let table = Mat::new(
            classes + 1,
            d,
            f32_exact(randn(501, (classes + 1) * d, 2.0)),
        );
        let (a, b) = ([3usize, 7, 2], [7usize, 3, 2]);
        let m = load(
            LabelEmbeddingConfig::new(classes, d).init::<AB>(&Default::default()),
            &[("embedding_table.weight", &[classes + 1, d], &table.data)],
        );
        let ids: Vec<i64> = a
            .iter()
            .zip(&b)
            .flat_map(|(x, y)| [*x as i64, *y as i64])
            .collect();
        let y = m.forward(Tensor::<AB, 2, Int>::from_data(
            TensorData::new(ids, [3, 2]),
            &Default::default(),
        ));
        let want = forward(&table, &a, &b);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-15);
        let dy = Mat::new(3, d, randn(502, 3 * d, 1.0));
        let grads = (y * tensor::<AB, 2>(dy.data.clone(), [3, d]))
            .sum()
            .backward();
        assert_close(
            "table",
            &grads_by_path(&m, &grads)["embedding_table.weight"],
            &backward(&a, &b, &dy, classes + 1).data,
            1e-15,
        );
    }
}
