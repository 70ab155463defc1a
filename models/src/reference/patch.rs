//! Patchify and unpatchify, as diffusers' DiT does them.
//!
//! Images are `[B, C, H, W]`, flat in NCHW order. With patch size `p` the grid is `h = H/p` by
//! `w = W/p`, `N = h·w` tokens per image, numbered row-major over the grid (`n = gh·w + gw`), and
//! the token rows are batch-major (`row = b·N + n`).
//!
//! - `patchify` → `[B·N, C·p·p]`, the patch vector ordered `(c, i, j)`: index `c·p·p + i·p + j`
//!   for pixel `(gh·p + i, gw·p + j)` of channel `c`. That is the order in which a PyTorch
//!   `Conv2d(C, D, kernel p, stride p)` weight `[D, C, p, p]` flattens, so the patch-embedding
//!   convolution equals patchify followed by a Linear with `W[(c, i, j), d] = conv_w[d, c, i, j]`
//!   ([`conv_weight_as_linear`]).
//! - `unpatchify` reads `[B·N, p·p·C]` the way diffusers' output head writes it, ordered
//!   `(i, j, c)`: index `(i·p + j)·C + c`. diffusers reshapes to `(B, h, w, p, p, C)` and permutes
//!   `nhwpqc → nchpwq`. It is NOT the inverse of `patchify` unless `C = 1`, where both orders are
//!   `i·p + j`.
//!
//! Both are permutations: each output element is one input element, moved. A permutation matrix
//! `P` is orthogonal, `Pᵀ = P⁻¹`, so the backward pass (`dx = Pᵀ·dy`) is the inverse move: each
//! gradient element goes back to where its value came from. No arithmetic is done either way, so
//! forward, backward and round trips are exact to the bit.

use super::Mat;

/// Shape bookkeeping shared by the four functions: `(N, h, w)`, after checking divisibility.
fn grid(height: usize, width: usize, p: usize) -> (usize, usize, usize) {
    assert!(
        p > 0 && height.is_multiple_of(p) && width.is_multiple_of(p),
        "patch: {p} does not divide the image {height}x{width}"
    );
    let (h, w) = (height / p, width / p);
    (h * w, h, w)
}

/// Visits every pixel once with its flat NCHW index, its token row and its `(c, i, j)` and
/// `(i, j, c)` positions inside the token: `f(pixel, row, cij, ijc)`.
fn each_pixel(
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    p: usize,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let (n, _, w) = grid(height, width, p);
    for b in 0..batch {
        for c in 0..channels {
            for y in 0..height {
                for x in 0..width {
                    let (gh, i, gw, j) = (y / p, y % p, x / p, x % p);
                    let pixel = ((b * channels + c) * height + y) * width + x;
                    let row = b * n + gh * w + gw;
                    f(
                        pixel,
                        row,
                        c * p * p + i * p + j,
                        (i * p + j) * channels + c,
                    );
                }
            }
        }
    }
}

/// `x [B, C, H, W]` (flat NCHW) → tokens `[B·N, C·p·p]`, patch vectors ordered `(c, i, j)`.
pub fn patchify(
    x: &[f64],
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    p: usize,
) -> Mat {
    assert_eq!(x.len(), batch * channels * height * width, "patchify: x");
    let (n, _, _) = grid(height, width, p);
    let mut out = Mat::zeros(batch * n, channels * p * p);
    each_pixel(batch, channels, height, width, p, |px, row, cij, _| {
        *out.at_mut(row, cij) = x[px];
    });
    out
}

/// The transpose (= inverse) of [`patchify`]: `dy [B·N, C·p·p]` → `dx [B, C, H, W]`.
pub fn patchify_backward(
    dy: &Mat,
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    p: usize,
) -> Vec<f64> {
    let (n, _, _) = grid(height, width, p);
    assert_eq!(
        (dy.rows, dy.cols),
        (batch * n, channels * p * p),
        "patchify_backward: dy"
    );
    let mut dx = vec![0.0; batch * channels * height * width];
    each_pixel(batch, channels, height, width, p, |px, row, cij, _| {
        dx[px] = dy.at(row, cij);
    });
    dx
}

/// Tokens `[B·N, p·p·C]`, each ordered `(i, j, c)` as diffusers' head emits them → image
/// `[B, C, H, W]` (flat NCHW).
pub fn unpatchify(
    tokens: &Mat,
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    p: usize,
) -> Vec<f64> {
    let (n, _, _) = grid(height, width, p);
    assert_eq!(
        (tokens.rows, tokens.cols),
        (batch * n, p * p * channels),
        "unpatchify: tokens"
    );
    let mut out = vec![0.0; batch * channels * height * width];
    each_pixel(batch, channels, height, width, p, |px, row, _, ijc| {
        out[px] = tokens.at(row, ijc);
    });
    out
}

