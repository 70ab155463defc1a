//! What a training step reports when its loss is all there is to report (language models,
//! flow matching): the mean loss and how many predictions it averages.

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{Adaptor, LossInput};
use burn::train::{ItemLazy, TrainOutput, TrainStep};

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

/// A model's training objective apart from the step that differentiates it: the loss a training
/// step takes the gradient of, and what the step reports. Every model's [`TrainStep`] is
/// [`train_step`] of its objective. The split lets data-parallel training (the training crate's
/// `shard`) finish every part's forward pass before any part starts its backward pass: Burn
/// 0.21's autodiff, at the end of each backward pass, sweeps every graph in the process for
/// unused nodes, and a sweep that meets another thread's graph while it is being built can free
/// a step of it and lose part of a gradient (burn#5573).
pub trait Objective<B: AutodiffBackend>: TrainStep + AutodiffModule<B> {
    /// The training loss (`[1]`) of `batch`, and what the step reports for it.
    fn objective(&self, batch: Self::Input) -> (Tensor<B, 1>, Self::Output);
}

/// A training step: the objective's loss, differentiated, with the gradients by parameter.
pub fn train_step<B: AutodiffBackend, M: Objective<B>>(
    model: &M,
    batch: M::Input,
) -> TrainOutput<M::Output> {
    let (loss, output) = model.objective(batch);
    TrainOutput::new(model, loss.backward(), output)
}
