//! The engine's front end: models trained and run by name, OpenAI's GPT-2 and other hub models,
//! int8 weights, a terminal UI; and retrieval (`search`, `ask`).
//!
//! ```text
//! cargo run --release --example engine -- train --data notes.txt --name notes
//! cargo run --release --example engine -- train --from notes --data more.txt
//! cargo run --release --example engine -- run --model notes --prompt "The " --quant q8
//! cargo run --release --example engine -- run --model openai-community/gpt2 --download --prompt "Hello"
//! cargo run --release --example engine -- ls
//! cargo run --release --example engine -- use notes
//! cargo run --release --example engine -- rm notes --yes
//! cargo run --release --example engine -- tui
//! cargo run --release --example engine -- search "pushing onto a vector"
//! cargo run --release --example engine -- search --corpus docs.txt --passages 3 "what is a trait object"
//! cargo run --release --example engine -- search        # questions from standard input, one a line
//! cargo run --release --example engine -- ask --model Qwen2.5-0.5B-Instruct "how do I push onto a vector"
//! ```
//!
//! The default corpus is the Rust book, vendored in `datasets/data/rust-book/` (`cargo xtask
//! rust-book` rebuilds it). Any corpus the crawl example writes will do: search needs the text
//! and the `.crawl.json` manifest beside it.

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use nervus_inference::ask::Reader;
use nervus_inference::engine::store::{Found, Store};
use nervus_inference::engine::{self, Quant, RunOptions};
use nervus_inference::generate::SampleOptions;
use nervus_inference::retrieve::{self, Bm25, Retriever, SearchOptions};
use nervus_training::backend;
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Search a crawled corpus, or have a chat model answer from it")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a character GPT under a name (the gpt example's training, into the model home).
    Train(TrainArgs),
    /// Continue a prompt with a model: a directory, a name trained here, or a hub repo id.
    Run(RunArgs),
    /// The models trained here, then the downloaded ones.
    Ls,
    /// Remove a model (a trained one only with --yes: it cannot be downloaded again).
    Rm {
        name: String,
        #[arg(long)]
        yes: bool,
    },
    /// Make a model the default for run and tui.
    Use { name: String },
    /// A terminal UI: pick a model, write a prompt, watch the continuation.
    Tui {
        /// The model to open with (default: the one `use` chose).
        model: Option<String>,
        #[arg(long, default_value = "f32")]
        quant: Quant,
    },
    /// Print the passages that best answer a question, and why they ranked.
    Search(SearchArgs),
    /// Answer a question from the passages search finds, with an instruction-tuned model.
    Ask(AskArgs),
}

#[derive(clap::Args)]
struct TrainArgs {
    /// The UTF-8 text to train on.
    #[arg(long)]
    data: std::path::PathBuf,
    /// The new model's name (letters, digits, '-', '_', '.').
    #[arg(long, required_unless_present = "from")]
    name: Option<String>,
    /// Continue this trained model (its score on the new text is the bar a checkpoint must beat).
    #[arg(long)]
    from: Option<String>,
    /// small, medium or large (see the gpt example).
    #[arg(long, default_value = "small")]
    size: String,
    #[command(flatten)]
    run: nervus_training::options::RunArgs,
}

#[derive(clap::Args)]
struct RunArgs {
    /// A directory, a name trained here, or OWNER/REPO (default: the one `use` chose).
    #[arg(long)]
    model: Option<String>,
    #[arg(long)]
    prompt: String,
    /// Always the most likely token (the same as --temperature 0).
    #[arg(long)]
    greedy: bool,
    /// Softmax temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long, default_value_t = 200)]
    max_tokens: usize,
    /// f32, or q8 (int8 weights, a scale per row; cached beside the model).
    #[arg(long, default_value = "f32")]
    quant: Quant,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Fetch a hub model that is not here yet.
    #[arg(long)]
    download: bool,
    /// Stop at the model's end-of-text token.
    #[arg(long)]
    stop_at_eos: bool,
}

