//! A corpus cut into documents, the unit a language model's data is built from: the shard writer
//! puts an end-of-text token after each one, so a model learns where one text stops and an
//! unrelated one starts instead of reading six novels as one run-on book.
//!
//! How a text is cut depends on where it came from ([`Source`]): the vendored Austen file by
//! chapter, TinyStories-style files at their `<|endoftext|>` lines, anything else not at all.
//!
//! Every document is a slice of the input (nothing is copied). What is dropped is only whitespace
//! at document edges: blank lines before a document's first line and whitespace after its last
//! character (see [`Source::split`]).

/// The delimiter line of TinyStories-style files, and the special token the BPE tokenizer reserves
/// for the boundary the shard writer inserts between documents.
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// The six Austen novels that ship with the repository (4,025,034 bytes, ASCII), concatenated.
pub const AUSTEN: &str = include_str!("../data/text/austen.txt");

/// The title lines of the novels in [`AUSTEN`], in file order. The file marks the end of a novel
/// differently each time (`THE END`, `FINIS`, an editor's note, nothing at all), so the title line
/// is the one reliable sign that a new novel begins.
pub const AUSTEN_TITLES: [&str; 6] = [
    "SENSE AND SENSIBILITY",
    "PRIDE AND PREJUDICE",
    "MANSFIELD PARK",
    "EMMA",
    "NORTHANGER ABBEY",
    "PERSUASION",
];

/// Where a corpus came from, which decides how it is cut into documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The vendored [`AUSTEN`] file: one document per chapter. A chapter starts at a line whose
    /// first word is `CHAPTER` or `Chapter` followed by an arabic or roman numeral and nothing
    /// else. A novel's front matter (title, author, year, a preface) and a `VOLUME` heading join
    /// the chapter that follows them rather than the end of the one before.
    Austen,
    /// Documents separated by lines that are exactly [`END_OF_TEXT`] (TinyStories' layout; a
    /// trailing `\r` is tolerated). Empty documents are dropped.
    Delimited,
    /// The whole text is one document.
    Whole,
}

impl Source {
    /// [`Source::Delimited`] if any line is exactly [`END_OF_TEXT`], else [`Source::Whole`].
    /// Austen is never guessed: a caller that loads the vendored file says so.
    pub fn detect(text: &str) -> Self {
        if lines(text).any(|(_, line)| is_delimiter(line)) {
            Source::Delimited
        } else {
            Source::Whole
        }
    }

    /// The documents of `text`, in order, as slices of it. Each document loses the blank lines
    /// before its first non-blank line and all whitespace after its last non-whitespace
    /// character; documents left empty are dropped. Nothing else is removed, except the
    /// delimiter lines of [`Source::Delimited`].
    pub fn split(self, text: &str) -> Vec<&str> {
        let ranges = match self {
            Source::Austen => austen_ranges(text),
            Source::Delimited => delimited_ranges(text),
            Source::Whole => vec![(0, text.len())],
        };
        ranges
            .into_iter()
            .map(|(start, end)| trim_edges(&text[start..end]))
            .filter(|d| !d.is_empty())
            .collect()
    }
}

/// Lines with their byte offsets; each line excludes its `\n`.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    text.split_inclusive('\n').map(move |l| {
        let start = at;
        at += l.len();
        (start, l.strip_suffix('\n').unwrap_or(l))
    })
}

fn is_delimiter(line: &str) -> bool {
    line.strip_suffix('\r').unwrap_or(line) == END_OF_TEXT
}

fn is_numeral(word: &str) -> bool {
    !word.is_empty()
        && (word.bytes().all(|b| b.is_ascii_digit()) || word.bytes().all(|b| b"IVXLC".contains(&b)))
}

/// `CHAPTER 12`, `Chapter 1`, `CHAPTER XLVIII`: the heading word, a numeral, nothing else.
fn is_chapter_heading(line: &str) -> bool {
    let mut words = line.split_whitespace();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some("CHAPTER" | "Chapter"), Some(n), None) if is_numeral(n)
    ) && !line.starts_with(char::is_whitespace)
}

/// A novel's title line or a `VOLUME II` heading: text that introduces the next chapter.
fn is_front_matter_heading(line: &str) -> bool {
    let trimmed = line.trim();
    if AUSTEN_TITLES
        .iter()
        .any(|t| t.eq_ignore_ascii_case(trimmed))
    {
        return true;
    }
    let mut words = trimmed.split_whitespace();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some("VOLUME"), Some(n), None) if is_numeral(n)
    )
}

/// Byte ranges of the chapters. A document starts at a front-matter heading, or at a chapter
/// heading that no front-matter heading has already claimed; the text before the first chapter
/// of the file belongs to it too.
fn austen_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut starts = vec![0];
    // True while the current document holds front matter and still awaits its chapter heading.
    let mut awaiting_chapter = true;
    for (at, line) in lines(text) {
        if is_front_matter_heading(line) {
            if !awaiting_chapter {
                starts.push(at);
            }
            awaiting_chapter = true;
        } else if is_chapter_heading(line) {
            if !awaiting_chapter {
                starts.push(at);
            }
            awaiting_chapter = false;
        }
    }
    bounded(starts, text.len())
}

fn delimited_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for (at, line) in lines(text) {
        if is_delimiter(line) {
            ranges.push((start, at));
            start = (at + line.len() + 1).min(text.len());
        }
    }
    ranges.push((start, text.len()));
    ranges
}

