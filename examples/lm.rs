//! Train the modern language model (byte-level BPE, RoPE, RMSNorm, SwiGLU, QK-norm, soft-capped
//! logits) on a corpus of documents, evaluate it deterministically in bits per byte, sample from it.
//!
//! ```text
//! cargo run --release --example lm                                   # Jane Austen, small preset
//! cargo run --release --example lm -- --doc-mask --steps 500
//! cargo run --release --example lm -- --resume                       # continue a killed run
//! cargo run --release --example lm -- --load out/lm/model --steps 0 --prompt "It is a truth"
//! cargo run --release --example lm -- --download tinystories-valid
//! ```

use anyhow::{Context, Result, bail};
use clap::Parser;
use nervus_datasets::documents::{AUSTEN, Source};
use nervus_datasets::download::{Fetched, client, fetch_recorded, record_path};
use nervus_datasets::rng::Rng;
use nervus_datasets::text;
use nervus_inference::generate::{SampleOptions, generate};
use nervus_models::gpt::GptConfig;
use nervus_training::backend;
use nervus_training::lm::{CorpusOptions, LmOptions, LmPreset, load_dir, prepare, train};
use nervus_training::optim::OptimizerSpec;
use nervus_training::report::{Reporter, Ui, duration};
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(about = "Train a BPE language model with the modern recipe and write with it")]
struct Args {
    /// Train and write in bfloat16 where the backend offers it (flex, cuda): weights, activations
    /// and optimizer state alike, not mixed precision. Saved models are f32 either way.
    #[arg(long)]
    bf16: bool,
    /// Size preset: tiny (tests), small (4 layers, d 128, context 128), kalia-58m (10, 512, 1024; GPU).
    #[arg(long, default_value = "small")]
    size: String,
    /// Override the preset's number of blocks.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the preset's attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Key/value heads (grouped-query attention; must divide --heads).
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    d_model: Option<usize>,
    /// Override the preset's context (tokens).
    #[arg(long)]
    context: Option<usize>,
    /// BPE vocabulary size (default: the preset's).
    #[arg(long)]
    vocab: Option<usize>,
    /// GPT-2's architecture instead of the modern one (LayerNorm, learned positions, GELU, biases).
    #[arg(long)]
    gpt2: bool,
    /// Turn QK-norm off.
    #[arg(long)]
    no_qk_norm: bool,
    /// Logit soft-cap c in c·tanh(z/c) (0 = off).
    #[arg(long, default_value_t = 30.0)]
    softcap: f64,
    /// Block-diagonal attention inside each document.
    #[arg(long)]
    doc_mask: bool,
    /// Optimizer steps (0 with --load: just write).
    #[arg(long, default_value_t = 1500)]
    steps: usize,
    /// Windows per micro-batch.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Micro-batches per optimizer step (gradients averaged).
    #[arg(long, default_value_t = 1)]
    accumulate: usize,
    /// Peak learning rate of AdamW (with muon: for embeddings, head and gains).
    #[arg(long, default_value_t = 0.003)]
    lr: f64,
    /// Warm-up: a share of the run if below 1, else a number of steps.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,
    /// The cosine decays the rate to this share of the peak.
    #[arg(long, default_value_t = 0.1)]
    decay_to: f64,
    /// Clip the global gradient norm to this (0 = no clipping).
    #[arg(long, default_value_t = 1.0)]
    clip: f64,
    /// muon (Muon on the blocks' matrices, AdamW on the rest; the lm-optimizers experiment's
    /// winner), or adamw (everything).
    #[arg(long, default_value = "muon", value_parser = ["adamw", "muon"])]
    optimizer: String,
    /// Muon's peak learning rate (with --optimizer muon; the schedule scales it like --lr).
    #[arg(long, default_value_t = 0.02)]
    muon_lr: f64,
    /// AdamW decoupled weight decay (matrices and embedding tables only).
    #[arg(long, default_value_t = 0.1)]
    weight_decay: f64,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Steps between evaluations (each prints a sample and keeps the model if it is the best).
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Evaluation batches (fixed windows from the held-out documents).
    #[arg(long, default_value_t = 20)]
    eval_batches: usize,
    /// Share of the documents held out for evaluation (taken from the end).
    #[arg(long, default_value_t = 0.1)]
    held_out: f64,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample only from the k most likely tokens.
    #[arg(long, default_value_t = 200)]
    top_k: usize,
    /// Text the samples continue.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Tokens to write after the prompt.
    #[arg(long, default_value_t = 120)]
    length: usize,
    /// Where the best model is saved (default out/lm/model, or the --load directory).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Start from a saved model directory (its tokenizer is kept).
    #[arg(long)]
    load: Option<PathBuf>,
    /// Continue the killed (or --stop-after) run whose checkpoints are beside --save, exactly
    /// where it stopped.
    #[arg(long)]
    resume: bool,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    overwrite: bool,
    /// Stop cleanly at the first evaluation at or after this step (the schedule still spans
    /// --steps); continue later with --resume.
    #[arg(long)]
    stop_after: Option<usize>,
    /// Train on this UTF-8 text instead of the Austen novels that ship with the repo (documents
    /// separated by lines `<|endoftext|>`, else the whole file is one document).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Fetch a corpus into the cache directory: tinystories (2.2 GB) or tinystories-valid (22 MB).
    #[arg(long)]
    download: Option<String>,
    /// Plain line output even in a terminal.
    #[arg(long)]
    plain: bool,
}

