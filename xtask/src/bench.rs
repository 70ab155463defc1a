//! `cargo xtask bench <what>`.

use crate::measure::{spread, threads};
use anyhow::{Result, bail};
use nervus_training::bench::{matmul_gflops, median, mlp_steps_per_sec};
use std::fmt::Write;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// What to measure: `backends` (ndarray against flex: 1024² matmul and an MLP training step),
    /// `gpt` (training characters a second per preset and backend), `dit` (training images a
    /// second per backend), `video` (training steps a second, factorised against full attention),
    /// `allocator` (each model's training rate with the system's allocator and with mimalloc, each
    /// measurement a fresh process), `pytorch` (GPT small, GPT large and the digits DiT against
    /// PyTorch eager on the same shapes and threads, alternating), `generate` (the engine's
    /// generation on a 124M GPT-2 against transformers' `generate`, f32 and int8), `q8` (a
    /// model's perplexity on held-out text with f32 and with int8 weights).
    what: String,
    /// Interleaved rounds; medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Timed steps per run (model benchmarks); the default suits each model.
    #[arg(long)]
    steps: Option<usize>,
    /// Clips per step (`video`).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Threads each batch is cut across, one measurement per value (`video`, `dit`): e.g. `1,2`
    /// compares the model's own step with two parts run side by side.
    #[arg(long, value_delimiter = ',', default_values_t = [nervus_training::backend::PARTS])]
    parts: Vec<usize>,
    /// The Python that has torch and diffusers (`pytorch`); `none` measures this project alone.
    #[arg(long, default_value = "python3")]
    python: String,
    /// The model directory (`q8`).
    #[arg(long)]
    model: Option<std::path::PathBuf>,
    /// The text whose last tenth is held out (`q8`).
    #[arg(long)]
    text: Option<std::path::PathBuf>,
    /// Only these workloads (`pytorch`): gpt-small, gpt-large, dit.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

type NdArray = burn::backend::NdArray<f32>;
type Flex = burn::backend::Flex;

pub fn run(args: BenchArgs) -> Result<()> {
    match args.what.as_str() {
        "backends" => backends(args.rounds),
        "gpt" => gpt(args.rounds, args.steps, args.parts[0]),
        "dit" => dit(args.rounds, args.steps, &args.parts),
        "video" => video(args.rounds, args.steps, args.batch, &args.parts),
        "allocator" => allocator(args.rounds),
        "generate" => crate::bench_generate::run(args.rounds, &args.python).map(|_| ()),
        "q8" => match (&args.model, &args.text) {
            (Some(m), Some(t)) => crate::bench_generate::q8_quality(m, t).map(|_| ()),
            _ => bail!("bench q8 needs --model DIR and --text FILE"),
        },
        "pytorch" => crate::bench_pytorch::run(
            args.rounds,
            args.steps,
            &args.python,
            &args.only,
            args.parts[0],
        ),
        probe if probe.starts_with(PROBE) => {
            let rate = probe_rate(&probe[PROBE.len()..])?;
            println!("{rate} {}", nervus_training::alloc::name());
            Ok(())
        }
        other => {
            bail!("unknown benchmark `{other}`: try backends, gpt, dit, video, allocator, pytorch")
        }
    }
}

fn backends(rounds: usize) -> Result<()> {
    println!(
        "ndarray vs flex on {} threads, {rounds} interleaved rounds, medians",
        threads()
    );
    let (mut mm_nd, mut mm_fx, mut st_nd, mut st_fx) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        mm_nd.push(matmul_gflops::<NdArray>(1024, 10, &Default::default()));
        mm_fx.push(matmul_gflops::<Flex>(1024, 10, &Default::default()));
        st_nd.push(mlp_steps_per_sec::<burn::backend::Autodiff<NdArray>>(
            32,
            400,
            &Default::default(),
        ));
        st_fx.push(mlp_steps_per_sec::<burn::backend::Autodiff<Flex>>(
            32,
            400,
            &Default::default(),
        ));
        eprintln!("  round {}/{rounds} done", r + 1);
    }
    let mut t = String::new();
    writeln!(t, "| measurement | ndarray | flex | flex / ndarray |")?;
    writeln!(t, "|---|---|---|---|")?;
    let (a, b) = (median(&mm_nd), median(&mm_fx));
    writeln!(
        t,
        "| 1024² f32 matmul, GFLOP/s | {a:.1} | {b:.1} | {:.2} |",
        b / a
    )?;
    let (a, b) = (median(&st_nd), median(&st_fx));
    writeln!(
        t,
        "| MLP 784-128-10 training step, batch 32, steps/s | {a:.0} | {b:.0} | {:.2} |",
        b / a
    )?;
    print!("{t}");
    Ok(())
}

