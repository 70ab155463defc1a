//! Experiments as data: a spec (arms × seeds, steps, the metric, and the promotion rules) that is
//! hashed and registered before it runs, one function that runs one (arm, seed) through the same
//! training path every model uses, and the arithmetic of a verdict against the noise floor.
//!
//! The discipline is the KALIA release's: the rule ("arm B beats A by at least X") is written down
//! and hashed before the numbers exist; a verdict is printed only for a spec whose hash still
//! matches its registration; and every difference is printed beside the noise floor, the seed
//! spread of the control, so that noise ranked against noise cannot pass for a finding.

use crate::gpt::{EvalSource, GptOptions, TextData};
use crate::mnist::MnistOptions;
use crate::optim::OptimizerSpec;
use crate::options::RunOptions;
use crate::report::Reporter;
use crate::run::TrainError;
use burn::tensor::backend::AutodiffBackend;
use nervus_inference::generate::SampleOptions;
use nervus_models::gpt::GptSize;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// What a spec trains.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The character GPT on the vendored Shakespeare; the metric is the final validation loss.
    Gpt,
    /// The MNIST MLP on the vendored digits; the metric is the final test accuracy.
    Mlp,
    /// Training throughput of a GPT preset in characters a second (each "seed" is one timed
    /// repetition, interleaved with the other arms).
    Throughput,
    /// The modern BPE language model on the vendored Austen; the metric is the final loss on
    /// the deterministic evaluation (nats per token).
    Lm,
}

/// One arm's settings; absent fields take the example's defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `adamw` or `sgd`.
    #[serde(default)]
    pub optimizer: Option<String>,
    #[serde(default)]
    pub lr: Option<f64>,
    /// Warm-up: a share of the run if below 1, else steps.
    #[serde(default)]
    pub warmup: Option<f64>,
    #[serde(default)]
    pub decay_to: Option<f64>,
    /// Global-norm clipping; 0 or absent means none.
    #[serde(default)]
    pub clip: Option<f64>,
    #[serde(default)]
    pub momentum: Option<f64>,
    #[serde(default)]
    pub hidden: Option<usize>,
    /// GPT size preset (small, medium, large).
    #[serde(default)]
    pub size: Option<String>,
    /// Overrides the spec's steps (epochs for the MLP).
    #[serde(default)]
    pub steps: Option<usize>,
    /// LM: Muon's peak learning rate (with `optimizer: muon`).
    #[serde(default)]
    pub muon_lr: Option<f64>,
    /// LM: QK-norm on (default) or off.
    #[serde(default)]
    pub qk_norm: Option<bool>,
    /// LM: logit soft-cap (0 = off; default 30).
    #[serde(default)]
    pub softcap: Option<f64>,
    /// LM: block-diagonal document mask (default off).
    #[serde(default)]
    pub doc_mask: Option<bool>,
}

/// An arm: a named setting, optionally one point `x` of a sweep within a `group`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    pub name: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub x: Option<f64>,
    pub settings: Settings,
}

/// Which arm a rule speaks of: one arm, or the best arm of a group (by mean).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ref {
    Arm(String),
    BestOf(String),
}

/// A pre-registered promotion rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rule {
    /// `better` improves on `control` (the metric's direction) by at least `by`, in the mean.
    Beats { control: Ref, better: Ref, by: f64 },
    /// The seed spread of `wider` exceeds that of `control` by at least `by`.
    SpreadGrows { control: Ref, wider: Ref, by: f64 },
}

/// A whole experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub name: String,
    pub title: String,
    pub question: String,
    pub kind: Kind,
    /// Optimizer steps (GPT), epochs (MLP) or timed steps (throughput).
    pub steps: usize,
    pub seeds: Vec<u64>,
    /// Evaluation interval (GPT), for the curves.
    #[serde(default)]
    pub eval_every: Option<usize>,
    /// Validation windows (GPT); default: about 16K characters' worth.
    #[serde(default)]
    pub eval_windows: Option<usize>,
    pub arms: Vec<Arm>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Plot the final metric against the arms' `x`, one line per group.
    #[serde(default)]
    pub plot: Option<Plot>,
}

/// How a swept value is plotted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plot {
    /// What `x` is.
    pub x: String,
    /// Logarithmic x axis.
    #[serde(default)]
    pub log: bool,
}

