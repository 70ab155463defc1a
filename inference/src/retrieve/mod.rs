//! Answering from a corpus without training on it, the finding half: a crawled corpus
//! ([`corpus`]) is cut into paragraphs, ranked with BM25 ([`index`]), and the hits grown into
//! passages that fit a reader's prompt ([`passage`]). The index is arithmetic, not a second
//! model, and it can say why each passage came back: every question term's share of the score.
//!
//! [`Retriever`] keeps the index for as long as the files under it are unchanged, and builds it
//! again when either the text or its manifest changes (size or modification time).

pub mod corpus;
pub mod index;
pub mod passage;
#[cfg(test)]
pub(crate) mod testing;

pub use corpus::{Corpus, manifest_path};
pub use index::{Analyzer, Bm25, Index, Term};
pub use passage::Passage;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// What went wrong, in one line that names the file or the question.
#[derive(Debug, thiserror::Error)]
pub enum RetrieveError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: no manifest {} beside it (the crawl example writes one; search needs its pages)",
        corpus.display(),
        manifest.display()
    )]
    NoManifest { corpus: PathBuf, manifest: PathBuf },
    #[error("{}: {detail}", path.display())]
    Manifest { path: PathBuf, detail: String },
    #[error(
        "{} is not the text {} describes (its sha256 differs): crawl again, or put back the file",
        corpus.display(),
        manifest.display()
    )]
    Mismatch { corpus: PathBuf, manifest: PathBuf },
    #[error("{}: not UTF-8 at byte {offset}", path.display())]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("{}: the corpus has no text to search", path.display())]
    Empty { path: PathBuf },
    #[error(
        "the question {question:?} has no word to search for (words of one character and \
         punctuation are not indexed)"
    )]
    NoWords { question: String },
    #[error("{0}")]
    Option(String),
}

impl RetrieveError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// How a search runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchOptions {
    pub bm25: Bm25,
    /// When the question has a specific term, a hit must match one.
    pub specific_rule: bool,
    /// A term is specific when at most this share of the chunks has it: in the Rust book the
    /// words a question is about ("closure", "vector") fall under 2%, the words questions are
    /// made of ("how", "use") over it. Set before the labelled questions were written; `cargo
    /// xtask retrieval` measures other shares on them.
    pub specific: f64,
    /// Passages returned.
    pub passages: usize,
    /// The most characters of one passage ([`budget`]).
    pub budget: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            bm25: Bm25::default(),
            specific_rule: true,
            specific: 0.02,
            passages: 5,
            budget: budget(DEFAULT_CONTEXT, BPE_CHARS_PER_TOKEN),
        }
    }
}

impl SearchOptions {
    /// Refuses settings that would make a search meaningless, naming the setting.
    pub fn check(&self) -> Result<(), RetrieveError> {
        let bad = |s: String| Err(RetrieveError::Option(s));
        let Bm25 { k1, b } = self.bm25;
        if !(k1.is_finite() && k1 >= 0.0) {
            return bad(format!(
                "k1 {k1}: BM25's k1 is a number from 0 up (usually 1.2)"
            ));
        }
        if !(0.0..=1.0).contains(&b) {
            return bad(format!(
                "b {b}: BM25's b is a number from 0 to 1 (usually 0.75)"
            ));
        }
        if !(self.specific > 0.0 && self.specific <= 1.0) {
            return bad(format!(
                "specific {}: the share of paragraphs is a number above 0, at most 1",
                self.specific
            ));
        }
        if self.passages == 0 {
            return bad("passages 0: ask for at least one".into());
        }
        if self.budget == 0 {
            return bad("budget 0: a passage needs at least one character".into());
        }
        Ok(())
    }
}

/// The context, in tokens, of the reader `search` plans for when none is named.
pub const DEFAULT_CONTEXT: usize = 4096;
/// Characters a byte-level BPE token stands for in English prose, roughly.
pub const BPE_CHARS_PER_TOKEN: f64 = 4.0;
/// The most characters of retrieved text: a long-context reader handed fifty thousand
/// characters pays to read them on every turn and loses the passage that matters among them.
pub const BUDGET_CAP: usize = 12_000;

/// The retrieved-text budget for a reader with a `context`-token window: two fifths of it in
/// characters, at most [`BUDGET_CAP`]. A constant would be a comfortable fifth of one model's
/// window and a useless sliver of another's.
pub fn budget(context: usize, chars_per_token: f64) -> usize {
    ((context as f64 * chars_per_token * 2.0 / 5.0) as usize).min(BUDGET_CAP)
}

/// The passages found for a question, with what the question became.
#[derive(Clone, Debug)]
pub struct Found {
    pub terms: Vec<Term>,
    pub passages: Vec<Passage>,
    pub took: Duration,
}

