//! The engine's front end. For now one command, `search`: the passages of a crawled corpus that
//! bear on a question, each with its page, its section, and every question word's part of its
//! score.
//!
//! ```text
//! cargo run --release --example engine -- search "pushing onto a vector"
//! cargo run --release --example engine -- search --corpus docs.txt --passages 3 "what is a trait object"
//! cargo run --release --example engine -- search        # questions from standard input, one a line
//! ```
//!
//! The default corpus is the Rust book, vendored in `datasets/data/rust-book/` (`cargo xtask
//! rust-book` rebuilds it). Any corpus the crawl example writes will do: search needs the text
//! and the `.crawl.json` manifest beside it.

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use nervus_inference::retrieve::{self, Bm25, Retriever, SearchOptions};
use std::io::BufRead;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Search a crawled corpus (more engine commands to come)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the passages that best answer a question, and why they ranked.
    Search(SearchArgs),
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
    }
}

fn search(args: SearchArgs) -> Result<()> {
    if args.context == 0 {
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
            .unwrap_or_else(|| retrieve::budget(args.context, retrieve::BPE_CHARS_PER_TOKEN)),
    };
    // Checked before the corpus is read, so that a bad flag is the error a user sees.
    if let Err(e) = options.check() {
        bail!("--{e}");
    }
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
