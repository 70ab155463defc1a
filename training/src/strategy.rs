//! The training loop, as a strategy plugged into Burn's learner.
//!
//! Burn's `SupervisedTraining::launch` hands the learner, the loaders and its event processor to a
//! `SupervisedLearningStrategy`; this one does what Burn's single-device strategy does (train an
//! epoch, validate, checkpoint) and adds what every model here needs from the same place:
//!
//! - data parallelism on one machine: each batch cut into `parts` run on as many threads
//!   ([`crate::shard`]), for CPU backends that leave cores idle;
//! - gradient accumulation that averages: `k` micro-batches of `b` give the gradient of one batch
//!   of `k·b` (Burn's own accumulation sums them, which is a learning rate `k` times too high for
//!   SGD), and one learning-rate step per optimizer step;
//! - a validation score computed here from the outputs themselves (Burn's metric store is filled by
//!   a worker thread and may lag behind the end of an epoch);
//! - an [`EpochHook`] after every validation, which sees the model: keep the best, draw samples,
//!   judge, export;
//! - optionally, a measurement of the starting model before the first step, so a continuation
//!   knows the bar it has to beat.

use crate::loader::EpochCursor;
use crate::shard::{Merge, Shard};
use burn::data::dataloader::Progress;
use burn::module::AutodiffModule;
use burn::optim::GradientsAccumulator;
use burn::train::{
    EventProcessorTraining, InferenceStep, Learner, LearnerEvent, LearningComponentsTypes,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainStep,
    TrainingComponents, TrainingItem, TrainingModel, ValidLoader,
};
use nervus_models::output::Objective;
use std::sync::{Arc, Mutex};

const HOOK_FAILED: &str = "an epoch hook failed";
const STOPPED_AS_ASKED: &str = "stopped as asked";
/// The reasons this strategy, or a user at Burn's terminal UI, stops a run with; any other
/// reason came from Burn's checkpoint writers and is an error.
pub const OWN_STOPS: [&str; 3] = [
    HOOK_FAILED,
    STOPPED_AS_ASKED,
    "Stopping training from user input.",
];

/// The mean loss (and, for classifiers, the accuracy) of some outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    /// Sum over items of the per-item loss.
    pub loss_sum: f64,
    /// Items (the weight of `loss_sum`).
    pub count: f64,
    /// Items classified correctly, for classifiers.
    pub correct: Option<f64>,
}

impl Score {
    pub fn loss(&self) -> f64 {
        if self.count > 0.0 {
            self.loss_sum / self.count
        } else {
            f64::NAN
        }
    }

    pub fn accuracy(&self) -> Option<f64> {
        self.correct.map(|c| c / self.count)
    }

    fn add(&mut self, other: Score) {
        self.loss_sum += other.loss_sum;
        self.count += other.count;
        self.correct = match (self.correct, other.correct) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) => b,
            (a, None) => a,
        };
    }
}

/// A step output that can say how it scored. `full` asks for everything (validation); otherwise
/// the loss alone is enough (training, where reading more back would cost a sync per step).
pub trait Scored {
    fn score(&self, full: bool) -> Score;
}

/// What the hook is told after each validation.
#[derive(Clone, Debug)]
pub struct EpochInfo {
    /// 1-based epoch, as Burn's learner counts.
    pub epoch: usize,
    pub epochs: usize,
    /// Optimizer steps taken since the start of the run (including before a resume).
    pub step: usize,
    /// Mean training loss over this epoch.
    pub train: Score,
    /// Validation score of the model after this epoch.
    pub valid: Score,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Seconds since this process started training.
    pub elapsed: f64,
}

/// Called with the inference model after each validation (and once before training when a
/// baseline is asked for). An error stops training and is returned by the run.
pub trait EpochHook<M>: Send {
    fn baseline(&mut self, _valid: Score, _model: &M) -> Result<(), String> {
        Ok(())
    }

    fn after_epoch(&mut self, info: &EpochInfo, model: &M) -> Result<(), String>;

    /// Asked after each successful [`EpochHook::after_epoch`]: true ends the run there, cleanly
    /// (its checkpoint is written, so it can be resumed).
    fn stop_requested(&self) -> bool {
        false
    }
}

/// Shared between the strategy (which calls it) and the run (which reads its error).
pub type SharedHook<M> = Arc<Mutex<Box<dyn EpochHook<M>>>>;

/// The strategy: single device, averaging accumulation, hooks.
pub struct StepStrategy<LC: LearningComponentsTypes> {
    pub device: burn::tensor::Device<LC::Backend>,
    pub cursor: EpochCursor,
    /// Micro-batches per optimizer step (1 = no accumulation).
    pub accumulation: usize,
    /// Threads a batch is cut across ([`crate::shard`]; 1 = the model's own step).
    pub parts: usize,
    /// Batches in each epoch, to count optimizer steps across a resume.
    pub batches: Vec<usize>,
    pub hook: SharedHook<LC::InferenceModel>,
    /// Measure the starting model before training.
    pub baseline: bool,
    /// Set when the hook failed or the loss diverged; the run reports it.
    pub error: Arc<Mutex<Option<crate::error::TrainError>>>,
}

