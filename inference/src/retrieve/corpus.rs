//! A crawled corpus as retrieval reads it: the text, its pages from the manifest the crawler
//! writes beside it (`<name>.txt.crawl.json`), and each page cut into paragraphs, the chunks
//! that are ranked. A chunk never crosses a page: the chunk after a page's last is the next
//! page's first, and the passages built from chunks ([`super::passage`]) stop at the page's edge.

use super::RetrieveError;
use nervus_datasets::download::sha256_hex;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The part of the crawler's manifest (`nervus_datasets::crawl::Manifest`) that retrieval needs;
/// the rest is ignored, so that this stays readable whatever else the crawler records.
#[derive(Deserialize)]
struct ManifestView {
    pages: Vec<PageView>,
    text: TextView,
}

#[derive(Deserialize)]
struct PageView {
    url: String,
    heading: String,
    offset: usize,
    len: usize,
}

#[derive(Deserialize)]
struct TextView {
    sha256: String,
}

/// A page of the corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Where it was crawled from.
    pub url: String,
    /// Its first line, without the `#`s: the page's own title.
    pub heading: String,
    /// Its bytes in the text.
    pub bytes: Range<usize>,
    /// Its chunks, as indices into [`Corpus::chunks`].
    pub chunks: Range<usize>,
}

/// A paragraph of a page: a run of lines between blank lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The page it is on.
    pub page: usize,
    /// The nearest heading at or above it on its page, without the `#`s.
    pub section: String,
    /// Its bytes in the text, trimmed.
    pub bytes: Range<usize>,
}

/// A corpus and its chunks.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// The text file (named in messages).
    pub path: PathBuf,
    pub text: String,
    pub pages: Vec<Page>,
    pub chunks: Vec<Chunk>,
}

/// The manifest the crawler writes beside `corpus`.
pub fn manifest_path(corpus: &Path) -> PathBuf {
    let mut name = corpus.as_os_str().to_owned();
    name.push(".crawl.json");
    PathBuf::from(name)
}

