//! `cargo xtask kill-test`: a short real training run of an example binary, killed with SIGKILL
//! at random moments and resumed with `--resume` after each kill, must end on the same bytes as
//! the same run never interrupted: the last checkpoint's weights (`model-E.mpk`) and the best
//! model the run saved. A resume that fails, or a file half-written and then loaded, shows as a
//! failed run or a difference.
//!
//! The kills fall uniformly over the run, and every write is held open 20 ms
//! (`NERVUS_WRITE_DELAY_MS`) between writing its temporary copy and renaming it into place, so
//! many kills land inside a checkpoint or a model write: the test counts those (a kill that
//! leaves a `.partial` file or a hidden working directory behind). Kills chain within one run, each resumed attempt killed again, until the
//! run finishes; the next kills start a new run.

use crate::cargo::cargo;
use anyhow::{Context, Result, bail};
use nervus_datasets::rng::Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Model {
    Gpt,
    Lm,
    Dit,
    Video,
}

#[derive(clap::Args)]
pub struct KillArgs {
    /// The example to train and kill.
    #[arg(long, value_enum, default_value = "gpt")]
    model: Model,
    /// Kills to land (each followed by a `--resume`).
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Seed of the kill moments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Working directory (emptied first).
    #[arg(long, default_value = "target/kill-test")]
    out: PathBuf,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The example's flags for a short run with many checkpoints, saving to `save`.
fn flags(model: Model, save: &str, out: &str) -> Vec<String> {
    let f = match model {
        Model::Gpt => "--steps 60 --eval-every 4 --eval-windows 32 --length 10",
        Model::Lm => "--size tiny --steps 80 --eval-every 4 --eval-batches 2 --batch 8 --length 5",
        Model::Dit => {
            "--layers 1 --d-model 32 --heads 2 --steps 40 --eval-every 4 --batch 16 --sample-steps 2"
        }
        Model::Video => {
            "--layers 2 --d-model 32 --heads 2 --steps 40 --eval-every 4 --batch 8 --eval-clips 4 \
             --sample-steps 2"
        }
    };
    let mut v: Vec<String> = f.split_whitespace().map(String::from).collect();
    v.extend(["--plain".into(), "--save".into(), save.into()]);
    let judge = match model {
        Model::Dit => Some("judge"),
        Model::Video => Some("panel/judge"),
        Model::Gpt | Model::Lm => None,
    };
    if let Some(judge) = judge {
        v.extend(["--out".into(), out.into(), "--judge".into(), judge.into()]);
    }
    v
}

fn example(model: Model) -> &'static str {
    match model {
        Model::Gpt => "gpt",
        Model::Lm => "lm",
        Model::Dit => "dit",
        Model::Video => "video",
    }
}

/// The weights of `file` (a learner checkpoint of the model saved in `run/model`), by name, read
/// as `--resume` reads them (`run::load_model_record`, shapes checked). Compared as weights, not bytes: a checkpoint file also records each parameter's id, which a
/// resumed process draws anew.
fn checkpoint_weights(model: Model, run: &Path, file: &Path) -> Result<Vec<(String, Vec<f32>)>> {
    use nervus_models::named::export;
    use nervus_training::run::load_model_record;
    type B = burn::backend::NdArray<f32>;
    let device = Default::default();
    let saved = run.join("model");
    let tensors = match model {
        Model::Gpt => export(&load_model_record(
            &nervus_training::gpt::load_dir::<B>(&saved, &device)?.0,
            file,
        )?),
        Model::Lm => export(&load_model_record(
            &nervus_training::lm::load_dir::<B>(&saved, &device)?.0,
            file,
        )?),
        Model::Dit => export(&load_model_record(
            &nervus_models::diffusers::load_transformer::<B>(&saved.join("transformer"), &device)?,
            file,
        )?),
        Model::Video => export(&load_model_record(
            &nervus_models::video_pipeline::load_pipeline::<B>(&saved, &device)?,
            file,
        )?),
    };
    Ok(tensors.into_iter().map(|t| (t.name, t.data)).collect())
}