fn bounded(starts: Vec<usize>, len: usize) -> Vec<(usize, usize)> {
    let ends = starts.iter().skip(1).copied().chain([len]);
    starts.iter().copied().zip(ends).collect()
}

/// Drops whole blank lines at the start (indentation of the first real line is kept) and all
/// trailing whitespace.
fn trim_edges(doc: &str) -> &str {
    let doc = doc.trim_end();
    let first = doc.len() - doc.trim_start().len();
    let line_start = doc[..first].rfind('\n').map_or(0, |i| i + 1);
    &doc[line_start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte offset of `part` inside `whole` (a slice of it).
    fn offset_in(whole: &str, part: &str) -> usize {
        let at = part.as_ptr() as usize - whole.as_ptr() as usize;
        assert!(at + part.len() <= whole.len(), "not a slice of the text");
        at
    }

    /// The text between consecutive documents (and before the first and after the last).
    fn gaps<'a>(whole: &'a str, docs: &[&str]) -> Vec<&'a str> {
        let mut at = 0;
        let mut out = Vec::new();
        for d in docs {
            let start = offset_in(whole, d);
            out.push(&whole[at..start]);
            at = start + d.len();
        }
        out.push(&whole[at..]);
        out
    }

    #[test]
    fn austen_is_269_chapters_of_six_novels_and_only_whitespace_is_dropped() {
        let docs = Source::Austen.split(AUSTEN);
        assert_eq!(AUSTEN.len(), 4_025_034);
        assert_eq!(docs.len(), 269);
        // Every document holds exactly one chapter heading.
        for d in &docs {
            assert_eq!(d.lines().filter(|l| is_chapter_heading(l)).count(), 1);
        }
        // Chapters per novel, found from the documents that open with a title.
        let firsts: Vec<usize> = docs
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                let first = d.lines().next().unwrap_or("");
                AUSTEN_TITLES.iter().any(|t| t.eq_ignore_ascii_case(first))
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(firsts, [0, 50, 111, 159, 214, 245]);
        assert!(docs[0].starts_with("SENSE AND SENSIBILITY\n\nby Jane Austen\n\n(1811)"));
        assert!(docs[0].contains("\nCHAPTER 1\n"));
        assert!(docs[245].starts_with("Persuasion\n"));
        // Emma's later volumes open their chapter I rather than closing the chapter before.
        assert_eq!(docs.iter().filter(|d| d.starts_with("VOLUME ")).count(), 2);
        assert!(docs[268].ends_with("Finis"));

        // What is dropped: whitespace between documents and after the last, nothing else.
        let gaps = gaps(AUSTEN, &docs);
        assert_eq!(gaps[0], "", "the file starts with the first title");
        for g in &gaps {
            assert!(g.bytes().all(|b| b == b'\n'), "{g:?}");
        }
        let dropped: usize = gaps.iter().map(|g| g.len()).sum();
        assert_eq!(dropped, 1_098, "newlines dropped at document edges");
        assert_eq!(
            docs.iter().map(|d| d.len()).sum::<usize>() + dropped,
            AUSTEN.len()
        );
    }

    #[test]
    fn chapter_headings_are_exact() {
        for yes in ["CHAPTER 1", "Chapter 12", "CHAPTER XLVIII", "CHAPTER IV "] {
            assert!(is_chapter_heading(yes), "{yes}");
        }
        for no in [
            "CHAPTER",
            "chapter 1",
            "CHAPTER 1.",
            "CHAPTER ONE",
            "CHAPTER 1 continued",
            " CHAPTER 1",
            "the first chapter 1",
            "CHAPTER iv",
        ] {
            assert!(!is_chapter_heading(no), "{no}");
        }
    }

    #[test]
    fn front_matter_joins_the_next_chapter_and_text_before_any_heading_joins_the_first() {
        let text = "Preface\n\nCHAPTER 1\none\n\nCHAPTER 2\ntwo\nEMMA\nby her\n\nVOLUME I\n\nCHAPTER I\nthree\n\n\nVOLUME II\nCHAPTER I\nfour\n";
        let docs = Source::Austen.split(text);
        assert_eq!(
            docs,
            [
                "Preface\n\nCHAPTER 1\none",
                "CHAPTER 2\ntwo",
                "EMMA\nby her\n\nVOLUME I\n\nCHAPTER I\nthree",
                "VOLUME II\nCHAPTER I\nfour",
            ]
        );
    }

    #[test]
    fn delimited_splits_on_exact_lines_and_drops_empty_documents() {
        let text = "Once upon a time.\n<|endoftext|>\n\n  Indented start.\nEnd.\n<|endoftext|>\r\n<|endoftext|>\nHe said <|endoftext|> aloud.\n<|endoftext|>\n";
        assert_eq!(Source::detect(text), Source::Delimited);
        assert_eq!(
            Source::Delimited.split(text),
            [
                "Once upon a time.",
                "  Indented start.\nEnd.",
                "He said <|endoftext|> aloud."
            ]
        );
        assert_eq!(Source::Delimited.split("<|endoftext|>"), Vec::<&str>::new());
    }

    #[test]
    fn whole_is_one_document_and_detect_needs_a_delimiter_line() {
        let text = "\n\nSome text with <|endoftext|> inside a line.\n\n";
        assert_eq!(Source::detect(text), Source::Whole);
        assert_eq!(
            Source::Whole.split(text),
            ["Some text with <|endoftext|> inside a line."]
        );
        assert_eq!(Source::Whole.split(" \n\t\n"), Vec::<&str>::new());
        assert_eq!(Source::detect(AUSTEN), Source::Whole);
    }
}
