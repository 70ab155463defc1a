//! From ranked chunks to passages a reader can use. Ranking wants small chunks and reading wants
//! whole sections: a hit is grown by a paragraph on each side, hits whose runs overlap or touch
//! become one passage in reading order (never across a page), and a passage longer than the
//! budget is cut around the paragraph that earned its score, not from the front, where the
//! answer may well be at the end.

use super::corpus::Corpus;
use super::index::{Scored, Term};
use std::ops::Range;

/// A passage: consecutive paragraphs of one page.
#[derive(Clone, Debug, PartialEq)]
pub struct Passage {
    pub page: usize,
    /// The chunks it holds, after any cut.
    pub chunks: Range<usize>,
    /// The chunks the hits and their neighbours covered, before the cut.
    pub merged: Range<usize>,
    /// The chunk that scored best, and its score: the passage's rank.
    pub best: usize,
    pub score: f64,
    /// Each question term's part of the best chunk's score, in the question's order.
    pub why: Vec<(String, f64)>,
    /// The hits it grew from.
    pub hits: usize,
    /// The paragraphs, joined by blank lines (cut to the budget).
    pub text: String,
    /// Whether the budget cut it: paragraphs left out, or the best one itself shortened.
    pub cut: bool,
}

/// A run of chunks under construction.
struct Run {
    page: usize,
    lo: usize,
    hi: usize,
    best: usize,
    score: f64,
    hits: usize,
}

/// The best `count` passages for `scored` (every matching chunk, see [`super::index::Index::score`]),
/// each at most `budget` characters, best first. `rule`: when the question has a specific term,
/// a chunk must match one to be a hit.
pub fn passages(
    corpus: &Corpus,
    terms: &[Term],
    scored: &[Scored],
    count: usize,
    budget: usize,
    rule: bool,
) -> Vec<Passage> {
    let specific: Vec<bool> = terms.iter().map(|t| t.specific).collect();
    let any_specific = rule && specific.iter().any(|&s| s);
    let mut hits: Vec<&Scored> = scored
        .iter()
        .filter(|s| s.score > 0.0)
        .filter(|s| {
            !any_specific
                || s.contributions
                    .iter()
                    .zip(&specific)
                    .any(|(&c, &sp)| sp && c > 0.0)
        })
        .collect();
    // Best first; equal scores in reading order, so that a ranking never depends on a hash.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk.cmp(&b.chunk)));
    let mut runs: Vec<Run> = Vec::new();
    for hit in hits {
        let c = hit.chunk;
        let page = corpus.chunks[c].page;
        let span = &corpus.pages[page].chunks;
        let lo = c.saturating_sub(1).max(span.start);
        let hi = (c + 1).min(span.end - 1);
        let touching: Vec<usize> = (0..runs.len())
            .filter(|&i| runs[i].page == page && lo <= runs[i].hi + 1 && runs[i].lo <= hi + 1)
            .collect();
        if touching.is_empty() {
            if runs.len() == count {
                break;
            }
            runs.push(Run {
                page,
                lo,
                hi,
                best: c,
                score: hit.score,
                hits: 1,
            });
            continue;
        }
        // Fold every run this hit touches into the first (best) of them.
        let first = touching[0];
        runs[first].lo = runs[first].lo.min(lo);
        runs[first].hi = runs[first].hi.max(hi);
        runs[first].hits += 1;
        for &i in touching[1..].iter().rev() {
            let r = runs.remove(i);
            let f = &mut runs[first];
            f.lo = f.lo.min(r.lo);
            f.hi = f.hi.max(r.hi);
            f.hits += r.hits;
        }
    }
    let score_of = |c: usize| -> f64 {
        scored
            .binary_search_by_key(&c, |s| s.chunk)
            .map_or(0.0, |i| scored[i].score)
    };
    runs.into_iter()
        .map(|r| {
            let chunks = cut(corpus, r.lo..r.hi + 1, r.best, budget, &score_of);
            let mut text = chunks
                .clone()
                .map(|c| corpus.chunk_text(c))
                .collect::<Vec<_>>()
                .join("\n\n");
            let mut shortened = false;
            if text.chars().count() > budget {
                text = text.chars().take(budget).collect();
                shortened = true;
            }
            let cut = shortened || chunks != (r.lo..r.hi + 1);
            let best = scored
                .binary_search_by_key(&r.best, |s| s.chunk)
                .map(|i| &scored[i])
                .ok();
            let why = terms
                .iter()
                .enumerate()
                .map(|(i, t)| (t.word.clone(), best.map_or(0.0, |b| b.contributions[i])))
                .collect();
            Passage {
                page: r.page,
                chunks,
                merged: r.lo..r.hi + 1,
                best: r.best,
                score: r.score,
                why,
                hits: r.hits,
                text,
                cut,
            }
        })
        .collect()
}

