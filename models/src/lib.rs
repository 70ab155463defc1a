//! Burn modules generic over the backend, one layer a file, with their checkpoint layouts; and
//! under [`reference`], the hand-derived f64 twins that hold Burn's autodiff to account.
//!
//! Dimension names used in shape comments throughout: `B` batch, `T` sequence length, `C` model
//! width, `V` vocabulary, `H` heads, `N` patches, `F` frames.

pub mod ada_norm;
pub mod attention;
pub mod block;
pub mod decode;
pub mod diffusers;
pub mod dit;
pub mod dit_attention;
pub mod dit_block;
pub mod dit_trunk;
pub mod feed_forward;
pub mod flow;
pub mod frame_embed;
pub mod fused;
pub mod gelu;
pub mod gpt;
pub mod gpt2;
pub mod label_embed;
pub mod mlp;
pub mod modulate;
pub mod named;
pub mod native;
pub mod norm;
pub mod output;
pub mod patch_embed;
pub mod qwen2;
pub mod reference;
pub mod regroup;
pub mod rope;
pub mod silu;
pub mod softcap;
pub mod timestep;
pub mod video_dit;
pub mod video_pipeline;

#[cfg(test)]
pub(crate) mod testing;

pub mod checkpoint;
pub mod compare;

use burn::prelude::*;
use checkpoint::NamedTensor;

/// Copies a tensor's values out as f32 under `name`.
pub fn tensor_to_named<B: Backend, const D: usize>(name: &str, t: Tensor<B, D>) -> NamedTensor {
    let shape = t.dims().to_vec();
    let data: Vec<f32> = t.into_data().iter::<f32>().collect();
    NamedTensor::new(name, shape, data)
}

/// Builds a tensor on `device` from a named array (cast to the backend's float type).
pub fn named_to_tensor<B: Backend, const D: usize>(
    t: NamedTensor,
    device: &B::Device,
) -> Tensor<B, D> {
    assert_eq!(
        t.shape.len(),
        D,
        "tensor {} has rank {}, expected {D}",
        t.name,
        t.shape.len()
    );
    Tensor::from_data(
        TensorData::new(t.data, t.shape).convert::<B::FloatElem>(),
        device,
    )
}

/// A linear layer on tokens taken as rows: `[B, T, C]` → `[B·T, C]` → `[B, T, O]`. Each weight's
/// gradient is then one matrix product, where Burn's `Linear` on `[B, T, C]` makes `B` small ones
/// (and a `[B, C, O]` scratch buffer) and sums them.
pub fn linear_rows<B: Backend>(layer: &burn::nn::Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    crate::fused::linear(layer, x)
}

/// Sets a linear layer's bias to zeros, as a trainable parameter (GPT-2 and DiT start their biases
/// at zero). A bias made with `zeros_like` would lose its gradient tracking and never train.
pub fn zero_bias<B: Backend>(layer: &mut burn::nn::Linear<B>) {
    if let Some(b) = &layer.bias {
        let shape = b.dims();
        let device = b.device();
        layer.bias = Some(burn::module::Param::from_tensor(Tensor::zeros(
            shape, &device,
        )));
    }
}
