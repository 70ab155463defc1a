//! `cargo xtask reproduce-tables` and `cargo xtask preregister`.
//!
//! Specs live in `docs/experiments/*.json`; the registry of their hashes in
//! `docs/experiments/registry.json`. Each (spec, arm, seed) runs in a child process of this tool
//! (Burn draws initial weights from a process-wide generator, so a process per run keeps runs
//! reproducible whatever runs beside them), up to `--jobs` at a time, and its result is cached
//! under `<cache>/<spec>-<hash>/` (`--cache`, by default `target/experiments`), so a killed run
//! picks up where it stopped. Throughput specs run alone, their arms interleaved, after
//! everything else.

use anyhow::{Context, Result, bail};
use nervus_inference::chart::{ChartText, Series, line_chart};
use nervus_training::experiment::{Kind, Ref, Rule, RunResult, Spec, Stats, Verdict, decide};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

const SPECS: &str = "docs/experiments";
const REGISTRY: &str = "docs/experiments/registry.json";
const TABLES: &str = "docs/tables";

#[derive(clap::Args)]
pub struct TablesArgs {
    /// A miniature of every experiment (two seeds, a few steps) into target/tables-quick/: proves
    /// the machinery works; README and docs/ are not touched.
    #[arg(long)]
    quick: bool,
    /// Run one experiment (its name, e.g. `schedules`).
    #[arg(long)]
    only: Option<String>,
    /// Runs at a time (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Where each run's result is kept, one folder per spec and hash. A run already there is
    /// not run again. The results behind the README's tables are committed in
    /// docs/experiments/runs: `--cache docs/experiments/runs` renders the tables from them, or
    /// finishes a full run in pieces across checkouts.
    #[arg(long, default_value = "target/experiments")]
    cache: PathBuf,
}

#[derive(clap::Args)]
pub struct RegisterArgs {
    /// The experiment's name.
    name: String,
    /// Register again after the spec changed (the old hash is kept in the entry's history).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub struct RunOneArgs {
    #[arg(long)]
    spec: PathBuf,
    #[arg(long)]
    arm: String,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Entry {
    file: String,
    sha256: String,
    registered_at: String,
    #[serde(default)]
    history: Vec<String>,
}

fn now() -> String {
    nervus_datasets::crawl::manifest::rfc3339(SystemTime::now())
}

fn load_specs() -> Result<Vec<(PathBuf, String, Spec)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(SPECS)
        .with_context(|| format!("reading {SPECS}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.ends_with("registry.json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let spec: Spec = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a valid spec", p.display()))?;
            let hash = nervus_datasets::download::sha256_hex(text.as_bytes());
            Ok((p, hash, spec))
        })
        .collect()
}

fn registry() -> Result<BTreeMap<String, Entry>> {
    match std::fs::read_to_string(REGISTRY) {
        Ok(t) => serde_json::from_str(&t).with_context(|| format!("{REGISTRY} is not valid")),
        Err(_) => Ok(BTreeMap::new()),
    }
}

pub fn preregister(args: RegisterArgs) -> Result<()> {
    let specs = load_specs()?;
    let Some((path, hash, spec)) = specs.iter().find(|(_, _, s)| s.name == args.name) else {
        bail!("no spec named `{}` in {SPECS}", args.name);
    };
    let mut reg = registry()?;
    if let Some(old) = reg.get(&spec.name) {
        if &old.sha256 == hash {
            println!(
                "{} is already registered with this hash ({})",
                spec.name, old.registered_at
            );
            return Ok(());
        }
        if !args.force {
            bail!(
                "{} was registered at {} with hash {} and has changed since; a verdict on a moved \
                 spec is not a pre-registered one (use --force to register the new version, which \
                 keeps the old hash in its history)",
                spec.name,
                old.registered_at,
                old.sha256
            );
        }
    }
    let mut entry = reg.remove(&spec.name).unwrap_or_default();
    if !entry.sha256.is_empty() {
        entry
            .history
            .push(format!("{} {}", entry.registered_at, entry.sha256));
    }
    entry.file = path.display().to_string();
    entry.sha256 = hash.clone();
    entry.registered_at = now();
    reg.insert(spec.name.clone(), entry);
    nervus_models::checkpoint::write_json(Path::new(REGISTRY), &reg)?;
    println!(
        "registered {} ({hash}) at {}",
        spec.name, reg[&spec.name].registered_at
    );
    Ok(())
}

