//! The words of a text as the index sees them, and BM25 over a corpus's chunks.
//!
//! A word is a run of letters, digits and `_` (so `read_line` and `i32` stay whole and `Vec<T>`
//! gives `vec`), lowercased. Single characters are dropped on both sides: `I/O` would otherwise
//! ask for a lone `i`, which almost no chunk has and BM25 therefore pays well for. There is no
//! stop-word list: a word in nearly every chunk has an inverse document frequency near zero and
//! changes no ranking, and a hand-kept list would be wrong for a corpus about the word `if`.
//! Stemming is Snowball's English algorithm (Porter's revision of his own), on both sides, so
//! "pushing" finds "push" while "string" stays "string".

use super::corpus::Corpus;
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::HashMap;

/// How text becomes terms.
pub struct Analyzer {
    stemmer: Option<Stemmer>,
}

impl Analyzer {
    /// With Porter's stemmer (`stem`) or without.
    pub fn new(stem: bool) -> Self {
        Self {
            stemmer: stem.then(|| Stemmer::create(Algorithm::English)),
        }
    }

    pub fn stems(&self) -> bool {
        self.stemmer.is_some()
    }

    /// The words of `text`, lowercased, single characters dropped, in order.
    pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
        Self::spellings(text).map(str::to_lowercase)
    }

    /// The words of `text` as written (not yet lowercased), single characters dropped.
    fn spellings(text: &str) -> impl Iterator<Item = &str> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.chars().nth(1).is_some())
    }

    /// What `word` (already lowercased) is indexed as.
    pub fn term(&self, word: &str) -> String {
        match &self.stemmer {
            Some(s) => s.stem(word).into_owned(),
            None => word.to_string(),
        }
    }

    /// The terms of `text`, in order.
    pub fn terms<'a>(&'a self, text: &'a str) -> impl Iterator<Item = String> + 'a {
        Self::words(text).map(|w| self.term(&w))
    }
}

/// BM25's two constants. The defaults are the usual ones (Robertson's k1 1.2, b 0.75); `cargo
/// xtask retrieval` measures a grid around them on the labelled questions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25 {
    /// How fast a term's repeats stop counting.
    pub k1: f64,
    /// How much a long chunk is discounted (0: not at all, 1: in proportion to its length).
    pub b: f64,
}

impl Default for Bm25 {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75 }
    }
}

/// An inverted index of a corpus's chunks.
pub struct Index {
    analyzer: Analyzer,
    ids: HashMap<String, usize>,
    /// For each term, the chunks it is in and how many times, in chunk order.
    postings: Vec<Vec<(u32, u32)>>,
    /// Each chunk's length in terms.
    lens: Vec<u32>,
    avg_len: f64,
}

/// A question's term, as the index sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The question's word that gave it (the first, when several stem alike).
    pub word: String,
    /// What it is indexed as.
    pub term: String,
    /// How many chunks have it.
    pub df: usize,
    /// BM25's inverse document frequency: ln(1 + (N − df + ½) / (df + ½)).
    pub idf: f64,
    /// In few enough chunks to say what a question is about (see [`Index::query`]).
    pub specific: bool,
    id: Option<usize>,
}

impl Index {
    /// Indexes every chunk of `corpus`. Each distinct spelling is lowercased and stemmed once
    /// (a book has some 10,000 of them among 200,000 words), and a chunk's counts go to a dense
    /// array that is cleared by the terms it touched.
    pub fn build(corpus: &Corpus, analyzer: Analyzer) -> Self {
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut spellings: HashMap<&str, usize> = HashMap::new();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut lens = Vec::with_capacity(corpus.chunks.len());
        let mut counts: Vec<u32> = Vec::new();
        let mut touched: Vec<usize> = Vec::new();
        for c in 0..corpus.chunks.len() {
            let mut len = 0u32;
            for word in Analyzer::spellings(corpus.chunk_text(c)) {
                let id = match spellings.get(word) {
                    Some(&id) => id,
                    None => {
                        let term = analyzer.term(&word.to_lowercase());
                        let next = ids.len();
                        let id = *ids.entry(term).or_insert(next);
                        if id == postings.len() {
                            postings.push(Vec::new());
                            counts.push(0);
                        }
                        spellings.insert(word, id);
                        id
                    }
                };
                if counts[id] == 0 {
                    touched.push(id);
                }
                counts[id] += 1;
                len += 1;
            }
            touched.sort_unstable();
            for &id in &touched {
                postings[id].push((c as u32, counts[id]));
                counts[id] = 0;
            }
            touched.clear();
            lens.push(len);
        }
        let total: f64 = lens.iter().map(|&l| f64::from(l)).sum();
        let avg_len = (total / lens.len().max(1) as f64).max(1.0);
        Self {
            analyzer,
            ids,
            postings,
            lens,
            avg_len,
        }
    }