fn validate<LC>(
    model: &LC::InferenceModel,
    loader: &ValidLoader<LC>,
    epoch: usize,
    global: &Progress,
    processor: Option<&mut SupervisedTrainingEventProcessor<LC>>,
) -> Score
where
    LC: LearningComponentsTypes,
    <LC::InferenceModel as InferenceStep>::Output: Scored,
{
    let mut score = Score::default();
    let mut iter = loader.iter();
    let mut iteration = 0;
    let mut processor = processor;
    while let Some(batch) = iter.next() {
        iteration += 1;
        let out = model.step(batch);
        score.add(out.score(true));
        if let Some(p) = processor.as_deref_mut() {
            let item =
                TrainingItem::new(out, iter.progress(), global.clone(), Some(iteration), None);
            p.process_valid(LearnerEvent::ProcessedItem(item));
        }
    }
    if let Some(p) = processor {
        p.process_valid(LearnerEvent::EndEpoch(epoch));
    }
    score
}

impl<LC> SupervisedLearningStrategy<LC> for StepStrategy<LC>
where
    LC: LearningComponentsTypes,
    LC::TrainingModel: Objective<LC::Backend>,
    <LC::TrainingModel as TrainStep>::Input: Shard + Send,
    <LC::TrainingModel as TrainStep>::Output: Scored + Merge + Send,
    <LC::InferenceModel as InferenceStep>::Output: Scored,
{
    fn fit(
        &self,
        components: TrainingComponents<LC>,
        mut learner: Learner<LC>,
        train: TrainLoader<LC>,
        valid: ValidLoader<LC>,
        starting_epoch: usize,
    ) -> (TrainingModel<LC>, SupervisedTrainingEventProcessor<LC>) {
        let train = train.to_device(&self.device);
        let valid = valid.to_device(&self.device);
        learner.fork(&self.device);
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let interrupter = components.interrupter;
        let epochs = components.num_epochs;
        let k = self.accumulation.max(1);
        let started = std::time::Instant::now();
        let fail = |e: crate::error::TrainError| {
            *self.error.lock().expect("error slot") = Some(e);
            interrupter.stop(Some(HOOK_FAILED));
        };

        if self.baseline {
            let model = learner.model().valid();
            let score = validate::<LC>(&model, &valid, 0, &Progress::new(0, epochs), None);
            if let Err(e) = self.hook.lock().expect("hook").baseline(score, &model) {
                fail(crate::error::TrainError::Hook(e));
            }
        }

        let mut step: usize = self.batches[..starting_epoch - 1]
            .iter()
            .map(|b| b / k)
            .sum();
        for epoch in starting_epoch..=epochs {
            if interrupter.should_stop() {
                break;
            }
            self.cursor.set(epoch);
            let global = Progress::new(epoch, epochs);
            let mut iter = train.iter();
            let mut iteration = 0;
            let mut accumulator = GradientsAccumulator::new();
            let mut pending = 0;
            let mut train_score = Score::default();
            while let Some(batch) = iter.next() {
                iteration += 1;
                if pending == 0 {
                    learner.lr_step();
                }
                // One part is the model's own step, on this thread.
                let mut out = crate::shard::step(&learner.model(), batch, self.parts);
                train_score.add(out.item.score(false));
                if k == 1 {
                    learner.optimizer_step(out.grads);
                    step += 1;
                } else {
                    crate::optim::scale_grads::<LC::Backend, _>(
                        &learner.model(),
                        &mut out.grads,
                        1.0 / k as f64,
                    );
                    accumulator.accumulate(&learner.model(), out.grads);
                    pending += 1;
                    if pending == k {
                        learner.optimizer_step(accumulator.grads());
                        pending = 0;
                        step += 1;
                    }
                }
                let item = TrainingItem::new(
                    out.item,
                    iter.progress(),
                    global.clone(),
                    Some(iteration),
                    Some(learner.lr_current()),
                );
                processor.process_train(LearnerEvent::ProcessedItem(item));
                if interrupter.should_stop() {
                    break;
                }
            }
            processor.process_train(LearnerEvent::EndEpoch(epoch));
            if interrupter.should_stop() {
                break;
            }
            let model = learner.model().valid();
            let valid_score = validate::<LC>(&model, &valid, epoch, &global, Some(&mut processor));
            if !(train_score.loss().is_finite() && valid_score.loss().is_finite()) {
                fail(crate::error::TrainError::Diverged {
                    step,
                    train: train_score.loss(),
                    valid: valid_score.loss(),
                });
                break;
            }
            let info = EpochInfo {
                epoch,
                epochs,
                step,
                train: train_score,
                valid: valid_score,
                lr: learner.lr_current(),
                elapsed: started.elapsed().as_secs_f64(),
            };
            // The hook (which saves the best model) before the checkpoint: a run killed after
            // its checkpoint has saved its model, and one killed before it replays the epoch.
            let mut hook = self.hook.lock().expect("hook");
            if let Err(e) = hook.after_epoch(&info, &model) {
                fail(crate::error::TrainError::Hook(e));
                break;
            }
            if let Some(c) = &mut checkpointer {
                c.checkpoint(&learner, epoch, &components.event_store);
            }
            if hook.stop_requested() {
                interrupter.stop(Some(STOPPED_AS_ASKED));
                break;
            }
        }
        (learner.model(), processor)
    }
}

impl<B: burn::prelude::Backend> Scored for nervus_models::output::LossOutput<B> {
    fn score(&self, _full: bool) -> Score {
        use burn::prelude::ElementConversion;
        let loss = self.loss.clone().into_scalar().elem::<f64>();
        Score {
            loss_sum: loss * self.count as f64,
            count: self.count as f64,
            correct: None,
        }
    }
}