/// The metric of a spec and which way is better.
impl Spec {
    pub fn metric(&self) -> &'static str {
        match self.kind {
            Kind::Gpt => "validation loss",
            Kind::Mlp => "test accuracy",
            Kind::Throughput => "characters a second",
            Kind::Lm => "evaluation loss",
        }
    }

    /// The steps `arm` runs: its own count where it sets one, else the spec's.
    pub fn steps_of(&self, arm: &Arm) -> usize {
        arm.settings.steps.unwrap_or(self.steps)
    }

    /// Whether larger values of the metric are better.
    pub fn higher_is_better(&self) -> bool {
        !matches!(self.kind, Kind::Gpt | Kind::Lm)
    }

    /// A miniature of the spec that exercises every code path in seconds: two seeds, few steps.
    pub fn quick(&self) -> Spec {
        let mut s = self.clone();
        s.seeds.truncate(2);
        let (steps, every) = match s.kind {
            Kind::Gpt | Kind::Lm => (12, Some(6)),
            Kind::Mlp => (1, None),
            Kind::Throughput => (2, None),
        };
        s.steps = steps;
        s.eval_every = every;
        // 16 windows for the GPT; 2 batches (of 16 windows, read both ways) for the LM.
        s.eval_windows = Some(if s.kind == Kind::Lm { 2 } else { 16 });
        for a in &mut s.arms {
            a.settings.steps = a.settings.steps.map(|_| steps);
            if s.kind == Kind::Throughput {
                // The large preset takes seconds a step; the miniature only needs the path.
                a.settings.size = Some("small".into());
            }
        }
        s
    }
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub arm: String,
    pub seed: u64,
    /// The spec's metric at the end of the run; NaN for a run that diverged (stored as `null`:
    /// JSON has no NaN).
    #[serde(with = "nan_as_null")]
    pub value: f64,
    /// `(step, validation loss)` at each checkpoint (GPT), or `(epoch, accuracy)` (MLP).
    #[serde(with = "nan_as_null::pairs")]
    pub curve: Vec<(usize, f64)>,
    pub seconds: f64,
}

/// f64 values that may be NaN, stored as `null` in JSON.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        v.is_finite().then_some(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }

    pub mod pairs {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        pub fn serialize<S: Serializer>(v: &[(usize, f64)], s: S) -> Result<S::Ok, S::Error> {
            v.iter()
                .map(|(k, x)| (*k, x.is_finite().then_some(*x)))
                .collect::<Vec<_>>()
                .serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(usize, f64)>, D::Error> {
            Ok(Vec::<(usize, Option<f64>)>::deserialize(d)?
                .into_iter()
                .map(|(k, x)| (k, x.unwrap_or(f64::NAN)))
                .collect())
        }
    }
}

fn warmup_steps(w: Option<f64>, steps: usize) -> usize {
    match w {
        Some(w) if w < 1.0 => (w * steps as f64).round() as usize,
        Some(w) => w as usize,
        None => 0,
    }
}