/// The transpose (= inverse) of [`unpatchify`]: `dy [B, C, H, W]` → `dtokens [B·N, p·p·C]`.
pub fn unpatchify_backward(
    dy: &[f64],
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    p: usize,
) -> Mat {
    assert_eq!(
        dy.len(),
        batch * channels * height * width,
        "unpatchify_backward: dy"
    );
    let (n, _, _) = grid(height, width, p);
    let mut out = Mat::zeros(batch * n, p * p * channels);
    each_pixel(batch, channels, height, width, p, |px, row, _, ijc| {
        *out.at_mut(row, ijc) = dy[px];
    });
    out
}

/// A PyTorch `Conv2d` weight `[D, C, p, p]` (flat) as the Linear weight `[C·p·p, D]` that acts on
/// [`patchify`]'s tokens: `W[(c, i, j), d] = conv_w[d, c, i, j]`, i.e. the conv weight viewed as
/// `[D, C·p·p]` and transposed.
pub fn conv_weight_as_linear(
    conv_w: &[f64],
    out_channels: usize,
    channels: usize,
    p: usize,
) -> Mat {
    let k = channels * p * p;
    assert_eq!(conv_w.len(), out_channels * k, "conv_weight_as_linear");
    Mat::new(out_channels, k, conv_w.to_vec()).transpose()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::linear;
    use super::*;
    use crate::testing::{randn, worst_rel};

    const B: usize = 2;
    const H: usize = 4;
    const W: usize = 4;
    const P: usize = 2;

    /// Values on a grid of 2⁻¹⁰ with |v| < 2¹⁴: every product is a multiple of 2⁻²⁰ below 2²⁸
    /// and any sum of a few hundred of them is exact in f64's 53 bits, so inner products computed
    /// in different orders agree to the bit, and a test can ask for equality, not closeness.
    fn dyadic(seed: u64, n: usize) -> Vec<f64> {
        randn(seed, n, 3.0)
            .iter()
            .map(|v| (v * 1024.0).round() / 1024.0)
            .collect()
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// diffusers' unpatchify written literally: `tokens.reshape(B, h, w, p, q, C)`, the einsum
    /// `nhwpqc → nchpwq`, and `reshape(B, C, h·p, w·q)`, with each step's indices spelled out.
    pub(crate) fn diffusers_unpatchify(
        tokens: &Mat,
        batch: usize,
        channels: usize,
        height: usize,
        width: usize,
        p: usize,
    ) -> Vec<f64> {
        let (h, w) = (height / p, width / p);
        let src = |n: usize, gh: usize, gw: usize, i: usize, j: usize, c: usize| {
            ((((n * h + gh) * w + gw) * p + i) * p + j) * channels + c
        };
        let mut out = vec![0.0; batch * channels * height * width];
        for n in 0..batch {
            for c in 0..channels {
                for gh in 0..h {
                    for i in 0..p {
                        for gw in 0..w {
                            for j in 0..p {
                                let dst =
                                    ((((n * channels + c) * h + gh) * p + i) * w + gw) * p + j;
                                out[dst] = tokens.data[src(n, gh, gw, i, j, c)];
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// How many pixels an `unpatchify` puts somewhere other than diffusers does, and the worst
    /// relative difference, for C = 2 (where the `(c, i, j)` and `(i, j, c)` orders differ).
    pub(crate) fn misplaced(
        unpatchify: impl Fn(&Mat, usize, usize, usize, usize, usize) -> Vec<f64>,
    ) -> (usize, f64) {
        let c = 2;
        let n = (H / P) * (W / P);
        let tokens = Mat::new(B * n, P * P * c, randn(211, B * n * P * P * c, 3.0));
        let got = unpatchify(&tokens, B, c, H, W, P);
        let want = diffusers_unpatchify(&tokens, B, c, H, W, P);
        let count = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        (count, worst_rel(&got, &want))
    }

    #[test]
    fn unpatchify_is_diffusers_einsum_exactly() {
        let (count, worst) = misplaced(unpatchify);
        println!("unpatchify vs diffusers' nhwpqc->nchpwq: {count} misplaced, worst {worst:.1e}");
        assert_eq!(count, 0);
    }

    #[test]
    fn patchify_vector_order_is_c_i_j() {
        // Pixel values that spell their own (b, c, y, x), so the layout can be read off directly.
        let c = 2;
        let x: Vec<f64> = (0..B * c * H * W).map(|v| v as f64).collect();
        let t = patchify(&x, B, c, H, W, P);
        // Token 1 of image 1 is grid cell (0, 1): pixels y ∈ 0..2, x ∈ 2..4.
        let row = 4 + 1;
        let px =
            |b: usize, ch: usize, y: usize, xx: usize| (((b * c + ch) * H + y) * W + xx) as f64;
        for ch in 0..c {
            for i in 0..P {
                for j in 0..P {
                    assert_eq!(t.at(row, ch * P * P + i * P + j), px(1, ch, i, 2 + j));
                }
            }
        }
    }

    #[test]
    fn round_trips_are_exact() {
        for c in [1, 2] {
            let x = randn(212, B * c * H * W, 3.0);
            let t = patchify(&x, B, c, H, W, P);
            // A permutation's transpose is its inverse.
            assert_eq!(patchify_backward(&t, B, c, H, W, P), x);
            let img = unpatchify(&t, B, c, H, W, P);
            assert_eq!(unpatchify_backward(&img, B, c, H, W, P), t);
            if c == 1 {
                // One channel: (c, i, j) and (i, j, c) are both i·p + j.
                assert_eq!(img, x, "C = 1: unpatchify inverts patchify");
            } else {
                // Two channels: the orders differ, and so does the round trip.
                assert_ne!(img, x, "C = 2: unpatchify is not patchify's inverse");
            }
        }
    }

    #[test]
    fn backward_is_the_transpose_of_forward() {
        // <P x, y> = <x, Pᵀ y>, exactly: the dyadic values make every sum exact.
        for c in [1, 2] {
            let n = (H / P) * (W / P);
            let x = dyadic(213, B * c * H * W);
            let y = Mat::new(B * n, c * P * P, dyadic(214, B * n * c * P * P));
            let lhs = dot(&patchify(&x, B, c, H, W, P).data, &y.data);
            let rhs = dot(&x, &patchify_backward(&y, B, c, H, W, P));
            println!("patchify C={c}: <Px, y> = {lhs}, <x, Pᵀy> = {rhs}");
            assert_eq!(lhs, rhs);
            let img = dyadic(215, B * c * H * W);
            let lhs = dot(&unpatchify(&y, B, c, H, W, P), &img);
            let rhs = dot(&y.data, &unpatchify_backward(&img, B, c, H, W, P).data);
            println!("unpatchify C={c}: <Uy, x> = {lhs}, <y, Uᵀx> = {rhs}");
            assert_eq!(lhs, rhs);
        }
    }

    #[test]
    fn conv_equals_patchify_then_linear() {
        let (c, d) = (2, 3);
        let (h, w) = (H / P, W / P);
        let x = randn(216, B * c * H * W, 3.0);
        let conv_w = randn(217, d * c * P * P, 0.5);
        let bias = randn(218, d, 0.5);
        // Conv2d(C, D, kernel P, stride P), written out: out[b, o, gh, gw].
        let mut conv = vec![0.0; B * d * h * w];
        for b in 0..B {
            for o in 0..d {
                for gh in 0..h {
                    for gw in 0..w {
                        let mut acc = 0.0;
                        for ch in 0..c {
                            for i in 0..P {
                                for j in 0..P {
                                    let px = ((b * c + ch) * H + gh * P + i) * W + gw * P + j;
                                    let wi = ((o * c + ch) * P + i) * P + j;
                                    acc += x[px] * conv_w[wi];
                                }
                            }
                        }
                        conv[((b * d + o) * h + gh) * w + gw] = acc + bias[o];
                    }
                }
            }
        }
        let tokens = patchify(&x, B, c, H, W, P);
        let y = linear::forward(&tokens, &conv_weight_as_linear(&conv_w, d, c, P), &bias);
        // Token (b, gh, gw), channel o, is the conv's out[b, o, gh, gw]. Both sum the same
        // products in the same (c, i, j) order and add the bias last, so they agree to the bit.
        for b in 0..B {
            for o in 0..d {
                for gh in 0..h {
                    for gw in 0..w {
                        let want = conv[((b * d + o) * h + gh) * w + gw];
                        assert_eq!(y.at(b * h * w + gh * w + gw, o), want);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, randn, tensor, to_vec};

    #[test]
    fn patchify_and_unpatchify_match_burn_and_their_gradients() {
        let (b, c, h, w, p) = (2, 2, 4, 6, 2);
        let x = randn(401, b * c * h * w, 3.0);
        let xt = tensor::<AB, 4>(x.clone(), [b, c, h, w]).require_grad();
        let y = crate::patch_embed::patchify(xt.clone(), p);
        let want = patchify(&x, b, c, h, w, p);
        // Permutations: nothing to round, so nothing may differ.
        assert_close("patchify", &to_vec(y.clone()), &want.data, 0.0);
        let dy = randn(402, want.data.len(), 1.0);
        let grads = (y * tensor::<AB, 3>(dy.clone(), [b, want.rows / b, want.cols]))
            .sum()
            .backward();
        let dy_mat = Mat::new(want.rows, want.cols, dy);
        assert_close(
            "patchify dx",
            &to_vec(xt.grad(&grads).unwrap()),
            &patchify_backward(&dy_mat, b, c, h, w, p),
            0.0,
        );

        let n = (h / p) * (w / p);
        let tokens = randn(403, b * n * p * p * c, 3.0);
        let tt = tensor::<AB, 3>(tokens.clone(), [b, n, p * p * c]).require_grad();
        let img = crate::patch_embed::unpatchify(tt.clone(), p, c, h, w);
        let want = unpatchify(&Mat::new(b * n, p * p * c, tokens), b, c, h, w, p);
        assert_close("unpatchify", &to_vec(img.clone()), &want, 0.0);
        let dimg = randn(404, want.len(), 1.0);
        let grads = (img * tensor::<AB, 4>(dimg.clone(), [b, c, h, w]))
            .sum()
            .backward();
        assert_close(
            "unpatchify dx",
            &to_vec(tt.grad(&grads).unwrap()),
            &unpatchify_backward(&dimg, b, c, h, w, p).data,
            0.0,
        );
    }
}