impl Corpus {
    /// Reads `path` and the manifest beside it, checks that the manifest describes this text
    /// (its sha256, and every page inside it on character boundaries), and chunks it.
    pub fn open(path: &Path) -> Result<Self, RetrieveError> {
        let manifest = manifest_path(path);
        let bytes = std::fs::read(path).map_err(|e| RetrieveError::io(path, e))?;
        let json = match std::fs::read(&manifest) {
            Ok(json) => json,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RetrieveError::NoManifest {
                    corpus: path.to_path_buf(),
                    manifest,
                });
            }
            Err(e) => return Err(RetrieveError::io(&manifest, e)),
        };
        Self::from_parts(path, &manifest, bytes, &json)
    }

    /// [`Corpus::open`] on bytes already read; `path` and `manifest` name them in messages.
    pub fn from_parts(
        path: &Path,
        manifest: &Path,
        bytes: Vec<u8>,
        json: &[u8],
    ) -> Result<Self, RetrieveError> {
        let bad = |detail: String| RetrieveError::Manifest {
            path: manifest.to_path_buf(),
            detail,
        };
        let view: ManifestView =
            serde_json::from_slice(json).map_err(|e| bad(format!("not a crawl manifest: {e}")))?;
        let sha = sha256_hex(&bytes);
        if !sha.eq_ignore_ascii_case(view.text.sha256.trim()) {
            return Err(RetrieveError::Mismatch {
                corpus: path.to_path_buf(),
                manifest: manifest.to_path_buf(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| RetrieveError::NotUtf8 {
            path: path.to_path_buf(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        if text.trim().is_empty() || view.pages.is_empty() {
            return Err(RetrieveError::Empty {
                path: path.to_path_buf(),
            });
        }
        let mut pages = Vec::with_capacity(view.pages.len());
        let mut chunks = Vec::new();
        for (i, p) in view.pages.into_iter().enumerate() {
            let end = p.offset.checked_add(p.len).filter(|&e| e <= text.len());
            let Some(end) =
                end.filter(|&e| text.is_char_boundary(p.offset) && text.is_char_boundary(e))
            else {
                return Err(bad(format!(
                    "page {} ({}) claims bytes {}..{}+{}, which are not whole characters of the \
                     {}-byte text",
                    i + 1,
                    p.url,
                    p.offset,
                    p.offset,
                    p.len,
                    text.len()
                )));
            };
            let first = chunks.len();
            paragraphs(&text, p.offset..end, i, &mut chunks);
            pages.push(Page {
                url: p.url,
                heading: p.heading.trim_start_matches('#').trim().to_string(),
                bytes: p.offset..end,
                chunks: first..chunks.len(),
            });
        }
        if chunks.is_empty() {
            return Err(RetrieveError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            text,
            pages,
            chunks,
        })
    }

    /// The text of chunk `i`.
    pub fn chunk_text(&self, i: usize) -> &str {
        &self.text[self.chunks[i].bytes.clone()]
    }
}

/// Pushes the paragraphs of `text[range]` (page `page`) onto `out`, each with its section. A
/// paragraph ends at a blank line outside a code fence: a listing is one paragraph however many
/// blank lines it has.
fn paragraphs(text: &str, range: Range<usize>, page: usize, out: &mut Vec<Chunk>) {
    let mut section = String::new();
    let mut start: Option<usize> = None;
    let mut end = range.start;
    let mut at = range.start;
    let mut close = |start: &mut Option<usize>, end: usize, section: &mut String| {
        if let Some(s) = start.take() {
            let para = &text[s..end];
            if let Some(h) = heading(para) {
                *section = h;
            }
            out.push(Chunk {
                page,
                section: section.clone(),
                bytes: s..end,
            });
        }
    };
    // A blank line inside a fenced code block is part of the code, not a paragraph's end.
    let mut fenced = false;
    for line in text[range.clone()].split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            if !fenced {
                close(&mut start, end, &mut section);
            }
        } else {
            if trimmed.starts_with("```") {
                fenced = !fenced;
            }
            let lead = line.len() - line.trim_start().len();
            if start.is_none() {
                start = Some(at + lead);
            }
            end = at + line.trim_end().len();
        }
        at += line.len();
    }
    close(&mut start, end, &mut section);
}

/// The heading a paragraph opens with (`## Title` → `Title`), if it opens with one.
fn heading(para: &str) -> Option<String> {
    let first = para.lines().next()?;
    let rest = first.trim_start_matches('#');
    (rest.len() < first.len() && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| rest.trim().to_string())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(text: &str, pages: &[(usize, usize)]) -> String {
        let pages: Vec<String> = pages
            .iter()
            .enumerate()
            .map(|(i, (o, l))| {
                format!(
                    r##"{{"url":"http://x/p{i}.html","heading":"# P{i}","offset":{o},"len":{l}}}"##
                )
            })
            .collect();
        format!(
            r#"{{"pages":[{}],"text":{{"sha256":"{}"}}}}"#,
            pages.join(","),
            sha256_hex(text.as_bytes())
        )
    }

    /// `text` with a manifest of `pages` (offset, length), opened.
    fn open(text: &str, pages: &[(usize, usize)]) -> Corpus {
        let json = manifest(text, pages);
        Corpus::from_parts(
            Path::new("c.txt"),
            Path::new("c.txt.crawl.json"),
            text.as_bytes().to_vec(),
            json.as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn paragraphs_keep_their_page_and_section() {
        let p0 = "# One\n\nfirst para\nstill first\n\n## Sub\n\nsecond\n\n\n";
        let p1 = "# Two\n\n  indented para  \n";
        let text = format!("{p0}{p1}");
        let c = open(&text, &[(0, p0.len()), (p0.len(), p1.len())]);
        let got: Vec<(usize, &str, &str)> = (0..c.chunks.len())
            .map(|i| {
                (
                    c.chunks[i].page,
                    c.chunks[i].section.as_str(),
                    c.chunk_text(i),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "One", "# One"),
                (0, "One", "first para\nstill first"),
                (0, "Sub", "## Sub"),
                (0, "Sub", "second"),
                (1, "Two", "# Two"),
                (1, "Two", "indented para"),
            ]
        );
        assert_eq!(c.pages[0].chunks, 0..4);
        assert_eq!(c.pages[1].chunks, 4..6);
        assert_eq!(c.pages[1].heading, "P1");
    }

    #[test]
    fn a_code_listing_is_one_paragraph_whatever_blank_lines_it_holds() {
        let code = "```rust\nfn main() {\n\n# not a heading\n}\n```";
        let text = format!("# Code\n\n{code}\n\nafter\n");
        let c = open(&text, &[(0, text.len())]);
        let got: Vec<(&str, &str)> = (0..c.chunks.len())
            .map(|i| (c.chunks[i].section.as_str(), c.chunk_text(i)))
            .collect();
        assert_eq!(
            got,
            vec![("Code", "# Code"), ("Code", code), ("Code", "after")]
        );
    }

    #[test]
    fn a_text_the_manifest_does_not_describe_is_refused() {
        let text = "# One\n\nhello there\n";
        let json = manifest(text, &[(0, text.len())]);
        let e = Corpus::from_parts(
            Path::new("c.txt"),
            Path::new("c.txt.crawl.json"),
            b"# One\n\nhello where\n".to_vec(),
            json.as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(e, RetrieveError::Mismatch { .. }), "{e}");
    }

    #[test]
    fn a_page_outside_the_text_is_named() {
        let text = "# One\n\nhello\n";
        let json = manifest(text, &[(0, text.len() + 1)]);
        let e = Corpus::from_parts(
            Path::new("c.txt"),
            Path::new("c.txt.crawl.json"),
            text.as_bytes().to_vec(),
            json.as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("page 1 (http://x/p0.html)"), "{e}");
    }
}
