//! `cargo xtask retrieval`: how well search finds the page that answers a question, on the
//! vendored Rust book and its labelled questions, and how fast. Writes the `retrieval:*` tables
//! of README.md and docs/retrieval.md.
//!
//! A question counts as found at rank r when the r-th passage comes from the page its label
//! names (passages, not chunks: what a user or a reader is shown). recall@k is the share found
//! within k, MRR the mean of 1/r over the first ten (0 when not found), section@5 the share whose
//! labelled section is inside one of the first five passages.

use anyhow::{Context, Result, bail};
use nervus_inference::retrieve::{Bm25, Retriever, SearchOptions};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct RetrievalArgs {
    /// The corpus (its `.crawl.json` manifest beside it).
    #[arg(long, default_value = "datasets/data/rust-book/rust-book.txt")]
    corpus: PathBuf,
    /// The labelled questions: a JSON list of {question, page, section}.
    #[arg(long, default_value = "datasets/data/rust-book/questions.json")]
    questions: PathBuf,
    /// Print the tables without rewriting README.md and docs/retrieval.md.
    #[arg(long)]
    dry_run: bool,
}

/// A question in a user's words, and where the book answers it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Labelled {
    question: String,
    /// The page's file name, e.g. `ch08-01-vectors.html`.
    page: String,
    /// The heading of the section that answers it, as written in the book.
    section: String,
}

impl Labelled {
    /// Whether `url` is the labelled page.
    fn names(&self, url: &str) -> bool {
        url.strip_suffix(self.page.as_str())
            .is_some_and(|base| base.ends_with('/'))
    }
}

/// Where each question's page first came back (1-based), and whether its section did within 5.
struct Ranks {
    ranks: Vec<Option<usize>>,
    sections: Vec<bool>,
}

impl Ranks {
    fn recall(&self, k: usize) -> f64 {
        let n = self
            .ranks
            .iter()
            .filter(|r| r.is_some_and(|r| r <= k))
            .count();
        n as f64 / self.ranks.len() as f64
    }

    fn mrr(&self) -> f64 {
        let s: f64 = self.ranks.iter().flatten().map(|&r| 1.0 / r as f64).sum();
        s / self.ranks.len() as f64
    }

    fn section5(&self) -> f64 {
        self.sections.iter().filter(|&&s| s).count() as f64 / self.sections.len() as f64
    }
}

/// Passages asked for: MRR looks at the first ten.
const DEPTH: usize = 10;

fn evaluate(r: &Retriever, questions: &[Labelled], options: &SearchOptions) -> Result<Ranks> {
    let options = SearchOptions {
        passages: DEPTH,
        ..*options
    };
    let mut ranks = Vec::with_capacity(questions.len());
    let mut sections = Vec::with_capacity(questions.len());
    for q in questions {
        let found = r.search_unchecked(&q.question, &options)?;
        let on_page =
            |p: &nervus_inference::retrieve::Passage| q.names(&r.corpus.pages[p.page].url);
        ranks.push(found.passages.iter().position(on_page).map(|i| i + 1));
        sections.push(
            found
                .passages
                .iter()
                .take(5)
                .filter(|p| on_page(p))
                .any(|p| {
                    p.chunks
                        .clone()
                        .any(|c| same_heading(&r.corpus.chunks[c].section, &q.section))
                }),
        );
    }
    Ok(Ranks { ranks, sections })
}