/// The backend the GPU feature selected, if one did.
fn gpu_name() -> Option<&'static str> {
    matches!(nervus_training::backend::NAME, "wgpu" | "cuda")
        .then_some(nervus_training::backend::NAME)
}

fn gpt(rounds: usize, steps: Option<usize>, parts: usize) -> Result<()> {
    use nervus_models::gpt::GptSize;
    use nervus_training::bench::gpt_chars_per_sec;
    // Shakespeare's 64 characters; batch 16 (the example's default).
    let sizes = [GptSize::Small, GptSize::Medium, GptSize::Large];
    let mut names = vec!["ndarray", "flex"];
    names.extend(gpu_name());
    println!(
        "GPT training throughput (characters a second), batch 16 cut across {parts} thread(s), clip 1.0, {} threads, {rounds} interleaved rounds, medians",
        threads()
    );
    let mut table = String::new();
    writeln!(
        table,
        "| preset | parameters | {} | flex / ndarray |",
        names.join(" | ")
    )?;
    writeln!(table, "|---|---|{}---|", "---|".repeat(names.len()))?;
    for size in sizes {
        let config = size.config(64);
        let n = steps.unwrap_or(match size {
            GptSize::Small => 30,
            GptSize::Medium => 10,
            GptSize::Large => 3,
        });
        let mut results = vec![Vec::new(); names.len()];
        for _ in 0..rounds {
            results[0].push(gpt_chars_per_sec::<burn::backend::Autodiff<NdArray>>(
                &config,
                16,
                parts,
                n,
                Some(1.0),
                &Default::default(),
            ));
            results[1].push(gpt_chars_per_sec::<burn::backend::Autodiff<Flex>>(
                &config,
                16,
                parts,
                n,
                Some(1.0),
                &Default::default(),
            ));
            if names.len() > 2 {
                results[2].push(gpt_chars_per_sec::<nervus_training::backend::Train>(
                    &config,
                    16,
                    parts,
                    n,
                    Some(1.0),
                    &nervus_training::backend::device(),
                ));
            }
        }
        let cells: Vec<String> = results
            .iter()
            .map(|r| format!("{:.0}", median(r)))
            .collect();
        writeln!(
            table,
            "| {size:?} | {} | {} | {:.2} |",
            config.num_params(),
            cells.join(" | "),
            median(&results[1]) / median(&results[0])
        )?;
        eprintln!("  {size:?} done");
    }
    print!("{table}");
    Ok(())
}

