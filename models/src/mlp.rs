//! The MNIST network: 784 → hidden → 10, ReLU between, softmax cross-entropy on top.
//!
//! Saved as `model.safetensors` in PyTorch's `nn.Linear` layout (`fc1.weight [hidden, 784]`,
//! `fc1.bias`, `fc2.weight [10, hidden]`, `fc2.bias`) beside `config.json`, so that
//! `torch.nn.Sequential(Linear, ReLU, Linear)` loads it after a rename; Burn keeps `[in, out]` in
//! memory, and the transpose happens here, once.

use crate::checkpoint::{CheckpointError, TensorFile, read_json, write_json, write_safetensors};
use crate::fused::linear;
use crate::output::{Objective, train_step};
use burn::module::Param;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};
use std::path::Path;

/// Shape of the MLP. The defaults are the reference crate's MNIST network.
#[derive(Config, Debug, PartialEq)]
pub struct MlpConfig {
    /// Input features (784 pixels).
    #[config(default = 784)]
    pub input: usize,
    /// Hidden units.
    #[config(default = 128)]
    pub hidden: usize,
    /// Output classes.
    #[config(default = 10)]
    pub classes: usize,
}

impl MlpConfig {
    /// Initialises with Burn's default for `Linear` (uniform in ±1/√fan_in, PyTorch's default).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        Mlp {
            fc1: LinearConfig::new(self.input, self.hidden).init(device),
            act: Relu::new(),
            fc2: LinearConfig::new(self.hidden, self.classes).init(device),
        }
    }
}

/// Two linear layers with a ReLU between.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub fc1: Linear<B>,
    pub act: Relu,
    pub fc2: Linear<B>,
}

/// A batch of flattened images and their classes.
#[derive(Clone, Debug)]
pub struct ClassBatch<B: Backend> {
    /// `[B, input]`, pixels scaled to 0..1.
    pub inputs: Tensor<B, 2>,
    /// `[B]`, class indices.
    pub targets: Tensor<B, 1, Int>,
}

impl<B: Backend> Mlp<B> {
    /// Shapes: `x [B, input]` → logits `[B, classes]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        linear(&self.fc2, self.act.forward(linear(&self.fc1, x)))
    }

    /// Logits and the mean cross-entropy of a batch.
    pub fn classify(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        let logits = self.forward(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }

    /// The configuration that rebuilds this model.
    pub fn config(&self) -> MlpConfig {
        let [input, hidden] = self.fc1.weight.dims();
        let [_, classes] = self.fc2.weight.dims();
        MlpConfig::new()
            .with_input(input)
            .with_hidden(hidden)
            .with_classes(classes)
    }

    /// Writes `config.json` and `model.safetensors` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), CheckpointError> {
        let tensors = vec![
            crate::tensor_to_named("fc1.weight", self.fc1.weight.val()).transposed(),
            crate::tensor_to_named("fc1.bias", self.fc1.bias.as_ref().expect("bias").val()),
            crate::tensor_to_named("fc2.weight", self.fc2.weight.val()).transposed(),
            crate::tensor_to_named("fc2.bias", self.fc2.bias.as_ref().expect("bias").val()),
        ];
        write_safetensors(&dir.join("model.safetensors"), &tensors, None)?;
        write_json(&dir.join("config.json"), &self.config())
    }

    /// Reads a directory written by [`Mlp::save`].
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, CheckpointError> {
        let config: MlpConfig = read_json(&dir.join("config.json"))?;
        let mut file = TensorFile::read(&dir.join("model.safetensors"))?;
        let (i, h, c) = (config.input, config.hidden, config.classes);
        let w1 = file.take("fc1.weight", &[h, i])?.transposed();
        let b1 = file.take("fc1.bias", &[h])?;
        let w2 = file.take("fc2.weight", &[c, h])?.transposed();
        let b2 = file.take("fc2.bias", &[c])?;
        file.finish()?;
        let mut m = config.init::<B>(device);
        m.fc1.weight = Param::from_tensor(crate::named_to_tensor(w1, device));
        m.fc1.bias = Some(Param::from_tensor(crate::named_to_tensor(b1, device)));
        m.fc2.weight = Param::from_tensor(crate::named_to_tensor(w2, device));
        m.fc2.bias = Some(Param::from_tensor(crate::named_to_tensor(b2, device)));
        Ok(m)
    }
}

impl<B: AutodiffBackend> Objective<B> for Mlp<B> {
    /// The mean cross-entropy, reported with the logits and targets.
    fn objective(&self, batch: ClassBatch<B>) -> (Tensor<B, 1>, ClassificationOutput<B>) {
        let out = self.classify(batch);
        (out.loss.clone(), out)
    }
}

impl<B: AutodiffBackend> TrainStep for Mlp<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        train_step(self, batch)
    }
}

impl<B: Backend> InferenceStep for Mlp<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TB, assert_close, to_vec};

    #[test]
    fn save_then_load_gives_identical_logits() {
        let dev = Default::default();
        let m = MlpConfig::new().with_hidden(16).init::<TB>(&dev);
        let dir = std::env::temp_dir().join(format!("nervus-mlp-{}", std::process::id()));
        m.save(&dir).unwrap();
        let back = Mlp::<TB>::load(&dir, &dev).unwrap();
        let x = Tensor::<TB, 2>::random([3, 784], burn::tensor::Distribution::Default, &dev);
        // The file is f32 and the test backend f64, so equality is to f32 rounding (2^-24 of the
        // logits' size), not to the bit.
        assert_close(
            "logits",
            &to_vec(back.forward(x.clone())),
            &to_vec(m.forward(x)),
            1e-6,
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