fn same_heading(a: &str, b: &str) -> bool {
    let clean = |s: &str| s.trim_start_matches('#').trim().to_lowercase();
    clean(a) == clean(b)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

pub fn run(args: RetrievalArgs) -> Result<()> {
    let json = std::fs::read(&args.questions)
        .with_context(|| format!("reading {}", args.questions.display()))?;
    let questions: Vec<Labelled> = serde_json::from_slice(&json).with_context(|| {
        format!(
            "{}: not a list of labelled questions",
            args.questions.display()
        )
    })?;
    if questions.is_empty() {
        bail!("{}: no questions", args.questions.display());
    }
    let stemmed = Retriever::open(&args.corpus, true)?;
    let plain = Retriever::open(&args.corpus, false)?;
    for q in &questions {
        if !stemmed.corpus.pages.iter().any(|p| q.names(&p.url)) {
            bail!(
                "{}: {:?} names page {} that the corpus does not have",
                args.questions.display(),
                q.question,
                q.page
            );
        }
        let page_has_section = stemmed.corpus.chunks.iter().any(|c| {
            q.names(&stemmed.corpus.pages[c.page].url) && same_heading(&c.section, &q.section)
        });
        if !page_has_section {
            bail!(
                "{}: {:?}: page {} has no section {:?}",
                args.questions.display(),
                q.question,
                q.page,
                q.section
            );
        }
    }
    let defaults = SearchOptions::default();

    // Stemming × the specific-term rule.
    let mut recall = String::from(
        "| stemming | specific-term rule | recall@1 | recall@5 | MRR@10 | section@5 |\n|---|---|---|---|---|---|\n",
    );
    let mut default_ranks = None;
    for (stem, r) in [(true, &stemmed), (false, &plain)] {
        for rule in [true, false] {
            let options = SearchOptions {
                specific_rule: rule,
                ..defaults
            };
            let ranks = evaluate(r, &questions, &options)?;
            let _ = writeln!(
                recall,
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                if stem {
                    "Porter (Snowball English)"
                } else {
                    "none"
                },
                if rule { "on" } else { "off" },
                ranks.recall(1),
                ranks.recall(5),
                ranks.mrr(),
                ranks.section5()
            );
            if stem && rule {
                default_ranks = Some(ranks);
            }
        }
    }
    let default_ranks = default_ranks.expect("the default variant ran");

    // Times: the whole open (read, check sha256, chunk, index) and the index alone, median of 5;
    // every question's query, median and slowest.
    let mut opens = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let r = Retriever::open(&args.corpus, true)?;
        std::hint::black_box(r.builds);
        opens.push(start.elapsed());
    }
    let mut builds = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let index = nervus_inference::retrieve::Index::build(
            &stemmed.corpus,
            nervus_inference::retrieve::Analyzer::new(true),
        );
        builds.push(start.elapsed());
        std::hint::black_box(index.vocabulary());
    }
    let mut queries = Vec::new();
    for _ in 0..3 {
        for q in &questions {
            queries.push(stemmed.search_unchecked(&q.question, &defaults)?.took);
        }
    }
    let slowest = *queries.iter().max().expect("questions");
    let corpus = &stemmed.corpus;
    let times = format!(
        "Opening {} ({:.2} MB, {} pages, {} paragraphs, {} stemmed terms: read, sha256 checked, \
         chunked, indexed) takes {} (median of 5), the index alone {}; a question takes {} (median \
         of {} queries; the slowest {}).\n",
        args.corpus
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        corpus.text.len() as f64 / 1e6,
        corpus.pages.len(),
        corpus.chunks.len(),
        stemmed.index.vocabulary(),
        ms(median(opens)),
        ms(median(builds)),
        ms(median(queries.clone())),
        queries.len(),
        ms(slowest),
    );

    // BM25's constants and the specific share, around the defaults.
    let mut grid = String::from("| k1 \\ b |");
    let bs = [0.3, 0.5, 0.75, 0.9];
    for b in bs {
        let _ = write!(grid, " {b} |");
    }
    grid.push_str("\n|---|");
    grid.push_str(&"---|".repeat(bs.len()));
    grid.push('\n');
    for k1 in [0.6, 0.9, 1.2, 1.6, 2.0] {
        let _ = write!(grid, "| {k1} |");
        for b in bs {
            let options = SearchOptions {
                bm25: Bm25 { k1, b },
                ..defaults
            };
            let ranks = evaluate(&stemmed, &questions, &options)?;
            let _ = write!(grid, " {:.3} / {:.3} |", ranks.recall(5), ranks.mrr());
        }
        grid.push('\n');
    }
    let mut share = String::from(
        "| specific: at most this share of paragraphs | recall@1 | recall@5 | MRR@10 |\n|---|---|---|---|\n",
    );
    for s in [0.002, 0.005, 0.01, 0.02, 0.05, 0.1] {
        let options = SearchOptions {
            specific: s,
            ..defaults
        };
        let ranks = evaluate(&stemmed, &questions, &options)?;
        let _ = writeln!(
            share,
            "| {s} ({} paragraphs) | {:.3} | {:.3} | {:.3} |",
            ((s * corpus.chunks.len() as f64).floor() as usize).max(1),
            ranks.recall(1),
            ranks.recall(5),
            ranks.mrr()
        );
    }

    // Each question under the defaults.
    let mut each = String::from("| question | labelled page — section | rank |\n|---|---|---|\n");
    for (q, rank) in questions.iter().zip(&default_ranks.ranks) {
        let _ = writeln!(
            each,
            "| {} | {} — {} | {} |",
            q.question.replace('|', "\\|"),
            q.page,
            q.section.replace('|', "\\|"),
            rank.map_or_else(|| "not in 10".to_string(), |r| r.to_string())
        );
    }

    let blocks = [
        ("recall", &recall),
        ("times", &times),
        ("grid", &grid),
        ("specific", &share),
        ("questions", &each),
    ];
    for (name, body) in blocks {
        println!("retrieval:{name}\n{body}");
        if !args.dry_run && !crate::tables::write_marked("retrieval", name, body)? {
            eprintln!("warning: no page has the retrieval:{name} markers");
        }
    }
    println!(
        "{} questions; defaults: k1 {}, b {}, specific share {}, {} passages of at most {} characters",
        questions.len(),
        defaults.bm25.k1,
        defaults.bm25.b,
        defaults.specific,
        defaults.passages,
        defaults.budget
    );
    Ok(())
}