fn dit(rounds: usize, steps: Option<usize>, parts: &[usize]) -> Result<()> {
    use nervus_training::bench::dit_images_per_sec;
    let config = nervus_models::dit::DitConfig::digits();
    let n = steps.unwrap_or(10);
    let mut names = vec!["ndarray", "flex"];
    names.extend(gpu_name());
    println!(
        "DiT training throughput (images a second), the digits preset, batch 64 cut across {parts:?} threads, {} threads, {rounds} interleaved rounds of {n} steps, medians",
        threads()
    );
    // results[p][backend]: one list of rates per round.
    let mut results = vec![vec![Vec::new(); names.len()]; parts.len()];
    for r in 0..rounds {
        for (pi, &p) in parts.iter().enumerate() {
            results[pi][0].push(dit_images_per_sec::<burn::backend::Autodiff<NdArray>>(
                &config,
                64,
                p,
                n,
                &Default::default(),
            ));
            results[pi][1].push(dit_images_per_sec::<burn::backend::Autodiff<Flex>>(
                &config,
                64,
                p,
                n,
                &Default::default(),
            ));
            if names.len() > 2 {
                results[pi][2].push(dit_images_per_sec::<nervus_training::backend::Train>(
                    &config,
                    64,
                    p,
                    n,
                    &nervus_training::backend::device(),
                ));
            }
        }
        eprintln!("  round {}/{rounds} done", r + 1);
    }
    let mut t = String::new();
    writeln!(
        t,
        "| model | parts | {} | flex / ndarray |",
        names.join(" | ")
    )?;
    writeln!(t, "|---|---|{}---|", "---|".repeat(names.len()))?;
    for (pi, &p) in parts.iter().enumerate() {
        let cells: Vec<String> = results[pi]
            .iter()
            .map(|r| format!("{:.1}", median(r)))
            .collect();
        writeln!(
            t,
            "| DiT digits ({} tokens) | {p} | {} | {:.2} |",
            config.tokens(),
            cells.join(" | "),
            median(&results[pi][1]) / median(&results[pi][0])
        )?;
    }
    for (pi, &p) in parts.iter().enumerate().skip(1) {
        for (bi, name) in names.iter().enumerate() {
            let (lo, hi) = spread(&results[pi][bi], &results[0][bi]);
            writeln!(
                t,
                "\n{name}: {p} parts / {} part(s): {:.2}× by the medians; {lo:.2}× to {hi:.2}× within rounds",
                parts[0],
                median(&results[pi][bi]) / median(&results[0][bi])
            )?;
        }
    }
    print!("{t}");
    Ok(())
}

fn video(rounds: usize, steps: Option<usize>, batch: usize, parts: &[usize]) -> Result<()> {
    use nervus_models::video_dit::{Attention, VideoDitConfig};
    use nervus_training::backend::{Train, device};
    use nervus_training::bench::video_steps_per_sec;
    let n = steps.unwrap_or(5);
    let fact = VideoDitConfig::new();
    let full = VideoDitConfig::new().with_attention(Attention::Full);
    println!(
        "video DiT training steps a second, {} frames × {} patches = {} tokens, batch {batch} cut across {parts:?} threads, backend {}, {} threads, {rounds} interleaved rounds of {n} steps, medians",
        fact.frames,
        fact.patches(),
        fact.frames * fact.patches(),
        nervus_training::backend::NAME,
        threads()
    );
    // rates[p] = (factorised, full), one entry per round.
    let mut rates = vec![(Vec::new(), Vec::new()); parts.len()];
    for r in 0..rounds {
        let mut line = Vec::new();
        for (pi, &p) in parts.iter().enumerate() {
            let x = video_steps_per_sec::<Train>(&fact, batch, p, n, &device());
            let y = video_steps_per_sec::<Train>(&full, batch, p, n, &device());
            line.push(format!("{p} part(s): factorised {x:.3}, full {y:.3}"));
            rates[pi].0.push(x);
            rates[pi].1.push(y);
        }
        eprintln!("  round {}/{rounds}: {} steps/s", r + 1, line.join("; "));
    }
    let mut t = String::new();
    writeln!(
        t,
        "| attention | parts | steps/s (median) | clips/s | within rounds |\n|---|---|---|---|---|"
    )?;
    for (name, pick) in [("factorised", 0), ("full", 1)] {
        for (pi, &p) in parts.iter().enumerate() {
            let v = if pick == 0 {
                &rates[pi].0
            } else {
                &rates[pi].1
            };
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
            writeln!(
                t,
                "| {name} | {p} | {:.3} | {:.1} | {lo:.3}–{hi:.3} |",
                median(v),
                median(v) * batch as f64
            )?;
        }
    }
    for (pi, &p) in parts.iter().enumerate() {
        let (f, u) = &rates[pi];
        let (lo, hi) = spread(f, u);
        writeln!(
            t,
            "\n{p} part(s): factorised / full {:.2}× by the medians; {lo:.2}× to {hi:.2}× within rounds",
            median(f) / median(u)
        )?;
    }
    for (pi, &p) in parts.iter().enumerate().skip(1) {
        for (name, a, b) in [
            ("factorised", &rates[pi].0, &rates[0].0),
            ("full", &rates[pi].1, &rates[0].1),
        ] {
            let (lo, hi) = spread(a, b);
            writeln!(
                t,
                "\n{name}: {p} parts / {} part(s) {:.2}× by the medians; {lo:.2}× to {hi:.2}× within rounds",
                parts[0],
                median(a) / median(b)
            )?;
        }
    }
    print!("{t}");
    Ok(())
}

