//! The frame wave: the video model's third position embedding. Every frame's patches already
//! carry the 2-D sine-cosine wave of where they are in the frame ([`crate::patch_embed`]); this
//! adds a 1-D wave of which frame they are in, full width, as Latte does. It has no parameters, so
//! its backward pass is the identity: the gradient reaches the tokens unchanged.

use crate::patch_embed::sincos_1d;
use burn::prelude::*;

/// The wave for frames `0..frames`, `[frames, d]` row after row.
pub fn frame_wave(d: usize, frames: usize) -> Vec<f64> {
    (0..frames).flat_map(|f| sincos_1d(d, f)).collect()
}

/// Adds each frame's wave to its tokens. Shapes: `tokens [B, F, N, D]` → `[B, F, N, D]`.
pub fn add_frame_wave<B: Backend>(tokens: Tensor<B, 4>) -> Tensor<B, 4> {
    let [_, f, _, d] = tokens.dims();
    let wave = Tensor::<B, 2>::from_data(
        TensorData::new(frame_wave(d, f), [f, d]).convert::<B::FloatElem>(),
        &tokens.device(),
    )
    .reshape([1, f, 1, d]);
    tokens + wave
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::labels::frame_embedding;
    use crate::testing::{AB, TB, tensor, to_vec};

    #[test]
    fn the_wave_is_the_reference_frame_embedding_to_the_bit() {
        let (f, d) = (8, 16);
        assert_eq!(frame_wave(d, f), frame_embedding(f, d).data);
    }

    #[test]
    fn each_frame_gets_its_own_row_and_the_gradient_passes_unchanged() {
        let (b, f, n, d) = (2, 3, 4, 6);
        let x: Vec<f64> = (0..b * f * n * d)
            .map(|i| (i as f64 * 0.37).sin() * 3.0)
            .collect();
        let out = to_vec(add_frame_wave(tensor::<TB, 4>(x.clone(), [b, f, n, d])));
        let wave = frame_wave(d, f);
        for (i, (o, xi)) in out.iter().zip(&x).enumerate() {
            let frame = (i / (n * d)) % f;
            assert_eq!(*o, xi + wave[frame * d + i % d], "element {i}");
        }
        let xt = tensor::<AB, 4>(x, [b, f, n, d]).require_grad();
        let dout: Vec<f64> = (0..b * f * n * d).map(|i| (i as f64 * 1.3).cos()).collect();
        let loss = (add_frame_wave(xt.clone()) * tensor::<AB, 4>(dout.clone(), [b, f, n, d])).sum();
        let grads = loss.backward();
        assert_eq!(to_vec(xt.grad(&grads).expect("grad")), dout);
    }
}
