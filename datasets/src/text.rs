//! Text for character-level language models: reading a corpus (UTF-8 checked, the bad byte named),
//! a character vocabulary that refuses what it has never seen, and its `tokenizer.json` in Hugging
//! Face's format.
//!
//! The vocabulary is the sorted set of distinct characters of the training text, so id 17 means
//! whatever character was seventeenth in that text: the tokenizer has to travel with the weights.
//! A model has one row per id, and no row for a character it never saw, so text containing one is
//! refused with the character and its place, not silently dropped.

use crate::{DataError, Result};
use std::collections::HashMap;
use std::path::Path;

/// Reads a UTF-8 text file; invalid UTF-8 is an error naming the byte offset.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if bytes.is_empty() {
        return Err(DataError::format(
            path,
            "empty: there is no text to learn from",
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        DataError::format(path, format!("not UTF-8: invalid byte at offset {at}"))
    })
}

/// A `tokenizer.json`'s bytes as HF tokenizers reads them. The JSON is checked first: tokenizers
/// 0.22.2 panics (`expect("Helper")` in its decoder's deserializer) on a syntax error inside the
/// `decoder` section, found by `cargo fuzz run char_tokenizer` (`src/fuzz-regressions/`). Any
/// other panic inside the crate is caught and reported as this file's error too.
pub fn parse_tokenizer(bytes: &[u8], path: &Path) -> Result<tokenizers::Tokenizer> {
    let bad = |why: String| DataError::format(path, format!("not a tokenizer.json: {why}"));
    serde_json::from_slice::<serde_json::Value>(bytes).map_err(|e| bad(e.to_string()))?;
    crate::quiet::catch(|| tokenizers::Tokenizer::from_bytes(bytes))
        .map_err(|panic| bad(format!("the tokenizers crate failed on it ({panic})")))?
        .map_err(|e| bad(e.to_string()))
}

/// Where a character sits in a text, for messages.
fn locate(text: &str, byte: usize) -> (usize, usize) {
    let before = &text[..byte];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A character vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
    index: HashMap<char, u32>,
}

/// Text that the vocabulary cannot encode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{source_name}: character {ch:?} (U+{code:04X}) at line {line}, column {column} is not in the \
     model's vocabulary of {vocab} characters"
)]
pub struct UnknownChar {
    pub source_name: String,
    pub ch: char,
    pub code: u32,
    pub line: usize,
    pub column: usize,
    pub vocab: usize,
}

impl CharTokenizer {
    /// The sorted distinct characters of `text`.
    pub fn from_text(text: &str) -> Self {
        let mut chars: Vec<char> = text
            .chars()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        chars.dedup();
        Self::from_chars(chars)
    }

    /// A vocabulary whose id `i` is `chars[i]`.
    pub fn from_chars(chars: Vec<char>) -> Self {
        let index = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Self { chars, index }
    }

    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// Ids of `text`; `source_name` names the text in the error for an unknown character.
    pub fn encode(&self, text: &str, source_name: &str) -> Result<Vec<u32>, UnknownChar> {
        text.char_indices()
            .map(|(at, c)| {
                self.index.get(&c).copied().ok_or_else(|| {
                    let (line, column) = locate(text, at);
                    UnknownChar {
                        source_name: source_name.to_string(),
                        ch: c,
                        code: c as u32,
                        line,
                        column,
                        vocab: self.chars.len(),
                    }
                })
            })
            .collect()
    }

    /// The text of `ids` (ids outside the vocabulary become U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('\u{FFFD}'))
            .collect()
    }

    /// The same vocabulary as a Hugging Face tokenizer: a BPE model with one token per character
    /// and no merges (so every character is its own token), no normaliser or pre-tokeniser (so
    /// spaces and newlines are ordinary characters), and a `Fuse` decoder (so decoding joins the
    /// characters without inserting spaces between them).
    pub fn to_hf(&self) -> Result<tokenizers::Tokenizer, String> {
        let vocab: serde_json::Map<String, serde_json::Value> = self
            .chars
            .iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), serde_json::Value::from(i as u32)))
            .collect();
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": { "type": "Fuse" },
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": []
            }
        });
        json.to_string()
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| e.to_string())
    }

    /// Writes `tokenizer.json` (atomically: a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self
            .to_hf()
            .and_then(|t| t.to_string(true).map_err(|e| e.to_string()))
            .map_err(|e| DataError::format(path, e))?;
        write_atomic(path, json.as_bytes())
    }

    /// Reads a `tokenizer.json` written by [`CharTokenizer::save`] (any tokenizer whose tokens are
    /// single characters with ids `0..n` works).
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let tok = parse_tokenizer(&bytes, path)?;
        let vocab = tok.get_vocab(false);
        let mut chars = vec![None; vocab.len()];
        for (token, id) in vocab {
            let mut it = token.chars();
            let (Some(c), None) = (it.next(), it.next()) else {
                return Err(DataError::format(
                    path,
                    format!("token {token:?} is not a single character: not a character tokenizer"),
                ));
            };
            match chars.get_mut(id as usize) {
                Some(slot) => *slot = Some(c),
                None => {
                    return Err(DataError::format(
                        path,
                        format!("token id {id} is out of range"),
                    ));
                }
            }
        }
        let chars = chars
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.ok_or_else(|| DataError::format(path, format!("no token has id {i}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_chars(chars))
    }
}

/// Writes `bytes` to `path` through `<path>.partial` and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        DataError::io(path, e)
    })
}

