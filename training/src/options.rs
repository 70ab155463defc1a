//! What every training run shares, declared once: the command-line flags ([`RunArgs`], flattened
//! into each example's own), the options they become ([`RunOptions`], embedded in each model's
//! options as `run`), and keeping the best model ([`KeepBest`]).
//!
//! Each model keeps its own defaults for the shared flags ([`parse_with_defaults`]), so `--help`
//! shows the values a run will use.

use crate::checks::{self, BadValue};
use crate::schedule::warmup_steps;
use clap::Parser;
use nervus_inference::drawing::DrawSettings;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The flags every training example takes. The defaults here are the GPT's; each model sets its
/// own with [`parse_with_defaults`].
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Optimizer steps.
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// Samples per step.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Threads each batch is cut across, run side by side (the result is the whole batch's
    /// gradient; the CPU backends default to 2, a GPU to 1).
    #[arg(long, default_value_t = crate::backend::PARTS)]
    pub parts: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 0.003)]
    pub lr: f64,
    /// Warm-up: a share of the run if below 1, else steps.
    #[arg(long, default_value_t = 0.1)]
    pub warmup: f64,
    /// Where the cosine decay ends, as a share of the peak learning rate.
    #[arg(long, default_value_t = 0.1)]
    pub decay_to: f64,
    /// Global gradient-norm clipping (0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    /// Decoupled weight decay of the matrices.
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f64,
    /// Seed of the initial weights and of the data order.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Steps between evaluations (each one a checkpoint).
    #[arg(long, default_value_t = 250)]
    pub eval_every: usize,
    /// Where the best model goes.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Start from a saved model (a continuation: only a model better than it replaces --save).
    #[arg(long)]
    pub load: Option<PathBuf>,
    /// Continue the run stopped or killed in the run directory (weights, optimizer, schedule and
    /// data position).
    #[arg(long)]
    pub resume: bool,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    pub overwrite: bool,
    /// Stop cleanly at the first evaluation at or after this step (continue with --resume).
    #[arg(long)]
    pub stop_after: Option<usize>,
    /// Plain progress lines instead of the terminal dashboard.
    #[arg(long)]
    pub plain: bool,
}

/// How a flow-matching model draws (the image and the video DiT): at every checkpoint of a run,
/// and when drawing with a saved model.
#[derive(clap::Args, Clone, Debug)]
pub struct DrawArgs {
    /// Classifier-free guidance scale (1 = plain conditional).
    #[arg(long, default_value_t = 2.0)]
    pub guidance: f64,
    /// Euler steps when drawing.
    #[arg(long, default_value_t = 20)]
    pub sample_steps: usize,
    /// Time shift of those steps (1: evenly spaced; above 1: more of them at high noise).
    #[arg(long, default_value_t = 1.0)]
    pub shift: f64,
    /// Guide only the steps at noise levels up to this (1: every step; lower leaves the noisiest
    /// steps, where the layout is decided, to the conditional model alone).
    #[arg(long, default_value_t = 1.0)]
    pub guidance_below: f64,
    /// Guidance at those noisiest steps, above --guidance-below (1: the conditional model alone).
    #[arg(long, default_value_t = 1.0)]
    pub guidance_above: f64,
}

impl DrawArgs {
    pub fn settings(&self) -> DrawSettings {
        DrawSettings {
            steps: self.sample_steps,
            guidance: self.guidance,
            shift: self.shift,
            guidance_below: self.guidance_below,
            guidance_above: self.guidance_above,
        }
    }
}

