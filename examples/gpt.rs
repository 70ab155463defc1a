//! Train a character-level GPT on a text file, sample from it, save it as a GPT-2 checkpoint.
//!
//! ```text
//! cargo run --release --example gpt                                  # Shakespeare, small preset
//! cargo run --release --example gpt -- --data notes.txt --size medium
//! cargo run --release --example gpt -- --load out/gpt/model --steps 0 --prompt "ROMEO:"
//! cargo run --release --example gpt -- --load out/gpt/model --data more.txt --steps 500 --save out/gpt2
//! ```

use anyhow::{Context, Result, bail};
use clap::Parser;
use nervus_datasets::download::{Checksum, Fetched, Remote, client, fetch};
use nervus_datasets::rng::Rng;
use nervus_datasets::text::{self, CharTokenizer};
use nervus_inference::generate::{SampleOptions, generate};
use nervus_models::gpt::{Gpt, GptSize};
use nervus_training::backend;
use nervus_training::gpt::{EvalSource, GptOptions, TextData, load_dir, train};
use nervus_training::report::{Reporter, Ui, duration};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Train a character-level GPT and write with it")]
struct Args {
    /// Size preset: small (2 layers, d 64, context 64), medium (4, 128, 128), large (6, 256, 256).
    #[arg(long, default_value = "small")]
    size: String,
    /// Override the preset's number of blocks.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the preset's attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    d_model: Option<usize>,
    /// Override the preset's context (characters the model reads).
    #[arg(long)]
    context: Option<usize>,
    /// Optimizer steps (0 with --load: just write).
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Windows per step.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Threads each batch is cut across, run side by side (the result is the whole batch's
    /// gradient; the CPU backends default to 2, a GPU to 1).
    #[arg(long, default_value_t = backend::PARTS)]
    parts: usize,
    /// Peak learning rate (AdamW).
    #[arg(long, default_value_t = 0.003)]
    lr: f64,
    /// Warm-up: a share of the run if below 1 (0.1 = a tenth), else a number of steps.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,
    /// The cosine decays the rate to this share of the peak (1 = no decay).
    #[arg(long, default_value_t = 0.1)]
    decay_to: f64,
    /// Clip the global gradient norm to this (0 = no clipping).
    #[arg(long, default_value_t = 1.0)]
    clip: f64,
    /// AdamW decoupled weight decay (matrices and embedding tables only).
    #[arg(long, default_value_t = 0.1)]
    weight_decay: f64,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Steps between validations (each prints a sample and keeps the model if it is the best).
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Validation windows (default: about 16K characters' worth).
    #[arg(long)]
    eval_windows: Option<usize>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample only from the k most likely characters.
    #[arg(long)]
    top_k: Option<usize>,
    /// Text the samples continue.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Characters to write after the prompt (at the end of training, or with --steps 0).
    #[arg(long, default_value_t = 200)]
    length: usize,
    /// Where the best model is saved (default out/gpt/model, or the --load directory).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Start from a saved model directory.
    #[arg(long)]
    load: Option<PathBuf>,
    /// Continue a killed run, exactly where its last checkpoint left it (same flags as that run).
    #[arg(long)]
    resume: bool,
    /// Start afresh even though --save already holds a model (which the run then replaces).
    #[arg(long)]
    overwrite: bool,
    /// Train on this UTF-8 text file instead of the Shakespeare that ships with the repo.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Fetch a corpus (tiny-shakespeare) into the cache directory and train on it.
    #[arg(long)]
    download: Option<String>,
    /// Plain line output even in a terminal.
    #[arg(long)]
    plain: bool,
}

fn corpus(args: &Args) -> Result<(String, String)> {
    if let Some(name) = &args.download {
        if name != "tiny-shakespeare" {
            bail!("unknown corpus `{name}`: the one available is tiny-shakespeare");
        }
        let dest = nervus_datasets::cache::data_dir().join("text/tinyshakespeare.txt");
        let remote = Remote {
            what: "tiny-shakespeare input.txt".into(),
            urls: vec![text::TINY_SHAKESPEARE_URL.into()],
            dest: dest.clone(),
            checksum: Some(Checksum::Sha256(text::TINY_SHAKESPEARE_SHA256.into())),
        };
        if let Fetched::Downloaded { bytes, .. } = fetch(&client()?, &remote, &mut |_, _| {})? {
            println!(
                "downloaded {bytes} bytes into {} (sha256 verified)",
                dest.display()
            );
        }
        return Ok(("tiny-shakespeare".into(), text::read_text(&dest)?));
    }
    if let Some(path) = &args.data {
        return Ok((path.display().to_string(), text::read_text(path)?));
    }
    Ok((
        "shakespeare.txt (vendored)".into(),
        text::SHAKESPEARE.to_string(),
    ))
}

fn write(model: &Gpt<backend::Infer>, tok: &CharTokenizer, args: &Args) -> Result<()> {
    let ids = if args.prompt.is_empty() {
        // Start at a line break, or where the text has none, at its vocabulary's first character.
        tok.encode("\n", "").unwrap_or_else(|_| vec![0])
    } else {
        tok.encode(&args.prompt, "--prompt")?
    };
    let opts = SampleOptions {
        length: args.length,
        temperature: args.temperature,
        top_k: args.top_k,
    };
    nervus_training::checks::sample(&opts)?;
    let out = generate(model, &ids, &opts, &mut Rng::new(args.seed));
    println!("{}{}", args.prompt, tok.decode(&out));
    Ok(())
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let device = backend::device();
    if args.load.is_some() {
        for (flag, given) in [
            ("--layers", args.layers.is_some()),
            ("--heads", args.heads.is_some()),
            ("--d-model", args.d_model.is_some()),
            ("--context", args.context.is_some()),
        ] {
            if given {
                bail!(
                    "{flag} cannot change a model given with --load: its shape comes from its directory"
                );
            }
        }
    }
    let loaded = match &args.load {
        Some(dir) => Some(
            load_dir::<backend::Train>(dir, &device)
                .with_context(|| format!("loading {}", dir.display()))?,
        ),
        None => None,
    };
    if args.steps == 0 {
        let Some((model, tok, _)) = loaded else {
            bail!("--steps 0 means \"just write\": give a model with --load DIR");
        };
        use burn::module::AutodiffModule;
        return write(&model.valid(), &tok, &args);
    }

    let (name, text) = corpus(&args)?;
    let model_config = match &loaded {
        Some((m, _, _)) => m.config.clone(),
        None => {
            let size = GptSize::parse(&args.size)
                .with_context(|| format!("unknown --size `{}`", args.size))?;
            let vocab = CharTokenizer::from_text(&text).vocab_size();
            let mut c = size.config(vocab);
            c.layers = args.layers.unwrap_or(c.layers);
            c.heads = args.heads.unwrap_or(c.heads);
            c.d_model = args.d_model.unwrap_or(c.d_model);
            c.context = args.context.unwrap_or(c.context);
            c.check()?;
            c
        }
    };
    let data = TextData::new(
        &name,
        &text,
        loaded.as_ref().map(|l| l.1.clone()),
        model_config.context,
    )?;
    let save = args
        .save
        .clone()
        .or_else(|| args.load.clone())
        .unwrap_or_else(|| PathBuf::from("out/gpt/model"));
    let run_dir = save
        .parent()
        .map(|p| p.join("train"))
        .unwrap_or_else(|| PathBuf::from("train"));
    let ui = if args.plain { Ui::Plain } else { Ui::auto() };
    let report = Reporter::new(ui, Some(run_dir.join("log.txt")));

    let model = match loaded {
        Some((m, _, _)) => m,
        None => {
            use burn::tensor::backend::Backend;
            backend::Train::seed(&device, args.seed);
            model_config.init::<backend::Train>(&device)
        }
    };
    let (know_nothing, know_letters) = data.losses_to_beat();
    println!(
        "data: {} ({} characters, {} distinct; {} train / {} validation)",
        data.name,
        data.ids.len(),
        data.tokenizer.vocab_size(),
        data.split,
        data.ids.len() - data.split
    );
    println!(
        "model: {} layers, {} heads, d_model {}, context {}, vocab {}: {} parameters | backend {}",
        model_config.layers,
        model_config.heads,
        model_config.d_model,
        model_config.context,
        model_config.vocab,
        model.num_params(),
        backend::NAME
    );
    println!(
        "loss to beat: {know_nothing:.3} knowing nothing (ln {}), {know_letters:.3} knowing only letter frequencies",
        data.tokenizer.vocab_size()
    );
    let warmup = nervus_training::schedule::warmup_steps(args.warmup, args.steps);
    let opts = GptOptions {
        model: model_config.clone(),
        steps: args.steps,
        batch: args.batch,
        parts: args.parts,
        lr: args.lr,
        warmup,
        decay_to: args.decay_to,
        clip: (args.clip > 0.0).then_some(args.clip),
        weight_decay: args.weight_decay,
        seed: args.seed,
        eval_every: args.eval_every,
        eval_windows: args
            .eval_windows
            .unwrap_or_else(|| EvalSource::default_windows(model_config.context)),
        sample: SampleOptions {
            length: 80,
            temperature: args.temperature,
            top_k: args.top_k,
        },
        prompt: args.prompt.clone(),
        save: Some(save.clone()),
        run_dir,
        continued_from: args.load.clone(),
        resume: args.resume,
        overwrite: args.overwrite,
    };
    let (result, _) = train(&opts, &data, model, report.clone()).context("training failed")?;
    match result.best {
        Some((step, loss)) => report.line(format!(
            "best validation loss {loss:.4} at step {step}, saved in {} ({} in all)",
            save.display(),
            duration(result.seconds)
        )),
        None => report.line(format!(
            "no checkpoint improved on the starting model ({} in all)",
            duration(result.seconds)
        )),
    }
    if let Ok((best, tok, _)) = load_dir::<backend::Infer>(&save, &device) {
        println!("--- the saved model writes:");
        write(&best, &tok, &args)?;
    }
    Ok(())
}