/// Entropy in nats of the id frequencies: the loss of a model that knows only how common each
/// character is and nothing about their order.
pub fn unigram_entropy(ids: &[u32], vocab: usize) -> f64 {
    let mut counts = vec![0usize; vocab];
    for &i in ids {
        counts[i as usize] += 1;
    }
    let n = ids.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

/// The Shakespeare text that ships with the repository (1,115,249 bytes, char-rnn layout).
pub const SHAKESPEARE: &str = include_str!("../data/text/shakespeare.txt");

/// The classic tiny-shakespeare `input.txt`, fetched by `--download tiny-shakespeare`.
pub const TINY_SHAKESPEARE_URL: &str =
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt";
/// Its published sha256.
pub const TINY_SHAKESPEARE_SHA256: &str =
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed";

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `cargo fuzz run char_tokenizer` and `bpe_tokenizer`: a syntax error inside the
    /// `decoder` section made the tokenizers crate panic instead of returning its error.
    #[test]
    fn fuzz_regression_a_broken_decoder_section_is_an_error_not_a_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fuzz-regressions");
        for name in [
            "tokenizer-decoder-syntax-char.json",
            "tokenizer-decoder-syntax-bpe.json",
        ] {
            let path = dir.join(name);
            let e = CharTokenizer::load(&path).unwrap_err().to_string();
            assert!(e.contains("not a tokenizer.json"), "{e}");
        }
    }

    const TEXT: &str = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak. blåbær ✓\n";

    #[test]
    fn encode_decode_round_trip_and_sorted_ids() {
        let t = CharTokenizer::from_text(TEXT);
        assert!(t.chars().windows(2).all(|w| w[0] < w[1]));
        let ids = t.encode(TEXT, "text").unwrap();
        assert_eq!(t.decode(&ids), TEXT);
    }

    #[test]
    fn unknown_character_is_named_with_its_place() {
        let t = CharTokenizer::from_text("abc\nabc");
        let e = t.encode("ab\ncaZ", "prompt").unwrap_err();
        assert_eq!((e.ch, e.line, e.column), ('Z', 2, 3));
        let msg = e.to_string();
        assert!(
            msg.contains("'Z'") && msg.contains("line 2, column 3") && msg.starts_with("prompt"),
            "{msg}"
        );
    }

    #[test]
    fn tokenizer_json_loads_back_and_hf_agrees_on_ids_and_text() {
        let t = CharTokenizer::from_text(TEXT);
        let dir = std::env::temp_dir().join(format!("nervus-tok-{}", std::process::id()));
        let path = dir.join("tokenizer.json");
        t.save(&path).unwrap();
        assert_eq!(CharTokenizer::load(&path).unwrap(), t);
        let hf = tokenizers::Tokenizer::from_file(&path).unwrap();
        let ours = t.encode(TEXT, "text").unwrap();
        let theirs = hf.encode(TEXT, false).unwrap();
        assert_eq!(
            theirs.get_ids(),
            &ours[..],
            "HF tokenizers gives the same ids"
        );
        assert_eq!(
            hf.decode(&ours, false).unwrap(),
            TEXT,
            "no spaces inserted between characters"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn invalid_utf8_names_the_offset() {
        let dir = std::env::temp_dir().join(format!("nervus-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.txt");
        std::fs::write(&path, b"good text \xff then").unwrap();
        let e = read_text(&path).unwrap_err().to_string();
        assert!(e.contains("bad.txt") && e.contains("offset 10"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entropy_of_uniform_and_single() {
        assert!((unigram_entropy(&[0, 1, 2, 3], 4) - 4f64.ln()).abs() < 1e-12);
        assert_eq!(unigram_entropy(&[2, 2, 2], 4), 0.0);
    }

    #[test]
    fn vendored_shakespeare_is_the_documented_file() {
        assert_eq!(SHAKESPEARE.len(), 1_115_249);
        assert_eq!(CharTokenizer::from_text(SHAKESPEARE).vocab_size(), 64);
    }
}
