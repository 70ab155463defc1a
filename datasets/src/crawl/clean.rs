//! Cleaning a corpus for a character model, whose alphabet is a hyperparameter: every distinct
//! character is a row of the embedding table, and the web is bad at keeping the alphabet small
//! (three kinds of quotation mark, two dashes, a non-breaking space before every unit, one emoji
//! in a warning box).
//!
//! Two passes over the whole corpus. First, typography is mapped onto ASCII by the table
//! [`TYPOGRAPHY`]; this is deliberately not NFKD, which would also strip the accents from
//! `blåbær`. Then every non-ASCII character seen fewer than `min_count` times in the whole corpus
//! is dropped. The threshold is an absolute count, not a share, because that is what it measures:
//! an embedding row seen eight times is untrained whether the text around it is 5 kB or 5 MB.
//! ASCII is never dropped, however rare. Both passes are counted, per mapping and per dropped
//! character, so a corpus can say what was done to it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The default threshold: a character must occur this often to stay. (At 3, a crawl of the Rust
/// book kept some forty rows for the scripts of one chapter's "hello world" examples.)
pub const MIN_CHAR_COUNT: usize = 10;

/// Typography and its ASCII spelling. An empty spelling removes the character.
pub const TYPOGRAPHY: &[(char, &str)] = &[
    // Single quotes, apostrophes and primes.
    ('\u{2018}', "'"), // ‘
    ('\u{2019}', "'"), // ’
    ('\u{201A}', "'"), // ‚
    ('\u{201B}', "'"), // ‛
    ('\u{2032}', "'"), // ′
    ('\u{2039}', "'"), // ‹
    ('\u{203A}', "'"), // ›
    // Double quotes.
    ('\u{201C}', "\""), // “
    ('\u{201D}', "\""), // ”
    ('\u{201E}', "\""), // „
    ('\u{201F}', "\""), // ‟
    ('\u{2033}', "\""), // ″
    ('\u{00AB}', "\""), // «
    ('\u{00BB}', "\""), // »
    // Dashes and minus.
    ('\u{2010}', "-"),  // hyphen
    ('\u{2011}', "-"),  // non-breaking hyphen
    ('\u{2012}', "-"),  // figure dash
    ('\u{2013}', "-"),  // – en dash
    ('\u{2014}', "--"), // — em dash
    ('\u{2015}', "--"), // ― horizontal bar
    ('\u{2212}', "-"),  // − minus sign
    // Spaces.
    ('\u{00A0}', " "), // no-break space
    ('\u{2002}', " "), // en space
    ('\u{2003}', " "), // em space
    ('\u{2004}', " "),
    ('\u{2005}', " "),
    ('\u{2006}', " "),
    ('\u{2007}', " "), // figure space
    ('\u{2008}', " "),
    ('\u{2009}', " "), // thin space
    ('\u{200A}', " "), // hair space
    ('\u{202F}', " "), // narrow no-break space
    ('\u{205F}', " "), // medium mathematical space
    ('\u{3000}', " "), // ideographic space
    // Invisible: removed.
    ('\u{00AD}', ""), // soft hyphen
    ('\u{200B}', ""), // zero-width space
    ('\u{2060}', ""), // word joiner
    ('\u{FEFF}', ""), // byte-order mark
    // Ellipsis, bullets, ligatures.
    ('\u{2026}', "..."), // …
    ('\u{2022}', "-"),   // •
    ('\u{2023}', "-"),   // ‣
    ('\u{2043}', "-"),   // ⁃
    ('\u{2219}', "-"),   // ∙
    ('\u{25E6}', "-"),   // ◦
    ('\u{FB01}', "fi"),  // ﬁ
    ('\u{FB02}', "fl"),  // ﬂ
    // Arrows and comparisons, as code would write them.
    ('\u{2192}', "->"),  // →
    ('\u{2190}', "<-"),  // ←
    ('\u{2194}', "<->"), // ↔
    ('\u{21D2}', "=>"),  // ⇒
    ('\u{21D0}', "<="),  // ⇐
    ('\u{21D4}', "<=>"), // ⇔
    ('\u{2264}', "<="),  // ≤
    ('\u{2265}', ">="),  // ≥
    ('\u{2260}', "!="),  // ≠
];

/// The ASCII spelling of `c`, when it is typography in [`TYPOGRAPHY`].
pub fn typography(c: char) -> Option<&'static str> {
    TYPOGRAPHY.iter().find(|(t, _)| *t == c).map(|&(_, s)| s)
}

/// One mapping and how often it applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapped {
    pub from: char,
    pub code: String,
    pub to: String,
    pub count: usize,
}

/// One dropped character and how often it occurred.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    pub char: char,
    pub code: String,
    pub count: usize,
}

/// What cleaning changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanReport {
    pub min_count: usize,
    pub chars_before: usize,
    pub chars_after: usize,
    /// Most frequent first.
    pub mapped: Vec<Mapped>,
    /// Most frequent first.
    pub dropped: Vec<Dropped>,
}

impl CleanReport {
    pub fn mapped_total(&self) -> usize {
        self.mapped.iter().map(|m| m.count).sum()
    }

    pub fn dropped_total(&self) -> usize {
        self.dropped.iter().map(|d| d.count).sum()
    }
}

/// Cleaned pages and the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cleaned {
    pub pages: Vec<String>,
    pub report: CleanReport,
}

