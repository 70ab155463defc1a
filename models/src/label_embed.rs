//! Class labels as vectors, with one extra row meaning "no label": the model learns to draw with and
//! without being told what, which classifier-free guidance needs at sampling time.
//!
//! Several labels per sample (the video model's two digits) are looked up and added, so "3 and 7"
//! and "7 and 3" are the same request.

use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::prelude::*;

#[derive(Config, Debug)]
pub struct LabelEmbeddingConfig {
    /// Real classes; the table has one more row, index `classes`, for "no label".
    pub classes: usize,
    pub d_model: usize,
}

impl LabelEmbeddingConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> LabelEmbedding<B> {
        LabelEmbedding {
            embedding_table: EmbeddingConfig::new(self.classes + 1, self.d_model)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device),
        }
    }
}

/// diffusers' `LabelEmbedding` (`embedding_table [classes + 1, D]`).
#[derive(Module, Debug)]
pub struct LabelEmbedding<B: Backend> {
    pub embedding_table: Embedding<B>,
}

impl<B: Backend> LabelEmbedding<B> {
    /// Shapes: `labels [B, L]` → `[B, D]`, the sum of the `L` labels' rows.
    pub fn forward(&self, labels: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        self.embedding_table
            .forward(labels)
            .sum_dim(1)
            .squeeze_dim::<2>(1)
    }
}