#[derive(clap::Args)]
struct AskArgs {
    /// A Qwen2-family chat model directory in transformers' layout (config.json,
    /// model.safetensors, tokenizer.json, tokenizer_config.json), e.g. Qwen2.5-0.5B-Instruct.
    #[arg(long)]
    model: PathBuf,
    /// Tokens of answer at most.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// 0 for greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    #[command(flatten)]
    search: SearchArgs,
}

#[derive(clap::Args)]
struct SearchArgs {
    /// The question. Without one, questions are read from standard input, one a line, and the
    /// index is kept between them (and rebuilt when the corpus changes).
    question: Option<String>,
    /// A corpus written by the crawl example, with its `.crawl.json` beside it.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/data/rust-book/rust-book.txt"))]
    corpus: PathBuf,
    /// Passages to print.
    #[arg(long, default_value_t = 5)]
    passages: usize,
    /// The reader's context in tokens: a passage gets at most two fifths of it in characters
    /// (4 characters a token), capped at 12,000.
    #[arg(long, default_value_t = retrieve::DEFAULT_CONTEXT)]
    context: usize,
    /// The most characters of one passage, instead of the share of --context.
    #[arg(long)]
    budget: Option<usize>,
    /// Match words as written ("pushing" no longer finds "push").
    #[arg(long)]
    no_stem: bool,
    /// Let a passage in without any of the question's specific words.
    #[arg(long)]
    no_specific_rule: bool,
    /// A word is specific when at most this share of the paragraphs has it.
    #[arg(long, default_value_t = SearchOptions::default().specific)]
    specific: f64,
    /// BM25's k1: how fast a word's repeats in one paragraph stop counting.
    #[arg(long, default_value_t = Bm25::default().k1)]
    k1: f64,
    /// BM25's b: how much a long paragraph is discounted, 0 to 1.
    #[arg(long, default_value_t = Bm25::default().b)]
    b: f64,
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let store = Store::from_env();
    match Cli::parse().command {
        Command::Search(args) => search(args),
        Command::Ask(args) => ask(args),
        Command::Train(args) => train(args, &store),
        Command::Run(args) => run_model(args, &store),
        Command::Ls => {
            print!("{}", store.listing());
            Ok(())
        }
        Command::Rm { name, yes } => {
            match store.remove(&name, yes)? {
                Found::Hub { repo, .. } => println!("removed {repo} (--download fetches it again)"),
                found => println!("removed {}", found.dir().display()),
            }
            Ok(())
        }
        Command::Use { name } => {
            let found = store.set_default(&name)?;
            println!("default model: {name} ({})", found.dir().display());
            Ok(())
        }
        Command::Tui { model, quant } => {
            nervus_inference::tui::run::<backend::Infer>(&store, model.as_deref(), quant)
        }
    }
}

/// How to draw tokens, the flags checked by the rules every example shares.
fn sample_options(
    max_tokens: usize,
    temperature: f64,
    top_k: Option<usize>,
) -> Result<SampleOptions> {
    use nervus_training::checks;
    checks::at_least_one("--max-tokens", max_tokens)?;
    let sample = SampleOptions {
        length: max_tokens,
        temperature,
        top_k,
    };
    checks::sample(&sample)?;
    Ok(sample)
}

fn train(args: TrainArgs, store: &Store) -> Result<()> {
    let spec = nervus_training::named::NamedTrain {
        data: args.data,
        name: args.name,
        from: args.from,
        size: args.size,
        flags: args.run,
    };
    let (dir, outcome) = nervus_training::named::train(store, spec)?;
    outcome.print_writes("");
    println!("model: {}", dir.display());
    Ok(())
}

