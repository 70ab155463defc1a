//! The plain renderer Burn's learner uses when stdout is not a terminal: after the tenth step it
//! says what the whole run will cost at the rate measured so far, then prints a progress line with
//! an ETA every `every` seconds. (Epoch summaries come from the run's hook, which knows the model.)

use crate::report::{Reporter, duration};
use burn::train::metric::MetricDefinition;
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use std::time::Instant;

pub struct PlainRenderer {
    report: Reporter,
    every: f64,
    /// Items of work in the whole run, for the ETA: optimizer batches.
    start: Option<(Instant, usize)>,
    last: Option<Instant>,
    iterations: usize,
    /// Counted units per batch, and what they are called ("characters", "images").
    pub unit: Option<(f64, String)>,
}

impl PlainRenderer {
    pub fn new(report: Reporter, every: f64) -> Self {
        Self {
            report,
            every,
            start: None,
            last: None,
            iterations: 0,
            unit: None,
        }
    }
}

impl MetricsRendererTraining for PlainRenderer {
    fn update_train(&mut self, _state: MetricState) {}

    fn update_valid(&mut self, _state: MetricState) {}

    fn render_train(&mut self, item: TrainingProgress, _indicators: Vec<ProgressType>) {
        let Some(p) = item.progress else { return };
        let epoch = item.global_progress.items_processed;
        let epochs = item.global_progress.items_total;
        let now = Instant::now();
        let (t0, first_epoch) = *self.start.get_or_insert((now, epoch));
        self.iterations += 1;
        let within = if p.items_total > 0 {
            p.items_processed as f64 / p.items_total as f64
        } else {
            0.0
        };
        let span = (epochs + 1).saturating_sub(first_epoch).max(1) as f64;
        let done = ((epoch - first_epoch) as f64 + within) / span;
        let elapsed = now.duration_since(t0).as_secs_f64();
        let eta = elapsed * (1.0 - done) / done.max(1e-9);
        if self.iterations == 10 {
            let rate = match &self.unit {
                Some((per, name)) => {
                    format!(", {:.0} {name} a second", per * 10.0 / elapsed.max(1e-9))
                }
                None => String::new(),
            };
            self.report.line(format!(
                "first 10 steps took {}{rate}: about {} to go (validation not included)",
                duration(elapsed),
                duration(eta)
            ));
            self.last = Some(now);
        } else if self
            .last
            .is_some_and(|l| now.duration_since(l).as_secs_f64() >= self.every)
        {
            self.report.line(format!(
                "  epoch {epoch}/{epochs} {:>3.0}% | {} elapsed, about {} to go",
                within * 100.0,
                duration(elapsed),
                duration(eta)
            ));
            self.last = Some(now);
        }
    }

    fn render_valid(&mut self, _item: TrainingProgress, _indicators: Vec<ProgressType>) {}
}

impl MetricsRendererEvaluation for PlainRenderer {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}

    fn render_test(&mut self, _item: EvaluationProgress, _indicators: Vec<ProgressType>) {}
}

impl MetricsRenderer for PlainRenderer {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, _definition: MetricDefinition) {}
}
