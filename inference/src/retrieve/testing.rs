//! Small corpora for the tests, made the way the crawler writes them.

use super::corpus::Corpus;
use nervus_datasets::download::sha256_hex;
use std::path::Path;

/// The text and manifest of `pages` (each a list of paragraphs), as the crawler would write them.
pub fn files(pages: &[&[&str]]) -> (String, String) {
    let mut text = String::new();
    let mut entries = Vec::new();
    for (i, paras) in pages.iter().enumerate() {
        let start = text.len();
        let page = format!("{}\n\n", paras.join("\n\n"));
        text.push_str(&page);
        entries.push(serde_json::json!({
            "url": format!("http://example.org/book/p{i}.html"),
            "heading": paras.first().copied().unwrap_or(""),
            "offset": start,
            "len": page.len(),
        }));
    }
    let sha = sha256_hex(text.as_bytes());
    let manifest = serde_json::json!({ "pages": entries, "text": { "sha256": sha } });
    (text, manifest.to_string())
}

/// A corpus of `pages`.
pub fn corpus(pages: &[&[&str]]) -> Corpus {
    let (text, manifest) = files(pages);
    Corpus::from_parts(
        Path::new("test.txt"),
        Path::new("test.txt.crawl.json"),
        text.into_bytes(),
        manifest.as_bytes(),
    )
    .expect("a well-formed test corpus")
}
