//! What a training step reports when its loss is all there is to report (language models,
//! flow matching): the mean loss and how many predictions it averages.

use burn::prelude::*;
use burn::train::ItemLazy;
use burn::train::metric::{Adaptor, LossInput};

#[derive(Clone, Debug)]
pub struct LossOutput<B: Backend> {
    /// `[1]`, the batch's mean loss.
    pub loss: Tensor<B, 1>,
    /// Predictions the mean is over (tokens, or pixels), so batches of different sizes can be
    /// averaged correctly.
    pub count: usize,
}

impl<B: Backend> ItemLazy for LossOutput<B> {
    type ItemSync = LossOutput<B>;

    fn sync(self) -> Self {
        self
    }
}

impl<B: Backend> Adaptor<LossInput<B>> for LossOutput<B> {
    fn adapt(&self) -> LossInput<B> {
        LossInput::new(self.loss.clone())
    }
}
