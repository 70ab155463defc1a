//! Turn a documentation site into a plain-text corpus for the character-level GPT.
//!
//! ```text
//! cargo run --release --example crawl -- https://doc.rust-lang.org/book/   # doc.rust-lang.org-book.txt
//! cargo run --release --example crawl -- https://example.org/ --same-host --max-pages 50
//! cargo run --release --example gpt -- --data doc.rust-lang.org-book.txt
//! ```
//!
//! Only the start address's directory is crawled (`--same-host` widens it to the host),
//! robots.txt is obeyed, and `<file>.crawl.json` beside the text records where every page came
//! from and what cleaning did to it.

use anyhow::{Context, Result};
use clap::Parser;
use nervus_datasets::crawl::{CrawlConfig, Event, crawl_to_files};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "Crawl a documentation site into a text corpus for a character model")]
struct Args {
    /// The starting address; links are followed under its directory only.
    url: String,
    /// Follow links anywhere on the start's host, not only under its directory.
    #[arg(long)]
    same_host: bool,
    /// Seconds to wait between requests [default: 1].
    #[arg(long)]
    delay: Option<f64>,
    /// Stop after requesting this many pages [default: 1000].
    #[arg(long)]
    max_pages: Option<usize>,
    /// Stop after reading this many bytes [default: 100000000].
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Directory for `<name>.txt` and `<name>.txt.crawl.json`.
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let mut config = CrawlConfig::new(&args.url);
    config.same_host = args.same_host;
    config.out_dir = args.out;
    if let Some(d) = args.delay {
        config.delay = Duration::try_from_secs_f64(d)
            .with_context(|| format!("--delay {d}: not a number of seconds"))?;
    }
    if let Some(n) = args.max_pages {
        config.max_pages = n;
    }
    if let Some(n) = args.max_bytes {
        config.max_bytes = n;
    }

    let (corpus, written) = crawl_to_files(&config, &mut |event| match event {
        Event::Robots { url, outcome } => println!("robots  {url}: {outcome}"),
        Event::Page {
            url,
            status,
            bytes,
            chars,
            pages,
            total_bytes,
        } => println!(
            "page {pages:>4}  {url}  ({status}, {bytes} bytes, {chars} chars; {total_bytes} bytes so far)"
        ),
        Event::Skipped(s) => println!("skip    {}  [{}] {}", s.url, s.reason, s.detail),
        Event::Stopped(stop) => println!("{stop}"),
    })?;

    let m = &corpus.manifest;
    let c = &m.cleaning;
    println!();
    println!(
        "{} pages, {} characters, {} distinct ({} skipped)",
        m.pages.len(),
        m.text.chars,
        m.text.distinct,
        m.skipped.len()
    );
    println!("{} characters mapped onto ASCII", c.mapped_total());
    for x in &c.mapped {
        println!("  {} {:?} -> {:?}  {} times", x.code, x.from, x.to, x.count);
    }
    println!(
        "{} characters dropped (non-ASCII seen fewer than {} times)",
        c.dropped_total(),
        c.min_count
    );
    for d in &c.dropped {
        println!("  {} {:?}  {} times", d.code, d.char, d.count);
    }
    println!();
    println!("text:     {}", written.text.display());
    println!("manifest: {}", written.manifest.display());
    println!();
    println!("train on it:");
    println!(
        "  cargo run --release --example gpt -- --data {}",
        written.text.display()
    );
    Ok(())
}