/// What a finished run must have produced the same: the last checkpoint's weights and the saved
/// best model's files.
fn outcome(model: Model, run: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let ckpt = run.join("train/checkpoint");
    let last = std::fs::read_dir(&ckpt)
        .with_context(|| format!("reading {}", ckpt.display()))?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            n.strip_prefix("model-")?
                .strip_suffix(".mpk")?
                .parse::<usize>()
                .ok()
        })
        .max()
        .with_context(|| format!("no checkpoint in {}", ckpt.display()))?;
    let weights = checkpoint_weights(model, run, &ckpt.join(format!("model-{last}.mpk")))?;
    let mut out = vec![(
        format!("the weights of train/checkpoint/model-{last}.mpk"),
        weights
            .iter()
            .flat_map(|(n, v)| {
                n.bytes()
                    .chain(v.iter().flat_map(|x| x.to_le_bytes()))
                    .collect::<Vec<u8>>()
            })
            .collect(),
    )];
    let model_dir = run.join("model");
    let mut files: Vec<String> = std::fs::read_dir(&model_dir)
        .with_context(|| format!("reading {}", model_dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".safetensors") || n == "config.json")
        .map(|n| format!("model/{n}"))
        .collect();
    files.sort();
    // DiT pipelines keep the weights one level down.
    if model_dir
        .join("transformer/diffusion_pytorch_model.safetensors")
        .is_file()
    {
        files.push("model/transformer/diffusion_pytorch_model.safetensors".into());
    }
    for f in files {
        let bytes = std::fs::read(run.join(&f)).with_context(|| format!("reading {f}"))?;
        out.push((f, bytes));
    }
    Ok(out)
}

/// Whether a kill left a write half-done behind (a `.partial` file among the checkpoints, or a
/// hidden working copy beside the model).
fn inside_a_write(run: &Path) -> bool {
    let partial = |dir: &Path, pred: &dyn Fn(&str) -> bool| {
        std::fs::read_dir(dir).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_str().is_some_and(pred))
        })
    };
    partial(&run.join("train/checkpoint"), &|n| n.ends_with(".partial"))
        || partial(&run.join("train"), &|n| n.ends_with(".partial"))
        || partial(run, &|n| n.starts_with(".model."))
}

/// How long each write is held open (`NERVUS_WRITE_DELAY_MS`), so that kills land inside writes.
const WRITE_DELAY_MS: u64 = 20;

struct Launch<'a> {
    bin: &'a Path,
    model: Model,
    work: &'a Path,
}

impl Launch<'_> {
    fn command(&self, run: &str, resume: bool) -> Command {
        let mut c = Command::new(self.bin);
        c.current_dir(self.work)
            .args(flags(self.model, &format!("{run}/model"), run))
            .env("NERVUS_WRITE_DELAY_MS", WRITE_DELAY_MS.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if resume {
            c.arg("--resume");
        }
        c
    }
}

/// Builds example `name` and returns its binary. `--workspace`: the features of `cargo test
/// --release --workspace`, so the binaries that build made are used as they are (the root package
/// alone turns fewer features on, which rebuilt Burn and everything above it).
fn build_example(name: &str) -> Result<PathBuf> {
    let status = cargo()
        .current_dir(root())
        .args([
            "build",
            "--release",
            "--quiet",
            "--workspace",
            "--example",
            name,
        ])
        .status()?;
    if !status.success() {
        bail!("building the {name} example failed ({status})");
    }
    Ok(root().join("target/release/examples").join(name))
}