const TINYSTORIES: &str = "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/";

/// TinyStories publishes no checksum: the first download's sha256 is recorded beside the file
/// (`<file>.sha256`) and every later use checks the file against it.
fn tinystories(file: &str) -> Result<PathBuf> {
    let dest = nervus_datasets::cache::data_dir().join("text").join(file);
    let mut shown = 0u64;
    let mut progress = |done: u64, total: Option<u64>| {
        // A line every 5% (or every 100 MB when the size is not known).
        let step = total.map_or(100 << 20, |t| (t / 20).max(1));
        if done >= shown + step || Some(done) == total {
            shown = done;
            match total {
                Some(t) => eprintln!("  {file}: {} of {} MB", done >> 20, t >> 20),
                None => eprintln!("  {file}: {} MB", done >> 20),
            }
        }
    };
    let fetched = fetch_recorded(
        &client()?,
        &format!("TinyStories {file}"),
        vec![format!("{TINYSTORIES}{file}")],
        &dest,
        &mut progress,
    )?;
    if let Fetched::Downloaded { bytes, sha256 } = fetched {
        println!(
            "downloaded {bytes} bytes into {}; sha256 {sha256} (recorded in {})",
            dest.display(),
            record_path(&dest).display()
        );
    }
    Ok(dest)
}

fn corpus(args: &Args) -> Result<(String, String, Source)> {
    if let Some(name) = &args.download {
        let file = match name.as_str() {
            "tinystories" => "TinyStoriesV2-GPT4-train.txt",
            "tinystories-valid" => "TinyStoriesV2-GPT4-valid.txt",
            other => {
                bail!(
                    "unknown corpus `{other}`: the ones available are tinystories, tinystories-valid"
                )
            }
        };
        let path = tinystories(file)?;
        let t = text::read_text(&path)?;
        return Ok((name.clone(), t, Source::Delimited));
    }
    if let Some(path) = &args.data {
        let t = text::read_text(path)?;
        let source = Source::detect(&t);
        return Ok((path.display().to_string(), t, source));
    }
    Ok((
        "austen.txt (vendored)".into(),
        AUSTEN.to_string(),
        Source::Austen,
    ))
}

fn write(dir: &Path, args: &Args) -> Result<()> {
    let (model, bpe, _) = load_dir::<backend::Infer>(dir, &backend::device())
        .with_context(|| format!("loading {}", dir.display()))?;
    let prompt = if args.prompt.is_empty() {
        vec![bpe.eot_id()]
    } else {
        bpe.encode(&args.prompt)?
    };
    let opts = SampleOptions {
        length: args.length,
        temperature: args.temperature,
        top_k: Some(args.top_k),
    };
    nervus_training::checks::sample(&opts)?;
    let out = generate(&model, &prompt, &opts, &mut Rng::new(args.seed));
    println!("{}{}", args.prompt, bpe.decode(&out)?);
    Ok(())
}