/// The child process: one run, its result written atomically to `out`.
pub fn run_one(args: RunOneArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.spec)?;
    let mut spec: Spec = serde_json::from_str(&text)?;
    if args.quick {
        spec = spec.quick();
    }
    let arm = spec
        .arms
        .iter()
        .find(|a| a.name == args.arm)
        .with_context(|| format!("no arm `{}`", args.arm))?
        .clone();
    let run_dir = args.out.with_extension("run");
    let result = nervus_training::experiment::run::<nervus_training::backend::Train>(
        &spec,
        &arm,
        args.seed,
        run_dir.clone(),
        &nervus_training::backend::device(),
    )
    .map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_dir_all(run_dir);
    nervus_models::checkpoint::write_json(&args.out, &result)?;
    Ok(())
}

struct Pending {
    spec_path: PathBuf,
    spec: String,
    kind: Kind,
    arm: String,
    seed: u64,
    out: PathBuf,
    estimate: f64,
}

fn cache_dir(root: &Path, spec: &Spec, hash: &str, quick: bool) -> PathBuf {
    let suffix = if quick { "-quick" } else { "" };
    root.join(format!("{}-{}{suffix}", spec.name, &hash[..12]))
}

fn result_path(dir: &Path, arm: &str, seed: u64) -> PathBuf {
    let safe: String = arm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{safe}--s{seed}.json"))
}

/// Seconds one run is expected to take, before anything has been measured.
fn estimate(spec: &Spec, arm: &nervus_training::experiment::Arm) -> f64 {
    let steps = spec.steps_of(arm) as f64;
    match spec.kind {
        // Small preset: ~0.05 s a step on two cores, plus the evaluations.
        Kind::Gpt => steps * 0.05 + 3.0 * (steps / spec.eval_every.unwrap_or(250) as f64).ceil(),
        Kind::Mlp => steps * 0.35 + 1.0,
        Kind::Lm => steps * 0.12 + 4.0 * (steps / spec.eval_every.unwrap_or(100) as f64).ceil(),
        Kind::Throughput => match arm.settings.size.as_deref() {
            Some("large") => steps * 7.0,
            Some("medium") => steps * 1.0,
            _ => steps * 0.06,
        },
    }
}

/// The step count a table's header states: the spec's own, or each arm's where the arms set
/// their own (the presets time fewer steps of the larger models).
fn steps_phrase(spec: &Spec) -> String {
    let arm_steps: Vec<(&str, usize)> = spec
        .arms
        .iter()
        .map(|a| (a.name.as_str(), spec.steps_of(a)))
        .collect();
    if arm_steps.iter().all(|(_, n)| *n == spec.steps) {
        spec.steps.to_string()
    } else {
        let each: Vec<String> = arm_steps.iter().map(|(a, n)| format!("{a} {n}")).collect();
        format!("per arm ({})", each.join(", "))
    }
}

fn spawn(p: &Pending, quick: bool, threads: usize) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let mut c = Command::new(exe);
    c.args(["run-one", "--spec"])
        .arg(&p.spec_path)
        .args(["--arm", &p.arm, "--seed", &p.seed.to_string(), "--out"])
        .arg(&p.out)
        .env("RAYON_NUM_THREADS", threads.to_string());
    if quick {
        c.arg("--quick");
    }
    Ok(c.spawn()?)
}