/// The chunks of `run` kept within `budget` characters: the best chunk, then its neighbours,
/// the better-scoring side first (the following one on a tie), while they fit.
fn cut(
    corpus: &Corpus,
    run: Range<usize>,
    best: usize,
    budget: usize,
    score_of: &dyn Fn(usize) -> f64,
) -> Range<usize> {
    let len = |c: usize| corpus.chunk_text(c).chars().count();
    let (mut lo, mut hi) = (best, best + 1);
    let mut used = len(best);
    loop {
        let before = (lo > run.start).then(|| lo - 1);
        let after = (hi < run.end).then_some(hi);
        let fits = |c: usize| used + 2 + len(c) <= budget;
        let pick = match (before.filter(|&c| fits(c)), after.filter(|&c| fits(c))) {
            (Some(b), Some(a)) => {
                if score_of(b) > score_of(a) {
                    b
                } else {
                    a
                }
            }
            (Some(b), None) => b,
            (None, Some(a)) => a,
            (None, None) => break,
        };
        used += 2 + len(pick);
        if pick < lo {
            lo = pick;
        } else {
            hi = pick + 1;
        }
    }
    lo..hi
}

#[cfg(test)]
mod tests {
    use super::super::index::{Analyzer, Bm25, Index};
    use super::*;
    use crate::retrieve::testing::corpus;

    /// Page 0: a section of ten paragraphs where the 2nd, 4th and 8th speak of pushing; page 1
    /// right after it opens with a paragraph about pushing too.
    fn book() -> Corpus {
        corpus(&[
            &[
                "# Vectors",
                "a vector holds values",
                "push adds an element to the vector",
                "elements sit side by side",
                "after a push the vector may move",
                "so a reference may dangle",
                "the borrow checker stops it",
                "push needs a mutable vector",
                "filler one",
                "filler two",
            ],
            &["# Pushing onto strings", "push_str appends", "more"],
        ])
    }

    fn run(c: &Corpus, q: &str, count: usize, budget: usize, rule: bool) -> Vec<Passage> {
        let index = Index::build(c, Analyzer::new(true));
        let terms = index.query(q, 0.02);
        let scored = index.score(&terms, Bm25::default());
        passages(c, &terms, &scored, count, budget, rule)
    }

    #[test]
    fn hits_grow_to_their_neighbours_and_merge_in_reading_order_within_a_page() {
        let c = book();
        let p = run(&c, "pushing", 5, 10_000, true);
        // Hits at chunks 2, 4, 7 (page 0) and 10 (page 1): 1..=5 and 6..=8 touch, so page 0
        // is one passage 1..9; page 1's hit, its first chunk, grows to 11 and not back to 9.
        let spans: Vec<(usize, Range<usize>)> =
            p.iter().map(|p| (p.page, p.merged.clone())).collect();
        assert!(spans.contains(&(0, 1..9)), "{spans:?}");
        assert!(spans.contains(&(1, 10..12)), "{spans:?}");
        assert_eq!(p.len(), 2);
        let first = p.iter().find(|p| p.page == 0).unwrap();
        assert_eq!(first.hits, 3);
        assert!(
            first.text.starts_with("a vector holds values\n\npush adds"),
            "{}",
            first.text
        );
        assert!(!first.cut);
    }

    #[test]
    fn an_overlong_passage_is_cut_around_its_best_paragraph_not_from_the_front() {
        let c = book();
        // "mutable" is only in chunk 7: the cut keeps it, whatever it drops before it.
        let p = run(&c, "push mutable", 5, 60, true);
        let best = &p[0];
        assert_eq!(best.best, 7);
        assert!(best.cut);
        assert!(
            best.text.contains("push needs a mutable vector"),
            "{}",
            best.text
        );
        assert!(best.text.chars().count() <= 60);
        assert!(best.chunks.start > best.merged.start, "{:?}", best.chunks);
    }

    #[test]
    fn with_a_specific_term_a_hit_must_match_one() {
        // Twenty pages of "rust" make it common; "borrow" is in one chunk only.
        let mut pages: Vec<Vec<&str>> = (0..60).map(|_| vec!["# Page", "rust code here"]).collect();
        pages.push(vec!["# Borrowing", "the borrow checker"]);
        let refs: Vec<&[&str]> = pages.iter().map(|p| p.as_slice()).collect();
        let c = corpus(&refs);
        let with = run(&c, "rust borrow", 5, 10_000, true);
        assert_eq!(with.len(), 1, "only the chunk with 'borrow' may be a hit");
        assert_eq!(with[0].page, 60);
        let without = run(&c, "rust borrow", 5, 10_000, false);
        assert_eq!(without.len(), 5);
        // A question with nothing specific is not filtered at all.
        assert_eq!(run(&c, "rust", 5, 10_000, true).len(), 5);
    }
}