/// The hidden benchmark a child process of `allocator` runs: `probe-<model>`.
const PROBE: &str = "probe-";

/// What `allocator` measures: name, unit, and the probe's model.
const ALLOCATOR_MODELS: [(&str, &str); 4] = [
    ("video-factorised", "steps/s, batch 16"),
    ("video-full", "steps/s, batch 16"),
    ("dit", "images/s, batch 64"),
    ("gpt-medium", "characters/s, batch 16"),
];

/// One training rate, on the feature-selected backend (flex by default), in this process.
fn probe_rate(model: &str) -> Result<f64> {
    use nervus_models::video_dit::{Attention, VideoDitConfig};
    use nervus_training::backend::{Train, device};
    use nervus_training::bench::{dit_images_per_sec, gpt_chars_per_sec, video_steps_per_sec};
    Ok(match model {
        "video-factorised" => {
            video_steps_per_sec::<Train>(&VideoDitConfig::new(), 16, 1, 5, &device())
        }
        "video-full" => video_steps_per_sec::<Train>(
            &VideoDitConfig::new().with_attention(Attention::Full),
            16,
            1,
            5,
            &device(),
        ),
        "dit" => dit_images_per_sec::<Train>(
            &nervus_models::dit::DitConfig::digits(),
            64,
            1,
            10,
            &device(),
        ),
        "gpt-medium" => gpt_chars_per_sec::<Train>(
            &nervus_models::gpt::GptSize::Medium.config(64),
            16,
            1,
            10,
            Some(1.0),
            &device(),
        ),
        other => bail!("no probe for `{other}`"),
    })
}

/// Runs this program again as `bench probe-<model>` with the allocator chosen by environment,
/// and checks the child used the one asked for.
fn probe_in_child(model: &str, allocator: &str) -> Result<f64> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", &format!("{PROBE}{model}")])
        .env(nervus_training::alloc::ENV, allocator)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("the {model} probe with {allocator} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let rate: f64 = match words.next().map(str::parse) {
        Some(Ok(v)) => v,
        _ => bail!("the {model} probe printed `{}`, not a rate", text.trim()),
    };
    let used = words.next().unwrap_or("");
    if used != allocator {
        bail!("the {model} probe asked for {allocator} and ran with `{used}`");
    }
    if !rate.is_finite() || rate <= 0.0 {
        bail!("the {model} probe measured {rate}");
    }
    Ok(rate)
}

fn allocator(rounds: usize) -> Result<()> {
    println!(
        "training rate with the system's allocator and with mimalloc (purging off), backend {}, {} threads, {rounds} interleaved rounds, each measurement a fresh process, medians",
        nervus_training::backend::NAME,
        threads()
    );
    let mut t = String::new();
    writeln!(
        t,
        "| model | unit | system | mimalloc | mimalloc / system | within rounds |"
    )?;
    writeln!(t, "|---|---|---|---|---|---|")?;
    for (model, unit) in ALLOCATOR_MODELS {
        let (mut sys, mut mi, mut ratios) = (vec![], vec![], vec![]);
        for r in 0..rounds {
            // Alternate which goes first, so a drift in the machine's load falls on both.
            let (a, b) = if r % 2 == 0 {
                let a = probe_in_child(model, "system")?;
                (a, probe_in_child(model, "mimalloc")?)
            } else {
                let b = probe_in_child(model, "mimalloc")?;
                (probe_in_child(model, "system")?, b)
            };
            eprintln!(
                "  {model} round {}/{rounds}: system {a:.3}, mimalloc {b:.3} ({:.2}×)",
                r + 1,
                b / a
            );
            sys.push(a);
            mi.push(b);
            ratios.push(b / a);
        }
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, 0f64), |(l, h), &v| (l.min(v), h.max(v)));
        let (a, b) = (median(&sys), median(&mi));
        writeln!(
            t,
            "| {model} | {unit} | {} | {} | {:.2} | {lo:.2}–{hi:.2} |",
            fmt_rate(a),
            fmt_rate(b),
            b / a
        )?;
    }
    print!("{t}");
    Ok(())
}

fn fmt_rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