impl Found {
    /// What `search` shows: the question as terms (a specific one marked `*`), then each passage
    /// with its address, the section of its best paragraph, its score, and every term's part of
    /// that score.
    pub fn render(&self, corpus: &Corpus) -> String {
        use std::fmt::Write as _;
        let mut out = String::from("terms:");
        for t in &self.terms {
            let stem = if t.term == t.word {
                String::new()
            } else {
                format!(" → {}", t.term)
            };
            let mark = if t.specific { "*" } else { "" };
            let _ = write!(
                out,
                "  {}{stem}{mark} (in {}, idf {:.2})",
                t.word, t.df, t.idf
            );
        }
        out.push_str("\n  (* specific: ");
        out.push_str(if self.terms.iter().any(|t| t.specific) {
            "a passage must have one)\n"
        } else {
            "none, so any term will do)\n"
        });
        if self.passages.is_empty() {
            out.push_str("\nno paragraph has any of these words\n");
        }
        for (i, p) in self.passages.iter().enumerate() {
            let page = &corpus.pages[p.page];
            let section = &corpus.chunks[p.best].section;
            let _ = writeln!(
                out,
                "\n[{}] {:.2}  {}  § {}",
                i + 1,
                p.score,
                page.url,
                if section.is_empty() {
                    &page.heading
                } else {
                    section
                }
            );
            let why: Vec<String> = p
                .why
                .iter()
                .filter(|(_, s)| *s > 0.0)
                .map(|(w, s)| format!("{w} {s:.2}"))
                .collect();
            let _ = writeln!(
                out,
                "    why: {}  ({} of the page's {} paragraphs, {} hit{}{})",
                why.join(" + "),
                p.chunks.len(),
                page.chunks.len(),
                p.hits,
                if p.hits == 1 { "" } else { "s" },
                if p.cut { ", cut to the budget" } else { "" }
            );
            for line in p.text.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        out
    }
}

/// A corpus, its index, and the state of the files they were built from.
pub struct Retriever {
    pub corpus: Corpus,
    pub index: Index,
    stamp: Stamp,
    /// How long the last build took.
    pub built_in: Duration,
    /// How many times the index has been built (1 after [`Retriever::open`]).
    pub builds: usize,
}

/// Size and modification time of the text and of its manifest.
type Stamp = [(u64, Option<SystemTime>); 2];

fn stamp(path: &Path) -> Result<Stamp, RetrieveError> {
    let one = |p: &Path| -> Result<(u64, Option<SystemTime>), RetrieveError> {
        let m = std::fs::metadata(p).map_err(|e| RetrieveError::io(p, e))?;
        Ok((m.len(), m.modified().ok()))
    };
    let manifest = manifest_path(path);
    let second = match one(&manifest) {
        Err(RetrieveError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(RetrieveError::NoManifest {
                corpus: path.to_path_buf(),
                manifest,
            });
        }
        other => other?,
    };
    Ok([one(path)?, second])
}

impl Retriever {
    /// Reads and indexes the corpus at `path` (with Porter's stemmer when `stem`).
    pub fn open(path: &Path, stem: bool) -> Result<Self, RetrieveError> {
        Self::build(path, stem, stamp(path)?, 1)
    }

    /// Reads and indexes the files whose state, taken before reading, is `stamp`.
    fn build(path: &Path, stem: bool, stamp: Stamp, builds: usize) -> Result<Self, RetrieveError> {
        let start = Instant::now();
        let corpus = Corpus::open(path)?;
        let index = Index::build(&corpus, Analyzer::new(stem));
        Ok(Self {
            corpus,
            index,
            stamp,
            built_in: start.elapsed(),
            builds,
        })
    }

    /// Builds the index again if the text or its manifest changed since it was built.
    pub fn refresh(&mut self) -> Result<bool, RetrieveError> {
        let now = stamp(&self.corpus.path)?;
        if now == self.stamp {
            return Ok(false);
        }
        *self = Self::build(
            &self.corpus.path.clone(),
            self.index.stems(),
            now,
            self.builds + 1,
        )?;
        Ok(true)
    }

    /// The best passages for `question`, after checking that the corpus is unchanged.
    pub fn search(
        &mut self,
        question: &str,
        options: &SearchOptions,
    ) -> Result<Found, RetrieveError> {
        self.refresh()?;
        self.search_unchecked(question, options)
    }