    pub fn chunks(&self) -> usize {
        self.lens.len()
    }

    /// Distinct terms.
    pub fn vocabulary(&self) -> usize {
        self.ids.len()
    }

    pub fn stems(&self) -> bool {
        self.analyzer.stems()
    }

    /// The distinct terms of `question`, in the order first asked. A term is specific when at
    /// most a `specific` share of the chunks has it (and at least one does).
    pub fn query(&self, question: &str, specific: f64) -> Vec<Term> {
        let n = self.chunks() as f64;
        let limit = (specific * n).floor().max(1.0) as usize;
        let mut out: Vec<Term> = Vec::new();
        for word in Analyzer::words(question) {
            let term = self.analyzer.term(&word);
            if out.iter().any(|t| t.term == term) {
                continue;
            }
            let id = self.ids.get(&term).copied();
            let df = id.map_or(0, |i| self.postings[i].len());
            let idf = (1.0 + (n - df as f64 + 0.5) / (df as f64 + 0.5)).ln();
            out.push(Term {
                word,
                term,
                df,
                idf,
                specific: df > 0 && df <= limit,
                id,
            });
        }
        out
    }

    /// Every chunk with at least one of `terms`, with each term's share of its BM25 score
    /// (`contributions[i]` for `terms[i]`), in chunk order.
    pub fn score(&self, terms: &[Term], bm25: Bm25) -> Vec<Scored> {
        let mut by_chunk: HashMap<u32, Vec<f64>> = HashMap::new();
        for (i, t) in terms.iter().enumerate() {
            let Some(id) = t.id else { continue };
            for &(c, tf) in &self.postings[id] {
                let tf = f64::from(tf);
                let len = f64::from(self.lens[c as usize]);
                let norm = bm25.k1 * (1.0 - bm25.b + bm25.b * len / self.avg_len);
                let s = t.idf * tf * (bm25.k1 + 1.0) / (tf + norm);
                by_chunk.entry(c).or_insert_with(|| vec![0.0; terms.len()])[i] = s;
            }
        }
        let mut out: Vec<Scored> = by_chunk
            .into_iter()
            .map(|(c, contributions)| Scored {
                chunk: c as usize,
                score: contributions.iter().sum(),
                contributions,
            })
            .collect();
        out.sort_unstable_by_key(|s| s.chunk);
        out
    }
}

/// A chunk's score for a question.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    pub chunk: usize,
    pub score: f64,
    /// Each question term's part of `score`, in the question's order.
    pub contributions: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_drop_single_characters_and_split_on_punctuation() {
        let w: Vec<String> =
            Analyzer::words("How do I use Vec<T>, I/O and read_line in i32?").collect();
        assert_eq!(
            w,
            ["how", "do", "use", "vec", "and", "read_line", "in", "i32"]
        );
    }

    #[test]
    fn porter_reduces_pushing_and_leaves_string_alone() {
        let a = Analyzer::new(true);
        assert_eq!(a.term("pushing"), a.term("push"));
        assert_eq!(a.term("pushed"), a.term("push"));
        assert_eq!(a.term("string"), "string");
        assert_ne!(a.term("string"), a.term("str"));
        assert_eq!(Analyzer::new(false).term("pushing"), "pushing");
    }

    #[test]
    fn the_index_counts_what_the_analyzer_says_spelling_by_spelling_or_not() {
        let corpus = crate::retrieve::testing::corpus(&[
            &[
                "# Push",
                "Pushing PUSHED push, push; Vec<T> and vec!",
                "A I x",
            ],
            &["# Strings", "String strings STRING str", "push the String"],
        ]);
        for stem in [true, false] {
            let index = Index::build(&corpus, Analyzer::new(stem));
            let analyzer = Analyzer::new(stem);
            let mut expected: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
            for c in 0..corpus.chunks.len() {
                let mut counts: HashMap<String, u32> = HashMap::new();
                for t in analyzer.terms(corpus.chunk_text(c)) {
                    *counts.entry(t).or_default() += 1;
                }
                for (t, n) in counts {
                    expected.entry(t).or_default().push((c as u32, n));
                }
            }
            assert_eq!(index.vocabulary(), expected.len());
            for (term, postings) in &expected {
                let id = index.ids[term];
                assert_eq!(&index.postings[id], postings, "{term} (stem {stem})");
            }
            let words: u32 = index.lens.iter().sum();
            assert_eq!(words, 16, "stem {stem}");
        }
    }
}