/// `U+2019`.
pub fn code_point(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

fn by_count_then_char<T>(counts: BTreeMap<char, usize>, make: impl Fn(char, usize) -> T) -> Vec<T> {
    let mut v: Vec<(char, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter().map(|(c, n)| make(c, n)).collect()
}

/// Cleans `pages` as one corpus: the counts that decide what is rare are taken over all of them,
/// and each page is cleaned on its own so that it can still be found in the result.
///
/// A space left doubled, or left at the end of a line, by a dropped character is removed with it
/// (`warning ⚠ here` becomes `warning here`).
pub fn clean<S: AsRef<str>>(pages: &[S], min_count: usize) -> Cleaned {
    let mut mapped_counts: BTreeMap<char, usize> = BTreeMap::new();
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    let mut chars_before = 0;
    let mapped: Vec<String> = pages
        .iter()
        .map(|page| {
            let page = page.as_ref();
            let mut out = String::with_capacity(page.len());
            for c in page.chars() {
                chars_before += 1;
                match typography(c) {
                    Some(s) => {
                        *mapped_counts.entry(c).or_default() += 1;
                        out.push_str(s);
                    }
                    None => out.push(c),
                }
            }
            for c in out.chars() {
                *counts.entry(c).or_default() += 1;
            }
            out
        })
        .collect();
    let rare = |c: char| !c.is_ascii() && counts.get(&c).copied().unwrap_or(0) < min_count;
    let mut dropped_counts: BTreeMap<char, usize> = BTreeMap::new();
    let pages: Vec<String> = mapped
        .iter()
        .map(|page| {
            let mut out = String::with_capacity(page.len());
            let mut dropped_since_kept = false;
            for c in page.chars() {
                if rare(c) {
                    *dropped_counts.entry(c).or_default() += 1;
                    dropped_since_kept = true;
                    continue;
                }
                if dropped_since_kept && out.ends_with(' ') && (c == ' ' || c == '\n') {
                    if c == '\n' {
                        out.pop();
                        out.push('\n');
                    }
                    continue;
                }
                dropped_since_kept = false;
                out.push(c);
            }
            if dropped_since_kept && out.ends_with(' ') {
                out.pop();
            }
            out
        })
        .collect();
    let chars_after = pages.iter().map(|p| p.chars().count()).sum();
    let report = CleanReport {
        min_count,
        chars_before,
        chars_after,
        mapped: by_count_then_char(mapped_counts, |c, count| Mapped {
            from: c,
            code: code_point(c),
            to: typography(c).unwrap_or_default().to_string(),
            count,
        }),
        dropped: by_count_then_char(dropped_counts, |c, count| Dropped {
            char: c,
            code: code_point(c),
            count,
        }),
    };
    Cleaned { pages, report }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typography_is_mapped_and_counted() {
        let got = clean(&["don’t “quote” – a—b −1 …\u{a0}x", "it’s ‘q’ → ≤"], 1);
        assert_eq!(
            got.pages,
            ["don't \"quote\" - a--b -1 ... x", "it's 'q' -> <="]
        );
        let counts: Vec<(char, &str, usize)> = got
            .report
            .mapped
            .iter()
            .map(|m| (m.from, m.to.as_str(), m.count))
            .collect();
        assert_eq!(counts[0], ('’', "'", 3), "most frequent first");
        assert!(counts.contains(&('“', "\"", 1)));
        assert!(counts.contains(&('\u{a0}', " ", 1)));
        assert_eq!(got.report.mapped_total(), 13);
        assert!(got.report.dropped.is_empty());
    }

    #[test]
    fn rare_non_ascii_is_dropped_frequent_accents_stay_ascii_always_stays() {
        let common = "blåbær ".repeat(10);
        let page = format!("{common}warning ⚠ here {} ~\nend 😀\nnext", "ñ".repeat(9));
        let got = clean(&[page.as_str()], MIN_CHAR_COUNT);
        assert_eq!(
            got.pages[0],
            format!("{common}warning here ~\nend\nnext"),
            "å and æ (10 each) stay, ñ (9) and the one-off symbols go; ~ (ASCII, once) stays"
        );
        let dropped: Vec<(char, usize)> = got
            .report
            .dropped
            .iter()
            .map(|d| (d.char, d.count))
            .collect();
        assert_eq!(dropped, [('ñ', 9), ('⚠', 1), ('😀', 1)]);
        assert_eq!(got.report.dropped_total(), 11);
        assert_eq!(got.report.dropped[2].code, "U+1F600");
    }

    #[test]
    fn counts_are_taken_over_the_whole_corpus() {
        // Five é on each of two pages: ten in the corpus, so both pages keep theirs.
        let pages = ["é".repeat(5), "é".repeat(5)];
        let got = clean(&pages, 10);
        assert_eq!(got.pages, pages);
        let got = clean(&pages[..1], 10);
        assert_eq!(got.pages, [""]);
    }

    #[test]
    fn mapping_happens_before_counting() {
        // Twelve curly apostrophes become apostrophes; none of them is "rare".
        let page = "’".repeat(12);
        let got = clean(&[page.as_str()], 100);
        assert_eq!(got.pages, ["'".repeat(12)]);
        assert_eq!(got.report.chars_before, 12);
        assert_eq!(got.report.chars_after, 12);
    }
}