    /// [`Retriever::search`] without looking at the files (for measuring query time alone).
    pub fn search_unchecked(
        &self,
        question: &str,
        options: &SearchOptions,
    ) -> Result<Found, RetrieveError> {
        options.check()?;
        let start = Instant::now();
        let terms = self.index.query(question, options.specific);
        if terms.is_empty() {
            return Err(RetrieveError::NoWords {
                question: question.to_string(),
            });
        }
        let scored = self.index.score(&terms, options.bm25);
        let passages = passage::passages(
            &self.corpus,
            &terms,
            &scored,
            options.passages,
            options.budget,
            options.specific_rule,
        );
        Ok(Found {
            terms,
            passages,
            took: start.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temporary one.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nervus-retrieve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, pages: &[&[&str]]) {
        let (text, manifest) = testing::files(pages);
        std::fs::write(path, text).unwrap();
        std::fs::write(manifest_path(path), manifest).unwrap();
    }

    const BOOK: &[&[&str]] = &[
        &[
            "# Vectors",
            "Pushing a value onto a vector.",
            "Reading from a vector.",
        ],
        &[
            "# Strings",
            "A string is text.",
            "Concatenating strings with format.",
        ],
    ];

    #[test]
    fn the_cache_notices_a_changed_corpus_and_refuses_text_its_manifest_does_not_describe() {
        let dir = scratch("cache");
        let path = dir.join("book.txt");
        write(&path, BOOK);
        let mut r = Retriever::open(&path, true).unwrap();
        let options = SearchOptions::default();
        let found = r.search("how do I push", &options).unwrap();
        assert_eq!(found.passages.len(), 1);
        assert_eq!(r.builds, 1);
        // Unchanged files: no rebuild.
        r.search("strings", &options).unwrap();
        assert_eq!(r.builds, 1);

        // The text edited behind the manifest's back.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("Pushing", "Popping a value, or pushing"),
        )
        .unwrap();
        let err = r.search("push", &options).unwrap_err();
        assert!(matches!(err, RetrieveError::Mismatch { .. }), "{err}");
        assert!(err.to_string().contains("book.txt"), "{err}");

        // Crawled again: both files new, the index rebuilt, the new words found.
        write(
            &path,
            &[&[
                "# Maps",
                "A hash map stores keys with values; inserting a key twice overwrites.",
            ]],
        );
        let found = r.search("overwriting a key", &options).unwrap();
        assert_eq!(r.builds, 2);
        assert_eq!(found.passages.len(), 1);
        assert!(found.passages[0].text.contains("overwrites"));
        assert!(r.search("pushing", &options).unwrap().passages.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_corpora_and_questions_get_a_line_that_names_them() {
        let dir = scratch("bad");
        let empty = dir.join("empty.txt");
        write(&empty, &[]);
        let err = Retriever::open(&empty, true).err().unwrap();
        assert!(matches!(err, RetrieveError::Empty { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("empty.txt: the corpus has no text"),
            "{err}"
        );

        let bare = dir.join("bare.txt");
        std::fs::write(&bare, "Some text without a manifest.\n").unwrap();
        let err = Retriever::open(&bare, true).err().unwrap();
        assert!(matches!(err, RetrieveError::NoManifest { .. }), "{err}");
        assert!(err.to_string().contains("bare.txt.crawl.json"), "{err}");

        let path = dir.join("book.txt");
        write(&path, BOOK);
        let mut r = Retriever::open(&path, true).unwrap();
        for question in ["", "?! a I", "—"] {
            let err = r.search(question, &SearchOptions::default()).unwrap_err();
            assert!(
                matches!(err, RetrieveError::NoWords { .. }),
                "{question:?}: {err}"
            );
        }
        // A word the corpus lacks is a question with an empty answer, not an error.
        assert!(
            r.search("zebra", &SearchOptions::default())
                .unwrap()
                .passages
                .is_empty()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn options_that_make_no_sense_are_refused_by_name() {
        let ok = SearchOptions::default();
        assert!(ok.check().is_ok());
        let cases = [
            (
                SearchOptions {
                    bm25: Bm25 {
                        k1: f64::NAN,
                        b: 0.75,
                    },
                    ..ok
                },
                "k1 NaN",
            ),
            (
                SearchOptions {
                    bm25: Bm25 { k1: -1.0, b: 0.75 },
                    ..ok
                },
                "k1 -1",
            ),
            (
                SearchOptions {
                    bm25: Bm25 { k1: 1.2, b: 1.5 },
                    ..ok
                },
                "b 1.5",
            ),
            (
                SearchOptions {
                    bm25: Bm25 {
                        k1: 1.2,
                        b: f64::NAN,
                    },
                    ..ok
                },
                "b NaN",
            ),
            (
                SearchOptions {
                    specific: 0.0,
                    ..ok
                },
                "specific 0",
            ),
            (SearchOptions { passages: 0, ..ok }, "passages 0"),
            (SearchOptions { budget: 0, ..ok }, "budget 0"),
        ];
        for (o, says) in cases {
            let err = o.check().unwrap_err().to_string();
            assert!(err.starts_with(says), "{says}: {err}");
        }
    }

    #[test]
    fn the_budget_is_two_fifths_of_the_context_in_characters_capped() {
        assert_eq!(budget(2048, 4.0), 3276);
        assert_eq!(budget(4096, 4.0), 6553);
        assert_eq!(budget(32768, 4.0), BUDGET_CAP);
        assert_eq!(budget(512, 1.0), 204);
    }
}
