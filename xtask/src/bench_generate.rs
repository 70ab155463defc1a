//! `cargo xtask bench generate`: the engine's generation against transformers' `generate`, on the
//! CPU, in one sitting.
//!
//! A GPT-2 of OpenAI's 124M shape (12 layers, width 768, 12 heads, context 1024, vocabulary 50,257)
//! with random weights on both sides, prompts of 16 and 512 tokens, 128 new tokens, greedy, KV
//! cache, the same threads. This project runs its CPU decoder with f32 and with int8 weights (a
//! scale per row, and per 32 inputs), and
//! Burn's own model (`Gpt::forward_cached`) as well; transformers runs in a child process, rounds
//! alternating. Reported: medians of the time to the first token and of the tokens a second after
//! it, and the ratios.

use crate::measure::{spread, threads};
use anyhow::{Context, Result, bail};
use nervus_inference::engine::CpuDecoder;
use nervus_inference::generate::{BurnDecoder, Decoder, SampleOptions, stream};
use nervus_models::decode::{CpuGpt, quantize};
use nervus_models::gpt::GptConfig;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

type Flex = burn::backend::Flex;

const SCRIPT: &str = include_str!("bench_generate.py");
const NEW: usize = 128;

/// `(first token s, tokens/s after it)`.
type Timing = (f64, f64);

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7919) % 50257).collect()
}

fn time<D: Decoder>(d: &mut D, n: usize) -> Timing {
    let opts = SampleOptions {
        length: NEW,
        temperature: 0.0,
        top_k: None,
    };
    let start = Instant::now();
    let mut first = None;
    let out = stream(
        d,
        &prompt(n),
        &opts,
        &mut nervus_datasets::rng::Rng::new(0),
        |_| {
            first.get_or_insert_with(|| start.elapsed().as_secs_f64());
            true
        },
    );
    assert_eq!(out.len(), NEW);
    let total = start.elapsed().as_secs_f64();
    let first = first.unwrap_or(total);
    (first, (NEW - 1) as f64 / (total - first))
}