/// Parses the command line into `A` after giving the shared flags this model's defaults:
/// `(flag name without dashes, value)` pairs, e.g. `("steps", "3000")`.
pub fn parse_with_defaults<A: Parser>(defaults: &[(&'static str, &'static str)]) -> A {
    let mut command = A::command();
    for &(id, value) in defaults {
        command = command.mut_arg(id, |a| a.default_value(value));
    }
    let matches = command.get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

impl RunArgs {
    /// The options these flags give, the run's working directory being `run_dir`; refuses a
    /// clipping threshold that is negative or not a number.
    pub fn options(&self, run_dir: PathBuf) -> Result<RunOptions, BadValue> {
        if !(self.clip >= 0.0 && self.clip.is_finite()) {
            return Err(BadValue {
                flag: "--clip",
                value: self.clip.to_string(),
                rule: "a gradient norm above 0, or 0 for no clipping",
            });
        }
        Ok(RunOptions {
            steps: self.steps,
            batch: self.batch,
            parts: self.parts,
            lr: self.lr,
            warmup: warmup_steps(self.warmup, self.steps),
            decay_to: self.decay_to,
            clip: (self.clip > 0.0).then_some(self.clip),
            weight_decay: self.weight_decay,
            seed: self.seed,
            eval_every: self.eval_every,
            save: self.save.clone(),
            run_dir,
            continued_from: self.load.clone(),
            resume: self.resume,
            stop_after: self.stop_after,
            overwrite: self.overwrite,
        })
    }
}

impl RunArgs {
    /// [`RunArgs::options`] with `--save` defaulting to the `--load`ed model's directory (a
    /// continuation replaces the model it started from, and only with a better one), else to
    /// `default_save`; the run's working directory is `train/` beside it.
    pub fn options_beside(&self, default_save: &str) -> Result<RunOptions, BadValue> {
        let save = self
            .save
            .clone()
            .or_else(|| self.load.clone())
            .unwrap_or_else(|| PathBuf::from(default_save));
        let run_dir = save
            .parent()
            .map_or_else(|| PathBuf::from("train"), |p| p.join("train"));
        Ok(RunOptions {
            save: Some(save),
            ..self.options(run_dir)?
        })
    }
}

/// What every training run shares; each model's options embed it as `run`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    /// Optimizer steps.
    pub steps: usize,
    /// Samples per step.
    pub batch: usize,
    /// Threads each batch is cut across ([`crate::shard`]; 1 = the model's own step).
    pub parts: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps.
    pub warmup: usize,
    /// Where the cosine decay ends, as a share of `lr`.
    pub decay_to: f64,
    /// Global-norm clipping threshold; `None` for no clipping.
    pub clip: Option<f64>,
    pub weight_decay: f64,
    pub seed: u64,
    /// Steps between evaluations.
    pub eval_every: usize,
    /// Where the best model is written (`None`: nowhere).
    pub save: Option<PathBuf>,
    /// Burn's working directory for the run: checkpoints, metric logs, `log.txt`.
    pub run_dir: PathBuf,
    /// The saved model the run starts from (a continuation: only a model better than it
    /// replaces `save`).
    pub continued_from: Option<PathBuf>,
    /// Continue the run stopped or killed in `run_dir`.
    pub resume: bool,
    /// End the run cleanly at the first evaluation at or after this step (the schedule still
    /// spans `steps`), to be continued with `resume`: training in sessions.
    pub stop_after: Option<usize>,
    /// Start afresh over a model already at `save` and another run's checkpoints.
    pub overwrite: bool,
}

impl RunOptions {
    /// Options for a run of `steps` steps of `batch` samples with everything else plain: one
    /// part, no warm-up or clipping, an evaluation at the end, nothing saved (tests and
    /// benchmarks start here and change what they need).
    pub fn new(steps: usize, batch: usize, lr: f64, run_dir: PathBuf) -> Self {
        Self {
            steps,
            batch,
            parts: 1,
            lr,
            warmup: 0,
            decay_to: 1.0,
            clip: None,
            weight_decay: 0.0,
            seed: 1,
            eval_every: steps.max(1),
            save: None,
            run_dir,
            continued_from: None,
            resume: false,
            stop_after: None,
            overwrite: false,
        }
    }

    /// Refuses numbers out of their range, each named by its flag ([`checks::schedule`]).
    pub fn check(&self) -> Result<(), BadValue> {
        checks::schedule(
            self.steps,
            self.batch,
            self.parts,
            self.lr,
            self.decay_to,
            self.clip,
            self.weight_decay,
            self.eval_every,
        )
    }

    /// Whether a run that has just evaluated at `step` stops there for now (`stop_after`
    /// reached before the last step).
    pub fn stops_at(&self, step: usize) -> bool {
        self.stop_after
            .is_some_and(|s| step >= s && step < self.steps)
    }
}

/// What a run writes beside its best model as `training.json`: it records the step and the
/// validation loss of the model it describes.
pub trait Record: Serialize + Send {
    fn record(&mut self, step: usize, valid_loss: f64);
}

/// What a run of a text model did: trained (its report), and what the model it leaves wrote.
pub struct TextOutcome<R> {
    pub report: Option<R>,
    /// The saved model's continuation of the prompt (the prompt not included).
    pub writes: Option<String>,
}

impl<R> TextOutcome<R> {
    /// Prints what the model wrote after `prompt`, under a heading where it follows a run.
    pub fn print_writes(&self, prompt: &str) {
        if let Some(text) = &self.writes {
            if self.report.is_some() {
                println!("--- the saved model writes:");
            }
            println!("{prompt}{text}");
        }
    }
}

/// [`Record`] for a settings struct whose `step` and `valid_loss` fields say which model it
/// describes (every model's `training.json`).
macro_rules! record_step_and_loss {
    ($($settings:ty),+) => {$(
        impl $crate::options::Record for $settings {
            fn record(&mut self, step: usize, valid_loss: f64) {
                self.step = step;
                self.valid_loss = Some(valid_loss);
            }
        }
    )+};
}
pub(crate) use record_step_and_loss;

/// Keeping the best model, the same for every model: the lowest validation loss so far (the
/// starting model's for a continuation), and where a better one is saved with its
/// `training.json`.
pub struct KeepBest<S: Record> {
    /// The lowest validation loss so far.
    pub best: f64,
    /// The step and validation loss of the best model this run found, if it found one.
    pub found: Option<(usize, f64)>,
    pub save: Option<PathBuf>,
    /// What `training.json` says; its step and loss are those of the last model saved.
    pub settings: S,
}

