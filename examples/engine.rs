//! The engine's front end. For now two commands: `search`, the passages of a crawled corpus that
//! bear on a question, each with its page, its section, and every question word's part of its
//! score; and `ask`, those passages read by an instruction-tuned model (Qwen2 family, in
//! transformers' layout) that streams its answer.
//!
//! ```text
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
    /// Print the passages that best answer a question, and why they ranked.
    Search(SearchArgs),
    /// Answer a question from the passages search finds, with an instruction-tuned model.
    Ask(AskArgs),
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
    match Cli::parse().command {
        Command::Search(args) => search(args),
        Command::Ask(args) => ask(args),
    }
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
    if args.max_tokens == 0 {
        bail!("--max-tokens 0: ask for at least one token of answer");
    }
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        bail!(
            "--temperature {}: a number, 0 (greedy) or above",
            args.temperature
        );
    }
    if args.top_k == Some(0) {
        bail!("--top-k 0: keep at least one token");
    }
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
    let sample = SampleOptions {
        length: args.max_tokens,
        temperature: args.temperature,
        top_k: args.top_k,
    };
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