fn torch(python: &str, script: &Path, n: usize) -> Result<Timing> {
    let out = Command::new(python)
        .arg(script)
        .args(["--prompt", &n.to_string(), "--new", &NEW.to_string()])
        .args(["--threads", &threads().to_string()])
        .output()
        .with_context(|| format!("running {python} {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "transformers' run failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim().lines().last().unwrap_or(""))
        .with_context(|| format!("reading transformers' output `{}`", line.trim()))?;
    Ok((
        v["first_token_s"].as_f64().context("no first_token_s")?,
        v["tokens_per_s"].as_f64().context("no tokens_per_s")?,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The table, printed and returned.
pub fn run(rounds: usize, python: &str) -> Result<String> {
    let with_torch = python != "none";
    let script = if with_torch {
        crate::bench_pytorch::check_python(python, &["torch", "transformers"])?;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-generate");
        std::fs::create_dir_all(&dir)?;
        let path: PathBuf = dir.join("bench_generate.py");
        std::fs::write(&path, SCRIPT)?;
        Some(path)
    } else {
        None
    };
    let device = Default::default();
    let config = GptConfig::new(50257)
        .with_context(1024)
        .with_layers(12)
        .with_heads(12)
        .with_d_model(768);
    let model = config.init::<Flex>(&device);
    let f32_model = CpuGpt::from_model(&model, None).map_err(anyhow::Error::msg)?;
    let q8 = quantize(&model, None);
    let q8_model = CpuGpt::from_model(&model, Some(&q8)).map_err(anyhow::Error::msg)?;
    let g32 = quantize(&model, Some(32));
    let g32_model = CpuGpt::from_model(&model, Some(&g32)).map_err(anyhow::Error::msg)?;
    let mut out = format!(
        "GPT-2 124M shape, random weights, {NEW} new tokens, greedy, KV cache, {} threads, median of {rounds} rounds\n\n\
         | prompt | engine f32 | engine q8 (a scale per row) | q8, a scale per 32 inputs | Burn Gpt f32 | transformers f32 | f32 / transformers | q8 / f32 |\n\
         |---|---|---|---|---|---|---|---|\n",
        threads()
    );
    for n in [16, 512] {
        let (mut f, mut q, mut g, mut b, mut t) = (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            f.push(time(&mut CpuDecoder::new(&f32_model), n));
            q.push(time(&mut CpuDecoder::new(&q8_model), n));
            g.push(time(&mut CpuDecoder::new(&g32_model), n));
            b.push(time(&mut BurnDecoder::new(&model), n));
            if let Some(s) = &script {
                t.push(torch(python, s, n)?);
            }
        }
        let cell = |v: &[Timing]| {
            if v.is_empty() {
                return "–".to_string();
            }
            format!(
                "{:.1} tok/s, first {:.0} ms",
                median(v.iter().map(|x| x.1).collect()),
                median(v.iter().map(|x| x.0).collect()) * 1e3
            )
        };
        let ratio = |a: &[Timing], b: &[Timing]| {
            if b.is_empty() {
                return "–".to_string();
            }
            let (x, y): (Vec<f64>, Vec<f64>) = a.iter().zip(b).map(|(a, b)| (a.1, b.1)).unzip();
            let (lo, hi) = spread(&x, &y);
            let r: Vec<f64> = x.iter().zip(&y).map(|(x, y)| x / y).collect();
            format!("{:.2}× ({lo:.2}–{hi:.2})", median(r))
        };
        writeln!(
            out,
            "| {n} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&f),
            cell(&q),
            cell(&g),
            cell(&b),
            cell(&t),
            ratio(&f, &t),
            ratio(&q, &f)
        )?;
        eprintln!("prompt {n} done");
    }
    print!("{out}");
    Ok(out)
}

/// Mean negative log-likelihood (nats a token) of `ids` under `model`, read in windows of the
/// model's context, token by token through the cache.
fn nll(model: &CpuGpt, ids: &[u32]) -> f64 {
    let ctx = model.config.context;
    let mut cache = model.cache();
    let (mut total, mut n) = (0.0f64, 0usize);
    for w in ids.chunks(ctx) {
        cache.clear();
        for (i, &id) in w.iter().enumerate().take(w.len() - 1) {
            let logits = model.forward(&[id], &mut cache);
            let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
            let z: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
            total += z.ln() + max - logits[w[i + 1] as usize] as f64;
            n += 1;
        }
    }
    total / n as f64
}

/// `cargo xtask bench q8 --model DIR --text FILE`: perplexity of the last tenth of `text` under
/// the model with f32 weights, int8 with a scale per row, and int8 with a scale per 32 inputs.
pub fn q8_quality(dir: &Path, text: &Path) -> Result<String> {
    let device = Default::default();
    let model = nervus_models::gpt2::load::<Flex>(dir, &device)?;
    let codec = nervus_inference::engine::Codec::load(dir)?;
    let text = std::fs::read_to_string(text).with_context(|| text.display().to_string())?;
    let start = text
        .char_indices()
        .nth(text.chars().count() * 9 / 10)
        .map_or(0, |(i, _)| i);
    let ids = codec.encode(&text[start..])?;
    let mut out = format!(
        "{}: held-out text = the last tenth of the file, {} tokens\n\n| weights | perplexity | nats/token |\n|---|---|---|\n",
        dir.display(),
        ids.len()
    );
    let rows = quantize(&model, None);
    let groups = quantize(&model, Some(32));
    for (name, q) in [
        ("f32", None),
        ("int8, a scale per row", Some(&rows)),
        ("int8, a scale per 32 inputs", Some(&groups)),
    ] {
        let m = CpuGpt::from_model(&model, q).map_err(anyhow::Error::msg)?;
        let l = nll(&m, &ids);
        writeln!(out, "| {name} | {:.4} | {l:.5} |", l.exp())?;
    }
    print!("{out}");
    Ok(out)
}