impl<S: Record> KeepBest<S> {
    /// Starts with `best` as the bar (infinity for a fresh run; [`crate::checkpoint::claim_save`]
    /// gives it).
    pub fn new(best: f64, save: Option<PathBuf>, settings: S) -> Self {
        Self {
            best,
            found: None,
            save,
            settings,
        }
    }

    /// The starting model's validation loss becomes the bar (a continuation's baseline).
    pub fn baseline(&mut self, valid: f64) {
        self.best = self.best.min(valid);
    }

    /// After the evaluation at `step`: a validation loss below the best so far is the new best,
    /// and where there is a save directory, `save(settings, dir)` writes the model there (the
    /// settings recording this step and loss). Returns the note for the step's line:
    /// `"  saved to DIR"`, or empty.
    pub fn offer<E: std::fmt::Display>(
        &mut self,
        step: usize,
        valid: f64,
        save: impl FnOnce(&S, &Path) -> Result<(), E>,
    ) -> Result<String, String> {
        // NaN is never better.
        if valid.partial_cmp(&self.best) != Some(std::cmp::Ordering::Less) {
            return Ok(String::new());
        }
        self.best = valid;
        self.found = Some((step, valid));
        let Some(dir) = &self.save else {
            return Ok(String::new());
        };
        self.settings.record(step, valid);
        save(&self.settings, dir).map_err(|e| e.to_string())?;
        Ok(format!("  saved to {}", dir.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    #[derive(Serialize, Default)]
    struct Seen {
        step: usize,
        valid_loss: Option<f64>,
    }
    impl Record for Seen {
        fn record(&mut self, step: usize, valid_loss: f64) {
            self.step = step;
            self.valid_loss = Some(valid_loss);
        }
    }

    /// Only a loss below the bar saves, with the settings recording that step; NaN never does;
    /// without a save directory the best is still tracked.
    #[test]
    fn only_a_better_model_is_saved_and_recorded() {
        let mut keep = KeepBest::new(2.0, Some(PathBuf::from("m")), Seen::default());
        let mut saved = Vec::new();
        for (step, valid) in [(1, 2.5), (2, 1.5), (3, f64::NAN), (4, 1.7), (5, 1.2)] {
            let note = keep
                .offer(step, valid, |s: &Seen, dir| {
                    saved.push((s.step, s.valid_loss, dir.to_path_buf()));
                    Ok::<(), String>(())
                })
                .unwrap();
            assert_eq!(note.is_empty(), !matches!(step, 2 | 5), "step {step}");
        }
        assert_eq!(
            saved,
            [
                (2, Some(1.5), PathBuf::from("m")),
                (5, Some(1.2), PathBuf::from("m"))
            ]
        );
        assert_eq!(keep.found, Some((5, 1.2)));
        let mut nowhere = KeepBest::new(f64::INFINITY, None, Seen::default());
        nowhere.baseline(3.0);
        let note = nowhere
            .offer(1, 2.0, |_, _| Err::<(), _>("must not save"))
            .unwrap();
        assert_eq!((note.as_str(), nowhere.found), ("", Some((1, 2.0))));
        // A failed save is the caller's error, with the save's message.
        let mut failing = KeepBest::new(f64::INFINITY, Some(PathBuf::from("m")), Seen::default());
        let e = failing.offer(1, 1.0, |_, _| Err("disk full")).unwrap_err();
        assert_eq!(e, "disk full");
    }

    /// `stop_after` stops at or after its step, never at the run's last one.
    #[test]
    fn a_run_stops_after_its_step_but_not_at_the_end() {
        let mut o = RunOptions::new(100, 4, 1e-3, PathBuf::from("run"));
        assert!(!o.stops_at(50));
        o.stop_after = Some(40);
        assert!(!o.stops_at(30));
        assert!(o.stops_at(50));
        assert!(!o.stops_at(100));
    }

    #[derive(Parser, Debug)]
    struct Example {
        #[command(flatten)]
        run: RunArgs,
    }

    /// A model's defaults replace the shared ones, and the flags still override them; a negative
    /// or NaN clipping threshold is refused, 0 is off.
    #[test]
    fn each_model_has_its_own_defaults_and_clipping_is_checked() {
        let mut command = Example::command();
        for (id, value) in [("steps", "3000"), ("lr", "0.001")] {
            command = command.mut_arg(id, |a| a.default_value(value));
        }
        let parse = |argv: &[&str]| {
            let m = command.clone().try_get_matches_from(argv).unwrap();
            Example::from_arg_matches(&m).unwrap().run
        };
        let a = parse(&["x"]);
        assert_eq!((a.steps, a.lr, a.batch), (3000, 0.001, 16));
        let b = parse(&["x", "--steps", "7", "--clip", "0"]);
        assert_eq!(b.steps, 7);
        let o = b.options(PathBuf::from("r")).unwrap();
        assert_eq!((o.clip, o.warmup), (None, 1));
        for bad in ["--clip=-1", "--clip=NaN"] {
            let e = parse(&["x", bad]).options(PathBuf::from("r")).unwrap_err();
            assert_eq!(e.flag, "--clip", "{bad}");
        }
    }
}
