//! Patches instead of tokens: cut an image into `p × p` squares, embed each with one linear map,
//! and add a fixed 2-D sine-cosine position embedding.
//!
//! The linear map is diffusers' `pos_embed.proj`, a `Conv2d(C, D, kernel p, stride p)`: on
//! non-overlapping patches a convolution *is* a linear map of the flattened patch, with the patch
//! read in the conv weight's order `(c, i, j)`. The checkpoint contract reshapes between the two.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;

/// The input side of a patch embedding: channels and patch size, what the conv kernel's shape needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchShape {
    pub channels: usize,
    pub patch: usize,
}

/// Shapes: `x [B, C, H, W]` → `[B, N, C·p·p]`, patches row-major over the `(H/p) × (W/p)` grid,
/// each patch's values in the order `(c, i, j)`.
pub fn patchify<B: Backend>(x: Tensor<B, 4>, p: usize) -> Tensor<B, 3> {
    let [b, c, h, w] = x.dims();
    let (gh, gw) = (h / p, w / p);
    x.reshape([b, c, gh, p, gw, p])
        .permute([0, 2, 4, 1, 3, 5]) // [B, gh, gw, C, p, p]
        .reshape([b, gh * gw, c * p * p])
}

/// The output head's layout back to an image (diffusers' unpatchify): each token's values are in
/// the order `(i, j, c)`, reshaped `(B, gh, gw, p, p, C)` and permuted `nhwpqc → nchpwq`.
///
/// Shapes: `[B, N, p·p·C]` → `[B, C, H, W]`.
pub fn unpatchify<B: Backend>(
    x: Tensor<B, 3>,
    p: usize,
    c: usize,
    h: usize,
    w: usize,
) -> Tensor<B, 4> {
    let b = x.dims()[0];
    let (gh, gw) = (h / p, w / p);
    x.reshape([b, gh, gw, p, p, c])
        .permute([0, 5, 1, 3, 2, 4]) // [B, C, gh, p, gw, p]
        .reshape([b, c, h, w])
}

/// diffusers' `get_2d_sincos_pos_embed` for a `gh × gw` grid (base size `gh`, interpolation 1):
/// token `(row, col)` gets `[sincos(col), sincos(row)]`, each half `D/2` wide (see
/// [`sincos_1d`]). (The first half is the column because numpy's meshgrid puts `x` first.)
pub fn sincos_2d(d: usize, gh: usize, gw: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(gh * gw * d);
    for row in 0..gh {
        for col in 0..gw {
            for pos in [col, row] {
                out.extend(sincos_1d(d / 2, pos));
            }
        }
    }
    out
}

/// The 1-D sine-cosine embedding of position `pos` in `width` channels (MAE's and diffusers'
/// `get_1d_sincos_pos_embed_from_grid`): `[sin(pos·ω_k)…, cos(pos·ω_k)…]`, `k = 0..width/2`,
/// `ω_k = 10000^(−2k/width)`. The video model's frame wave is this with `width = D`.
pub fn sincos_1d(width: usize, pos: usize) -> Vec<f64> {
    let half = width / 2;
    let omega: Vec<f64> = (0..half)
        .map(|k| 1.0 / 10_000f64.powf(k as f64 / half as f64))
        .collect();
    let pos = pos as f64;
    omega
        .iter()
        .map(|w| (pos * w).sin())
        .chain(omega.iter().map(|w| (pos * w).cos()))
        .collect()
}

#[derive(Config, Debug)]
pub struct PatchEmbedConfig {
    pub channels: usize,
    pub patch: usize,
    pub d_model: usize,
}

impl PatchEmbedConfig {
    /// Xavier-uniform on the flattened conv kernel, as DiT initialises it; zero bias.
    pub fn init<B: Backend>(&self, device: &B::Device) -> PatchEmbed<B> {
        let mut proj: Linear<B> =
            LinearConfig::new(self.channels * self.patch * self.patch, self.d_model)
                .with_initializer(Initializer::XavierUniform { gain: 1.0 })
                .init(device);
        crate::zero_bias(&mut proj);
        PatchEmbed {
            proj,
            patch: self.patch,
        }
    }
}

#[derive(Module, Debug)]
pub struct PatchEmbed<B: Backend> {
    /// `[C·p·p, D]`; diffusers stores it as a conv kernel `[D, C, p, p]`.
    pub proj: Linear<B>,
    pub patch: usize,
}

impl<B: Backend> PatchEmbed<B> {
    /// Shapes: `x [B, C, H, W]` → `[B, N, D]`, position embedding added.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 3> {
        let [_, _, h, w] = x.dims();
        let device = x.device();
        let tokens = crate::fused::linear(&self.proj, patchify(x, self.patch));
        let [_, n, d] = tokens.dims();
        let pos = sincos_2d(d, h / self.patch, w / self.patch);
        tokens
            + Tensor::<B, 2>::from_data(
                TensorData::new(pos, [n, d]).convert::<B::FloatElem>(),
                &device,
            )
            .unsqueeze::<3>()
    }
}