fn execute(pending: Vec<Pending>, jobs: usize, quick: bool) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (timed, mut parallel): (Vec<Pending>, Vec<Pending>) = pending
        .into_iter()
        .partition(|p| p.kind == Kind::Throughput);
    let total = parallel.len() + timed.len();
    let mut done = 0;
    let started = Instant::now();
    parallel.reverse();
    let mut running: Vec<(Pending, Child, Instant)> = Vec::new();
    let report = |p: &Pending, t: Instant, ok: bool, done: usize| {
        let value = std::fs::read_to_string(&p.out)
            .ok()
            .and_then(|s| serde_json::from_str::<RunResult>(&s).ok())
            .map_or("failed".to_string(), |r| format!("{:.4}", r.value));
        println!(
            "  [{done}/{total}] {} | {} | seed {}: {value} ({:.0} s){}",
            p.spec,
            p.arm,
            p.seed,
            t.elapsed().as_secs_f64(),
            if ok { "" } else { "  FAILED" }
        );
    };
    let threads = (cores / jobs.max(1)).max(1);
    while !parallel.is_empty() || !running.is_empty() {
        while running.len() < jobs.max(1)
            && let Some(p) = parallel.pop()
        {
            let child = spawn(&p, quick, threads)?;
            running.push((p, child, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut i = 0;
        while i < running.len() {
            if let Some(status) = running[i].1.try_wait()? {
                let (p, _, t) = running.remove(i);
                done += 1;
                report(&p, t, status.success(), done);
            } else {
                i += 1;
            }
        }
    }
    // Timed runs alone, so they measure the machine and not each other.
    for p in timed {
        let t = Instant::now();
        let status = spawn(&p, quick, cores)?.wait()?;
        done += 1;
        report(&p, t, status.success(), done);
    }
    if total > 0 {
        println!(
            "{total} runs in {}",
            nervus_training::report::duration(started.elapsed().as_secs_f64())
        );
    }
    Ok(())
}

fn fmt_value(spec: &Spec, v: f64) -> String {
    if !v.is_finite() {
        return "diverged".into();
    }
    match spec.kind {
        Kind::Gpt | Kind::Lm => format!("{v:.3}"),
        Kind::Mlp => format!("{:.2}%", v * 100.0),
        Kind::Throughput => format!("{v:.0}"),
    }
}

fn fmt_diff(spec: &Spec, v: f64) -> String {
    match spec.kind {
        Kind::Mlp => format!("{:.2} pt", v * 100.0),
        Kind::Throughput => format!("{v:.0}"),
        Kind::Gpt | Kind::Lm => format!("{v:.3}"),
    }
}

struct Table {
    markdown: String,
    verdicts: Vec<(String, Verdict, String)>,
}

fn build_table(
    spec: &Spec,
    results: &[RunResult],
    registered: Option<&Entry>,
    hash: &str,
    quick: bool,
    plot: Option<&Path>,
) -> Result<Table> {
    let by_arm = |arm: &str| -> Vec<&RunResult> {
        let mut v: Vec<&RunResult> = results.iter().filter(|r| r.arm == arm).collect();
        v.sort_by_key(|r| r.seed);
        v
    };
    let stats = |arm: &str| -> Option<Stats> {
        let v: Vec<f64> = by_arm(arm).iter().map(|r| r.value).collect();
        (!v.is_empty()).then(|| Stats::of(&v))
    };
    let mut md = String::new();
    let direction = if spec.higher_is_better() {
        "higher is better"
    } else {
        "lower is better"
    };
    let steps = steps_phrase(spec);
    writeln!(md, "**{}**", spec.title)?;
    writeln!(md)?;
    writeln!(
        md,
        "{} Metric: {} ({direction}), {steps} {}, seeds {:?}, backend {}.",
        spec.question,
        spec.metric(),
        match spec.kind {
            Kind::Gpt => "steps on the small GPT (Shakespeare, vendored), batch 16",
            Kind::Mlp => "epochs of the MNIST MLP (vendored 10k subset), batch 32",
            Kind::Throughput => "timed steps a repetition, batch 16, repetitions interleaved",
            Kind::Lm =>
                "steps of the modern LM (3 blocks, width 96, context 64, 1024-token BPE on the vendored Austen), batch 16, evaluation on 20 fixed held-out batches",
        },
        spec.seeds,
        nervus_training::backend::NAME
    )?;
    writeln!(md)?;
    if spec.kind == Kind::Throughput {
        writeln!(
            md,
            "| arm | parameters | median | spread (min–max) | ratio to the group's first arm | 2000 steps would take |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|")?;
        let mut first: BTreeMap<String, f64> = BTreeMap::new();
        for arm in &spec.arms {
            let v: Vec<f64> = by_arm(&arm.name).iter().map(|r| r.value).collect();
            if v.is_empty() {
                continue;
            }
            let med = nervus_training::bench::median(&v);
            let group = arm.group.clone().unwrap_or_default();
            let base = *first.entry(group).or_insert(med);
            let size =
                nervus_models::gpt::GptSize::parse(arm.settings.size.as_deref().unwrap_or("small"))
                    .unwrap_or(nervus_models::gpt::GptSize::Small);
            let config = size.config(64);
            let chars = 2000.0 * 16.0 * config.context as f64;
            let s = Stats::of(&v);
            writeln!(
                md,
                "| {} | {} | {med:.0} | {:.0}–{:.0} | {:.3} | {} |",
                arm.name,
                config.num_params(),
                s.min,
                s.max,
                med / base,
                nervus_training::report::duration(chars / med)
            )?;
        }
        return Ok(Table {
            markdown: md,
            verdicts: Vec::new(),
        });
    }
    writeln!(md, "| arm | mean | spread (max − min) | sd | per seed |")?;
    writeln!(md, "|---|---|---|---|---|")?;
    for arm in &spec.arms {
        let rs = by_arm(&arm.name);
        if rs.is_empty() {
            writeln!(md, "| {} | (no results) | | | |", arm.name)?;
            continue;
        }
        let s = stats(&arm.name).expect("results");
        let seeds: Vec<String> = rs.iter().map(|r| fmt_value(spec, r.value)).collect();
        let diverged = rs.iter().filter(|r| !r.value.is_finite()).count();
        let (spread, sd) = if diverged > 0 {
            (
                format!("{diverged} of {} diverged", rs.len()),
                String::new(),
            )
        } else {
            (fmt_diff(spec, s.spread), fmt_diff(spec, s.sd))
        };
        writeln!(
            md,
            "| {} | {} | {spread} | {sd} | {} |",
            arm.name,
            fmt_value(spec, s.mean),
            seeds.join(" ")
        )?;
    }
    let mut verdicts = Vec::new();
    if !spec.rules.is_empty() {
        writeln!(md)?;
        for rule in &spec.rules {
            let (mut v, text) = decide(spec, rule, &stats);
            let rule_text = match rule {
                Rule::Beats {
                    control,
                    better,
                    by,
                } => format!("{} beats {} by at least {by}", name(better), name(control)),
                Rule::SpreadGrows { control, wider, by } => {
                    format!(
                        "the seed spread of {} exceeds that of {} by at least {by}",
                        name(wider),
                        name(control)
                    )
                }
            };
            match registered {
                Some(e) if e.sha256 == hash => {}
                Some(e) => {
                    v = Verdict::NotRegistered(format!(
                        "spec changed since it was registered at {}",
                        e.registered_at
                    ))
                }
                None => v = Verdict::NotRegistered("spec not registered".into()),
            }
            let label = match &v {
                Verdict::Pass => "**pass**".to_string(),
                Verdict::Fail => "**fail**".to_string(),
                Verdict::InsideTheNoise => "**inside the noise**".to_string(),
                Verdict::NotRegistered(why) => format!("**no verdict** ({why})"),
            };
            let quick_note = if quick {
                " (quick miniature: not evidence)"
            } else {
                ""
            };
            writeln!(
                md,
                "- Registered rule: {rule_text}. Measured: {text}. Verdict: {label}{quick_note}."
            )?;
            verdicts.push((rule_text, v, text));
        }
    }
    if let Some(path) = plot
        && plot_spec(spec, results, path)?
    {
        writeln!(md)?;
        writeln!(
            md,
            "![{}]({})",
            spec.title,
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        )?;
    }
    Ok(Table {
        markdown: md,
        verdicts,
    })
}

fn name(r: &Ref) -> String {
    match r {
        Ref::Arm(a) => format!("`{a}`"),
        Ref::BestOf(g) => format!("the best of `{g}`"),
    }
}

/// A chart for the spec: final metric against the swept value per group when arms carry `x`,
/// else the validation curves. Returns whether one was drawn.
fn plot_spec(spec: &Spec, results: &[RunResult], path: &Path) -> Result<bool> {
    let values =
        |arm: &str| -> Vec<&RunResult> { results.iter().filter(|r| r.arm == arm).collect() };
    let y_label = spec.metric().to_string();
    if let Some(plot) = &spec.plot {
        let mut groups: Vec<String> = Vec::new();
        for a in &spec.arms {
            if let (Some(g), Some(_)) = (&a.group, a.x)
                && !groups.contains(g)
            {
                groups.push(g.clone());
            }
        }
        let series: Vec<Series> = groups
            .iter()
            .map(|g| {
                let mut s = Series {
                    name: g.clone(),
                    ..Default::default()
                };
                for a in spec.arms.iter().filter(|a| a.group.as_ref() == Some(g)) {
                    let (Some(x), v) = (a.x, values(&a.name)) else {
                        continue;
                    };
                    let v: Vec<f64> = v
                        .iter()
                        .map(|r| r.value)
                        .filter(|v| v.is_finite())
                        .collect();
                    if v.is_empty() {
                        continue;
                    }
                    let st = Stats::of(&v);
                    s.points.push((x, st.mean));
                    s.band.push((x, st.min, st.max));
                }
                s
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let text = ChartText {
            title: format!(
                "{}: final {} (band: min–max over seeds; diverged runs left out)",
                spec.name,
                spec.metric()
            ),
            x: plot.x.clone(),
            y: y_label,
            log_x: plot.log,
        };
        line_chart(path, &text, &series).map_err(anyhow::Error::msg)?;
        return Ok(true);
    }
    if matches!(spec.kind, Kind::Gpt | Kind::Lm) {
        let series: Vec<Series> = spec
            .arms
            .iter()
            .map(|a| {
                let rs = values(&a.name);
                let mut s = Series {
                    name: a.name.clone(),
                    ..Default::default()
                };
                let steps: Vec<usize> = rs
                    .first()
                    .map(|r| r.curve.iter().map(|c| c.0).collect())
                    .unwrap_or_default();
                for (k, step) in steps.iter().enumerate() {
                    let v: Vec<f64> = rs
                        .iter()
                        .filter_map(|r| r.curve.get(k).map(|c| c.1))
                        .filter(|v| v.is_finite())
                        .collect();
                    if v.is_empty() {
                        continue;
                    }
                    let st = Stats::of(&v);
                    s.points.push((*step as f64, st.mean));
                    s.band.push((*step as f64, st.min, st.max));
                }
                s
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            return Ok(false);
        }
        let text = ChartText {
            title: format!(
                "{}: validation loss during training (band: min–max over seeds)",
                spec.name
            ),
            x: "step".into(),
            y: y_label,
            log_x: false,
        };
        line_chart(path, &text, &series).map_err(anyhow::Error::msg)?;
        return Ok(true);
    }
    Ok(false)
}

/// `text` with what stands between `<!-- {kind}:{name} -->` and `<!-- /{kind}:{name} -->`
/// replaced by `body`; `None` if the markers are missing.
pub fn replace_between(text: &str, kind: &str, name: &str, body: &str) -> Option<String> {
    let open = format!("<!-- {kind}:{name} -->");
    let close = format!("<!-- /{kind}:{name} -->");
    let a = text.find(&open)? + open.len();
    let b = text[a..].find(&close)? + a;
    Some(format!(
        "{}\n{}\n{}",
        &text[..a],
        body.trim_end(),
        &text[b..]
    ))
}

/// The pages that hold marked blocks (`<!-- kind:name -->`) the xtask commands rewrite.
pub const MARKED_PAGES: [&str; 4] = [
    "README.md",
    "docs/experiments.md",
    "docs/witness-system.md",
    "docs/retrieval.md",
];

/// Writes `body` between the `kind:name` markers of every page in [`MARKED_PAGES`] that has them;
/// false when none has.
pub fn write_marked(kind: &str, name: &str, body: &str) -> Result<bool> {
    let mut found = false;
    for page in MARKED_PAGES {
        let Ok(text) = std::fs::read_to_string(page) else {
            continue;
        };
        if let Some(new) = replace_between(&text, kind, name, body) {
            std::fs::write(page, new).with_context(|| format!("writing {page}"))?;
            found = true;
        }
    }
    Ok(found)
}

pub fn reproduce(args: TablesArgs) -> Result<()> {
    let started = Instant::now();
    let specs: Vec<_> = load_specs()?
        .into_iter()
        .filter(|(_, _, s)| args.only.as_ref().is_none_or(|o| &s.name == o))
        .collect();
    if specs.is_empty() {
        bail!("no spec matches {:?}", args.only);
    }
    let reg = registry()?;
    let mut pending = Vec::new();
    let mut cached = 0;
    for (path, hash, spec) in &specs {
        let spec_q = if args.quick {
            spec.quick()
        } else {
            spec.clone()
        };
        let dir = cache_dir(&args.cache, spec, hash, args.quick);
        std::fs::create_dir_all(&dir)?;
        // Timed runs interleave their arms: seed-major order.
        for seed in &spec_q.seeds {
            for arm in &spec_q.arms {
                let out = result_path(&dir, &arm.name, *seed);
                if out.exists() {
                    cached += 1;
                    continue;
                }
                pending.push(Pending {
                    spec_path: path.clone(),
                    spec: spec.name.clone(),
                    kind: spec.kind.clone(),
                    arm: arm.name.clone(),
                    seed: *seed,
                    out,
                    estimate: estimate(&spec_q, arm),
                });
            }
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = args.jobs.unwrap_or(cores).max(1);
    let seconds: f64 = pending
        .iter()
        .map(|p| {
            if p.kind == Kind::Throughput {
                p.estimate
            } else {
                p.estimate / jobs as f64
            }
        })
        // A fold from +0, since an empty f64 sum is −0 and would print as "-0.0s".
        .fold(0.0, |a, b| a + b);
    println!(
        "{} experiment(s): {} runs to do, {cached} already cached; expected duration about {} ({jobs} at a time on {cores} cores){}",
        specs.len(),
        pending.len(),
        nervus_training::report::duration(seconds),
        if args.quick { ", quick miniature" } else { "" }
    );
    execute(pending, jobs, args.quick)?;

    let out_dir = if args.quick {
        PathBuf::from("target/tables-quick")
    } else {
        PathBuf::from(TABLES)
    };
    std::fs::create_dir_all(&out_dir)?;
    let mut all_verdicts = Vec::new();
    for (_, hash, spec) in &specs {
        let spec_q = if args.quick {
            spec.quick()
        } else {
            spec.clone()
        };
        let dir = cache_dir(&args.cache, spec, hash, args.quick);
        let mut results = Vec::new();
        for seed in &spec_q.seeds {
            for arm in &spec_q.arms {
                let p = result_path(&dir, &arm.name, *seed);
                match std::fs::read_to_string(&p) {
                    Ok(t) => results.push(
                        serde_json::from_str::<RunResult>(&t)
                            .with_context(|| format!("{}", p.display()))?,
                    ),
                    Err(_) => println!("  missing result {} (the run failed)", p.display()),
                }
            }
        }
        let plot = out_dir.join(format!("{}.png", spec.name));
        let table = build_table(
            &spec_q,
            &results,
            reg.get(&spec.name),
            hash,
            args.quick,
            Some(&plot),
        )?;
        std::fs::write(out_dir.join(format!("{}.md", spec.name)), &table.markdown)?;
        if !args.quick {
            // docs/experiments.md holds the markers; its pictures are in docs/tables/.
            let body = table.markdown.replace(
                &format!("]({}.png)", spec.name),
                &format!("](tables/{}.png)", spec.name),
            );
            if !write_marked("table", &spec.name, &body)? {
                println!(
                    "  no page has markers for {} (<!-- table:{0} -->): table only in {TABLES}/",
                    spec.name
                );
            }
        }
        for (rule, v, text) in table.verdicts {
            all_verdicts.push(format!("{}: {rule}: {v:?} ({text})", spec.name));
        }
    }
    println!("verdicts:");
    for v in &all_verdicts {
        println!("  {v}");
    }
    println!(
        "tables and plots in {} ({} in all)",
        out_dir.display(),
        nervus_training::report::duration(started.elapsed().as_secs_f64())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> Spec {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/experiments")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).expect("spec")).expect("parse")
    }

    /// The presets set their own timed steps per arm, and the header says so rather than the
    /// spec's unused default; a spec whose arms keep the default states that one number.
    #[test]
    fn the_header_states_each_arms_steps_where_they_differ() {
        assert_eq!(
            steps_phrase(&spec("8-presets.json")),
            "per arm (small 40, medium 12, large 4)"
        );
        assert_eq!(steps_phrase(&spec("7-default-length.json")), "2000");
    }
}