pub fn run(args: KillArgs) -> Result<()> {
    let name = example(args.model);
    let bin = build_example(name)?;
    let work = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root().join(&args.out)
    };
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let launch = Launch {
        bin: &bin,
        model: args.model,
        work: &work,
    };
    // One judge (a panel of one for the video DiT) for every run, trained once: the runs under
    // test train none. The video panel comes from a one-step run of its own.
    let judge: Option<(PathBuf, &str)> = match args.model {
        Model::Dit => Some((build_example("mnist")?, "--save judge --plain --epochs 2")),
        Model::Video => Some((
            bin.clone(),
            "--steps 1 --layers 1 --d-model 16 --heads 1 --eval-clips 1 --sample-steps 1 \
             --judges 1 --judge-clips 400 --judge-epochs 1 --plain --out panel --save panel/model",
        )),
        Model::Gpt | Model::Lm => None,
    };
    if let Some((program, flags)) = judge {
        let o = Command::new(program)
            .args(flags.split_whitespace())
            .current_dir(&work)
            .output()?;
        if !o.status.success() {
            bail!(
                "training the judge failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }

    // The uninterrupted run, timed to its first checkpoint and to its end.
    let started = Instant::now();
    let mut child = launch.command("whole", false).spawn()?;
    let first_ckpt = work.join("whole/train/checkpoint/model-1.mpk");
    let mut to_first = None;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if to_first.is_none() && first_ckpt.exists() {
            to_first = Some(started.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        bail!("the uninterrupted run failed: {err}");
    }
    let whole_secs = started.elapsed().as_secs_f64();
    // Kills before the first checkpoint test little: most fall after it.
    let setup = 0.8 * to_first.unwrap_or(0.0);
    let reference = outcome(args.model, &work.join("whole"))?;
    println!(
        "{name}: the uninterrupted run took {whole_secs:.1} s ({:.1} s to its first checkpoint); {} files to match",
        to_first.unwrap_or(f64::NAN),
        reference.len()
    );

    let mut rng = Rng::new(args.seed);
    let (mut landed, mut inside, mut chains, mut attempts) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    while landed < args.kills {
        chains += 1;
        let run = format!("killed-{chains}");
        let mut first = true;
        loop {
            attempts += 1;
            let mut child = launch.command(&run, !first).spawn()?;
            first = false;
            // Uniform over a span that makes the kills left cover about the whole run.
            let span = (2.0 * (whole_secs - setup) / (args.kills - landed).max(1) as f64).max(0.05);
            let delay = if landed < args.kills {
                Some(Duration::from_secs_f64(setup + rng.uniform() * span))
            } else {
                None
            };
            let finished = match delay {
                Some(d) => {
                    let until = Instant::now() + d;
                    loop {
                        if let Some(s) = child.try_wait()? {
                            break Some(s);
                        }
                        if Instant::now() >= until {
                            break None;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                None => Some(child.wait()?),
            };
            match finished {
                None => {
                    child.kill()?;
                    child.wait()?;
                    landed += 1;
                    if inside_a_write(&work.join(&run)) {
                        inside += 1;
                    }
                }
                Some(status) => {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    if !status.success() {
                        failures.push(format!("{run}: a resumed attempt failed ({status}): {err}"));
                    } else {
                        match outcome(args.model, &work.join(&run)) {
                            Ok(got) if got == reference => {}
                            Ok(got) => {
                                let differ: Vec<&str> = got
                                    .iter()
                                    .zip(&reference)
                                    .filter(|(a, b)| a != b)
                                    .map(|(a, _)| a.0.as_str())
                                    .collect();
                                failures.push(format!(
                                    "{run}: ended on other bytes than the uninterrupted run: {differ:?} ({} files against {})",
                                    got.len(),
                                    reference.len()
                                ));
                            }
                            Err(e) => failures.push(format!("{run}: {e:#}")),
                        }
                    }
                    break;
                }
            }
        }
    }
    println!(
        "{name}: {landed} kills in {chains} runs ({attempts} launches), {inside} inside a write; \
         {} of {chains} runs ended on the uninterrupted run's bytes",
        chains - failures.len()
    );
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}