/// The configuration of a new model: the preset's, changed by the flags, checked.
fn new_config(args: &Args, preset: LmPreset, vocab: usize) -> Result<GptConfig> {
    let mut c = preset.config(vocab);
    if args.gpt2 {
        c = c
            .with_norm(nervus_models::norm::NormKind::LayerNorm)
            .with_positions(nervus_models::gpt::PositionKind::Learned)
            .with_mlp(nervus_models::gpt::MlpKind::Gelu)
            .with_qk_norm(false)
            .with_logit_softcap(None)
            .with_bias(true);
    } else {
        c.qk_norm = !args.no_qk_norm;
        c.logit_softcap = (args.softcap > 0.0).then_some(args.softcap);
    }
    c.layers = args.layers.unwrap_or(c.layers);
    c.heads = args.heads.unwrap_or(c.heads);
    c.d_model = args.d_model.unwrap_or(c.d_model);
    c.context = args.context.unwrap_or(c.context);
    c.kv_heads = args.kv_heads;
    c.check()?;
    Ok(c)
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    if args.bf16 {
        // Before any tensor exists: a device's float type is fixed at its first use.
        burn::tensor::backend::set_default_float_dtype::<backend::Infer>(
            &backend::device(),
            burn::tensor::DType::BF16,
        )
        .map_err(|e| anyhow::anyhow!("--bf16 on the {} backend: {e:?}", backend::NAME))?;
    }
    if args.steps == 0 {
        let Some(dir) = &args.load else {
            bail!("--steps 0 means \"just write\": give a model with --load DIR");
        };
        return write(dir, &args);
    }
    if args.load.is_some() {
        for (flag, given) in [
            ("--layers", args.layers.is_some()),
            ("--heads", args.heads.is_some()),
            ("--kv-heads", args.kv_heads.is_some()),
            ("--d-model", args.d_model.is_some()),
            ("--context", args.context.is_some()),
            ("--vocab", args.vocab.is_some()),
        ] {
            if given {
                bail!(
                    "{flag} cannot change a model given with --load: its shape comes from its directory"
                );
            }
        }
    }
    let device = backend::device();
    let save = args
        .save
        .clone()
        .or_else(|| args.load.clone())
        .unwrap_or_else(|| PathBuf::from("out/lm/model"));
    let out_dir = save
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let run_dir = out_dir.join("train");
    let ui = if args.plain { Ui::Plain } else { Ui::auto() };
    let report = Reporter::new(ui, Some(run_dir.join("log.txt")));

    let loaded = match &args.load {
        Some(dir) => Some(
            load_dir::<backend::Train>(dir, &device)
                .with_context(|| format!("loading {}", dir.display()))?,
        ),
        None => None,
    };
    let preset = LmPreset::parse(&args.size)
        .with_context(|| format!("unknown --size `{}`: tiny, small or kalia-58m", args.size))?;
    if loaded.is_none() {
        // The shape's flags, checked before the tokenizer is trained.
        new_config(&args, preset, args.vocab.unwrap_or(preset.vocab()))?;
    }
    let (name, text, source) = corpus(&args)?;
    let context_hint = args.context.unwrap_or(preset.config(2).context);
    let corpus = prepare(
        &name,
        &text,
        source,
        loaded.as_ref().map(|l| l.1.clone()),
        &CorpusOptions {
            vocab: args.vocab.unwrap_or(preset.vocab()),
            held_out: args.held_out,
            contexts: vec![context_hint],
            root: out_dir.join("corpora"),
        },
        &report,
    )?;
    drop(text);
    let m = &corpus.manifest;
    println!(
        "data: {name}: {} train documents ({} tokens), {} held out ({} tokens); {:.2} bytes a token",
        m.train.documents,
        m.train.tokens,
        m.val.documents,
        m.val.tokens,
        m.train.bytes_per_token()
    );
    for s in &m.train.long_document_share {
        println!(
            "  {:.1}% of training tokens sit in documents at least {} tokens long",
            100.0 * s.share,
            s.context
        );
    }

    let model = match loaded {
        Some((model, _, _)) => model,
        None => {
            let c = new_config(&args, preset, corpus.bpe.vocab_size())?;
            use burn::tensor::backend::Backend;
            backend::Train::seed(&device, args.seed);
            c.init::<backend::Train>(&device)
        }
    };
    let c = &model.config;
    println!(
        "model: {} layers, {} heads ({} key/value), d_model {}, context {}, vocab {}, {:?}, {:?}, {:?}, qk-norm {}, soft-cap {:?}: {} parameters | backend {}",
        c.layers,
        c.heads,
        c.kv_heads.unwrap_or(c.heads),
        c.d_model,
        c.context,
        c.vocab,
        c.norm,
        c.positions,
        c.mlp,
        c.qk_norm,
        c.logit_softcap,
        model.num_params(),
        backend::NAME
    );
    println!(
        "loss to beat: {:.3} knowing nothing (ln {})",
        (c.vocab as f64).ln(),
        c.vocab
    );
    let warmup = nervus_training::schedule::warmup_steps(args.warmup, args.steps);
    let opts = LmOptions {
        model: c.clone(),
        steps: args.steps,
        batch: args.batch,
        accumulation: args.accumulate,
        lr: args.lr,
        warmup,
        decay_to: args.decay_to,
        clip: (args.clip > 0.0).then_some(args.clip),
        optimizer: match args.optimizer.as_str() {
            "muon" => OptimizerSpec::muon(args.lr, args.muon_lr, args.weight_decay),
            _ => OptimizerSpec::adamw(args.weight_decay),
        },
        seed: args.seed,
        eval_every: args.eval_every,
        eval_batches: args.eval_batches,
        doc_mask: args.doc_mask,
        sample: SampleOptions {
            length: 60,
            temperature: args.temperature,
            top_k: Some(args.top_k),
        },
        prompt: args.prompt.clone(),
        save: Some(save.clone()),
        run_dir,
        resume: args.resume,
        stop_after: args.stop_after,
        continued_from: args.load.clone(),
        overwrite: args.overwrite,
    };
    let (result, _) = train(&opts, &corpus, model, report.clone()).context("training failed")?;
    match result.best {
        Some((step, loss)) => report.line(format!(
            "best evaluation loss {loss:.4} at step {step}, saved in {} ({} in all, {:.0} training tokens a second)",
            save.display(),
            duration(result.seconds),
            result.tokens_per_second
        )),
        None => report.line(format!(
            "no checkpoint improved on the starting model ({} in all)",
            duration(result.seconds)
        )),
    }
    if save.join("config.json").exists() {
        println!("--- the saved model writes:");
        write(&save, &args)?;
    }
    Ok(())
}