fn run_model(args: RunArgs, store: &Store) -> Result<()> {
    let temperature = if args.greedy { 0.0 } else { args.temperature };
    let sample = sample_options(args.max_tokens, temperature, args.top_k)?;
    let started = std::time::Instant::now();
    let (_, engine) = engine::open::<backend::Infer>(
        store,
        args.model.as_deref(),
        args.download,
        args.quant,
        &backend::device(),
        &mut |file, done, total| {
            if total.is_some_and(|t| t == done) {
                eprintln!("fetched {file} ({:.1} MB)", done as f64 / 1e6);
            }
        },
    )?;
    engine.prompt_ids(&args.prompt)?;
    eprintln!(
        "{} (loaded in {:.1} s)",
        engine.summary,
        started.elapsed().as_secs_f64()
    );
    let opts = RunOptions {
        sample,
        seed: args.seed,
        stop_at_eos: args.stop_at_eos,
    };
    // The prompt is echoed once the engine has accepted it (a refused prompt prints nothing).
    let mut echoed = false;
    let report = engine.run(&args.prompt, &opts, |text| {
        if !std::mem::replace(&mut echoed, true) {
            print!("{}", args.prompt);
        }
        print!("{text}");
        let _ = std::io::stdout().flush();
    })?;
    println!("{}", if echoed { "" } else { &args.prompt });
    eprintln!("{}", report.timing());
    Ok(())
}

/// The search settings the flags give, for a reader of `context` tokens.
fn options(args: &SearchArgs, context: usize) -> Result<SearchOptions> {
    if context == 0 {
        bail!("--context 0: the reader's context is a number of tokens above 0");
    }
    let options = SearchOptions {
        bm25: Bm25 {
            k1: args.k1,
            b: args.b,
        },
        specific_rule: !args.no_specific_rule,
        specific: args.specific,
        passages: args.passages,
        budget: args
            .budget
            .unwrap_or_else(|| retrieve::budget(context, retrieve::BPE_CHARS_PER_TOKEN)),
    };
    if let Err(e) = options.check() {
        bail!("--{e}");
    }
    Ok(options)
}

fn ask(args: AskArgs) -> Result<()> {
    let sample = sample_options(args.max_tokens, args.temperature, args.top_k)?;
    let question = args
        .search
        .question
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("ask needs a question"))?;
    // Flags first, then the corpus (fast), then the model (slow), so that mistakes show at once.
    options(&args.search, args.search.context)?;
    let mut retriever = Retriever::open(&args.search.corpus, !args.search.no_stem)?;
    let device = backend::device();
    let started = std::time::Instant::now();
    let reader = Reader::<backend::Infer>::load(&args.model, &device)?;
    let loaded = started.elapsed();
    // The reader's own context sets the budget, unless --budget says otherwise.
    let search = options(&args.search, reader.context())?;
    let answer = nervus_inference::ask::ask(
        &reader,
        &mut retriever,
        question,
        &search,
        &sample,
        args.seed,
        |text| {
            print!("{text}");
            let _ = std::io::stdout().flush();
        },
    )?;
    println!("\n\n{}", answer.sources_list());
    eprintln!(
        "model loaded in {:.1} s; {}",
        loaded.as_secs_f64(),
        answer.timing()
    );
    Ok(())
}

fn search(args: SearchArgs) -> Result<()> {
    let options = options(&args, args.context)?;
    let mut r = Retriever::open(&args.corpus, !args.no_stem)?;
    let index = format!(
        "{}: {} pages, {} paragraphs, {} terms; indexed in {:.1} ms",
        args.corpus.display(),
        r.corpus.pages.len(),
        r.corpus.chunks.len(),
        r.index.vocabulary(),
        r.built_in.as_secs_f64() * 1e3
    );
    let mut ask = |question: &str| -> Result<()> {
        let found = r.search(question, &options)?;
        print!("{}", found.render(&r.corpus));
        eprintln!("searched in {:.2} ms", found.took.as_secs_f64() * 1e3);
        Ok(())
    };
    match &args.question {
        Some(q) => {
            ask(q)?;
            eprintln!("{index}");
            Ok(())
        }
        None => {
            eprintln!("{index}");
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                // One bad question is said and skipped; the session goes on.
                if let Err(e) = ask(line.trim()) {
                    eprintln!("error: {e}");
                }
            }
            Ok(())
        }
    }
}