/// The result of a run whose loss became NaN or infinite: an outcome of its settings (the
/// table prints it as "diverged" and leaves it out of the plot), so it is kept, not retried.
fn diverged(arm: &Arm, seed: u64, started: std::time::Instant) -> RunResult {
    RunResult {
        arm: arm.name.clone(),
        seed,
        value: f64::NAN,
        curve: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Runs one arm for one seed on backend `B` (call from a process of its own: Burn's initial
/// weights come from a process-wide generator).
pub fn run<B: AutodiffBackend>(
    spec: &Spec,
    arm: &Arm,
    seed: u64,
    run_dir: PathBuf,
    device: &B::Device,
) -> Result<RunResult, String> {
    let s = &arm.settings;
    let steps = spec.steps_of(arm);
    let started = std::time::Instant::now();
    match spec.kind {
        Kind::Lm => run_lm::<B>(spec, arm, seed, run_dir, device),
        Kind::Gpt => {
            let text = nervus_datasets::text::SHAKESPEARE;
            let size =
                GptSize::parse(s.size.as_deref().unwrap_or("small")).ok_or("unknown size")?;
            let vocab = nervus_datasets::text::CharTokenizer::from_text(text).vocab_size();
            let config = size.config(vocab);
            let data = TextData::new("shakespeare", text, None, config.context)
                .map_err(|e| e.to_string())?;
            B::seed(device, seed);
            let model = config.init::<B>(device);
            let optimizer = match s.optimizer.as_deref().unwrap_or("adamw") {
                "sgd" => OptimizerSpec::Sgd {
                    momentum: s.momentum.unwrap_or(0.9),
                },
                _ => OptimizerSpec::adamw(0.1),
            };
            let opts = GptOptions {
                run: RunOptions {
                    steps,
                    batch: 16,
                    parts: 1,
                    lr: s.lr.unwrap_or(0.003),
                    warmup: warmup_steps(s.warmup, steps),
                    decay_to: s.decay_to.unwrap_or(1.0),
                    clip: s.clip.filter(|c| *c > 0.0),
                    weight_decay: 0.1,
                    seed,
                    eval_every: spec.eval_every.unwrap_or(steps),
                    save: None,
                    run_dir,
                    continued_from: None,
                    resume: false,
                    overwrite: true,
                    stop_after: None,
                },
                model: config.clone(),
                eval_windows: spec
                    .eval_windows
                    .unwrap_or_else(|| EvalSource::default_windows(config.context)),
                sample: SampleOptions {
                    length: 0,
                    temperature: 0.0,
                    top_k: None,
                },
                prompt: String::new(),
            };
            let report =
                match crate::gpt::train_with(&opts, optimizer, &data, model, Reporter::silent()) {
                    Ok((report, _)) => report,
                    Err(TrainError::Diverged { .. }) => return Ok(diverged(arm, seed, started)),
                    Err(e) => return Err(e.to_string()),
                };
            let curve: Vec<(usize, f64)> = report.checkpoints.iter().map(|c| (c.0, c.2)).collect();
            let value = curve.last().map_or(f64::NAN, |c| c.1);
            Ok(RunResult {
                arm: arm.name.clone(),
                seed,
                value,
                curve,
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Kind::Mlp => {
            let data = nervus_datasets::mnist::Mnist::vendored();
            let optimizer = match s.optimizer.as_deref().unwrap_or("sgd") {
                "adamw" => OptimizerSpec::adamw(0.0),
                _ => OptimizerSpec::Sgd {
                    momentum: s.momentum.unwrap_or(0.9),
                },
            };
            let opts = MnistOptions {
                hidden: s.hidden.unwrap_or(128),
                optimizer,
                lr: s.lr.unwrap_or(0.02),
                epochs: steps,
                batch: 32,
                seed,
                save: None,
                run_dir,
                // An arm that failed is run again from its start.
                overwrite: true,
            };
            let r = match crate::mnist::train::<B>(
                &opts,
                Arc::new(data.train),
                Arc::new(data.test),
                Reporter::silent(),
                device,
            ) {
                Ok((_, r)) => r,
                Err(TrainError::Diverged { .. }) => return Ok(diverged(arm, seed, started)),
                Err(e) => return Err(e.to_string()),
            };
            Ok(RunResult {
                arm: arm.name.clone(),
                seed,
                value: r.final_accuracy(),
                curve: r
                    .epochs
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i + 1, e.2))
                    .collect(),
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Kind::Throughput => {
            let size =
                GptSize::parse(s.size.as_deref().unwrap_or("small")).ok_or("unknown size")?;
            let config = size.config(64);
            let rate = crate::bench::gpt_chars_per_sec::<B>(
                &config,
                16,
                1,
                steps,
                s.clip.filter(|c| *c > 0.0),
                device,
            );
            Ok(RunResult {
                arm: arm.name.clone(),
                seed,
                value: rate,
                curve: Vec::new(),
                seconds: started.elapsed().as_secs_f64(),
            })
        }
    }
}

/// The model the LM experiments train: 3 blocks, 4 heads, width 96, context 64, a 1024-token
/// BPE on Austen (about half a million parameters): big enough for Muon's matrices to matter,
/// small enough for seeds × arms on two cores.
pub fn lm_experiment_config(vocab: usize) -> nervus_models::gpt::GptConfig {
    crate::lm::LmPreset::Small
        .config(vocab)
        .with_layers(3)
        .with_d_model(96)
        .with_context(64)
}

fn run_lm<B: AutodiffBackend>(
    spec: &Spec,
    arm: &Arm,
    seed: u64,
    run_dir: PathBuf,
    device: &B::Device,
) -> Result<RunResult, String> {
    use crate::lm::{CorpusOptions, LmOptions, prepare, train};
    let s = &arm.settings;
    let steps = spec.steps_of(arm);
    let started = std::time::Instant::now();
    // One corpus for every run of every spec, beside the spec directories.
    let root = run_dir
        .parent()
        .and_then(|p| p.parent())
        .map_or_else(std::env::temp_dir, |p| p.to_path_buf())
        .join("lm-corpora");
    let corpus = prepare(
        "austen",
        nervus_datasets::documents::AUSTEN,
        nervus_datasets::documents::Source::Austen,
        None,
        &CorpusOptions {
            vocab: 1024,
            held_out: 0.1,
            contexts: vec![64],
            root,
        },
        &Reporter::silent(),
    )
    .map_err(|e| e.to_string())?;
    let mut config = lm_experiment_config(corpus.bpe.vocab_size());
    config.qk_norm = s.qk_norm.unwrap_or(true);
    config.logit_softcap = Some(s.softcap.unwrap_or(30.0)).filter(|c| *c > 0.0);
    B::seed(device, seed);
    let model = config.init::<B>(device);
    let lr = s.lr.unwrap_or(0.003);
    let optimizer = match s.optimizer.as_deref().unwrap_or("adamw") {
        "muon" => OptimizerSpec::muon(lr, s.muon_lr.unwrap_or(0.02), 0.1),
        _ => OptimizerSpec::adamw(0.1),
    };
    let opts = LmOptions {
        run: RunOptions {
            steps,
            batch: 16,
            lr,
            warmup: warmup_steps(s.warmup.or(Some(0.1)), steps),
            decay_to: s.decay_to.unwrap_or(0.1),
            clip: Some(s.clip.unwrap_or(1.0)).filter(|c| *c > 0.0),
            seed,
            eval_every: spec.eval_every.unwrap_or(steps),
            save: None,
            run_dir,
            resume: false,
            stop_after: None,
            continued_from: None,
            overwrite: true,
            parts: 1,
            weight_decay: 0.1,
        },
        model: config,
        accumulation: 1,
        optimizer,
        eval_batches: spec.eval_windows.unwrap_or(20),
        doc_mask: s.doc_mask.unwrap_or(false),
        sample: SampleOptions {
            length: 1,
            temperature: 0.0,
            top_k: None,
        },
        prompt: String::new(),
    };
    let report = match train(&opts, &corpus, model, Reporter::silent()) {
        Ok((report, _)) => report,
        Err(crate::lm::LmError::Train(TrainError::Diverged { .. })) => {
            return Ok(diverged(arm, seed, started));
        }
        Err(e) => return Err(e.to_string()),
    };
    let curve: Vec<(usize, f64)> = report
        .checkpoints
        .iter()
        .map(|c| (c.step, c.valid_loss))
        .collect();
    let value = curve.last().map_or(f64::NAN, |c| c.1);
    Ok(RunResult {
        arm: arm.name.clone(),
        seed,
        value,
        curve,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Mean, spread (max − min) and sample standard deviation of some values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub spread: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(v: &[f64]) -> Stats {
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n.max(1) as f64;
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let var = if n > 1 {
            v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Stats {
            n,
            mean,
            spread: max - min,
            sd: var.sqrt(),
            min,
            max,
        }
    }
}

/// A rule's outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass,
    Fail,
    /// The difference is no larger than the control's seed spread: nothing can be concluded.
    InsideTheNoise,
    /// The spec's hash no longer matches its registration (or it was never registered).
    NotRegistered(String),
}

/// Decides a rule from per-arm values. `stats(arm)` gives an arm's statistics; groups resolve to
/// their best arm by mean. Returns the verdict and a sentence with the numbers.
pub fn decide(
    spec: &Spec,
    rule: &Rule,
    stats: &dyn Fn(&str) -> Option<Stats>,
) -> (Verdict, String) {
    let higher = spec.higher_is_better();
    let resolve = |r: &Ref| -> Option<(String, Stats)> {
        match r {
            Ref::Arm(a) => stats(a).map(|s| (a.clone(), s)),
            Ref::BestOf(g) => spec
                .arms
                .iter()
                .filter(|a| a.group.as_deref() == Some(g.as_str()))
                .filter_map(|a| stats(&a.name).map(|s| (a.name.clone(), s)))
                .filter(|(_, s)| s.mean.is_finite())
                .min_by(|x, y| {
                    let (a, b) = (x.1.mean, y.1.mean);
                    if higher {
                        b.total_cmp(&a)
                    } else {
                        a.total_cmp(&b)
                    }
                }),
        }
    };
    match rule {
        Rule::Beats {
            control,
            better,
            by,
        } => {
            let (Some((cn, c)), Some((bn, b))) = (resolve(control), resolve(better)) else {
                return (Verdict::Fail, "an arm of the rule has no results".into());
            };
            let gain = if higher {
                b.mean - c.mean
            } else {
                c.mean - b.mean
            };
            let floor = c.spread;
            let text = format!(
                "{bn} against {cn}: gain {gain:+.4} (registered bar {by}); noise floor (seed spread of {cn}) {floor:.4}"
            );
            let v = if !gain.is_finite() {
                Verdict::Fail
            } else if gain.abs() <= floor {
                Verdict::InsideTheNoise
            } else if gain >= *by {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            (v, text)
        }
        Rule::SpreadGrows { control, wider, by } => {
            let (Some((cn, c)), Some((wn, w))) = (resolve(control), resolve(wider)) else {
                return (Verdict::Fail, "an arm of the rule has no results".into());
            };
            let growth = w.spread - c.spread;
            let text = format!(
                "seed spread {wn} {:.4} against {cn} {:.4}: growth {growth:+.4} (registered bar {by})",
                w.spread, c.spread
            );
            let v = if growth.is_finite() && growth >= *by {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            (v, text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(arms: &[(&str, Option<&str>)]) -> Spec {
        Spec {
            name: "t".into(),
            title: "t".into(),
            question: "t".into(),
            kind: Kind::Gpt,
            steps: 1,
            seeds: vec![1, 2],
            eval_every: None,
            eval_windows: None,
            plot: None,
            arms: arms
                .iter()
                .map(|(n, g)| Arm {
                    name: n.to_string(),
                    group: g.map(str::to_string),
                    x: None,
                    settings: Settings::default(),
                })
                .collect(),
            rules: vec![],
        }
    }

    #[test]
    fn verdicts_respect_the_bar_and_the_noise_floor() {
        let s = spec(&[("a", Some("g")), ("b", Some("g")), ("c", None)]);
        let table = |arm: &str| match arm {
            "a" => Some(Stats::of(&[2.30, 2.40])),
            "b" => Some(Stats::of(&[2.20, 2.21])),
            "c" => Some(Stats::of(&[2.33, 2.37])),
            _ => None,
        };
        let rule = |by| Rule::Beats {
            control: Ref::Arm("c".into()),
            better: Ref::BestOf("g".into()),
            by,
        };
        // Best of g is b (lower loss): gain 2.35 − 2.205 = 0.145, floor 0.04.
        assert_eq!(decide(&s, &rule(0.1), &table).0, Verdict::Pass);
        assert_eq!(decide(&s, &rule(0.2), &table).0, Verdict::Fail);
        let close = |arm: &str| match arm {
            "c" => Some(Stats::of(&[2.30, 2.40])),
            _ => Some(Stats::of(&[2.31, 2.33])),
        };
        // Gain 0.03 inside a spread of 0.10: no conclusion, whatever the bar.
        assert_eq!(decide(&s, &rule(0.01), &close).0, Verdict::InsideTheNoise);
        let nan = |_: &str| Some(Stats::of(&[f64::NAN, 2.0]));
        assert_ne!(
            decide(&s, &rule(0.0), &nan).0,
            Verdict::Pass,
            "NaN never passes"
        );
    }

    #[test]
    fn stats_are_the_usual_ones() {
        let s = Stats::of(&[1.0, 2.0, 4.0]);
        assert_eq!(
            (s.n, s.mean, s.spread, s.min, s.max),
            (3, 7.0 / 3.0, 3.0, 1.0, 4.0)
        );
        assert!((s.sd - (7.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    /// A diverging arm is a result, NaN (printed "diverged"), not an error: as an error its runs
    /// would count as failed, be missing from the table, and be retried on every resume.
    #[test]
    fn a_diverging_arm_is_a_nan_result_not_a_failure() {
        let mut s = spec(&[("sgd lr 1e30", None)]);
        s.steps = 4;
        s.eval_every = Some(2);
        s.eval_windows = Some(2);
        let settings = &mut s.arms[0].settings;
        settings.optimizer = Some("sgd".into());
        settings.momentum = Some(0.0);
        settings.lr = Some(1e30);
        settings.decay_to = Some(1.0);
        let dir = std::env::temp_dir().join(format!("nervus-diverge-{}", std::process::id()));
        let arm = s.arms[0].clone();
        let r = run::<crate::backend::Train>(&s, &arm, 1, dir.clone(), &crate::backend::device())
            .expect("a diverged run is a result");
        assert!(r.value.is_nan(), "value {}", r.value);
        assert_eq!((r.arm.as_str(), r.seed), ("sgd lr 1e30", 1));
        let _ = std::fs::remove_dir_all(dir);
    }
}
