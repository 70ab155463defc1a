//! A byte-level BPE tokenizer (GPT-2's scheme) trained with Hugging Face's `tokenizers` crate, for
//! word-piece language models.
//!
//! Byte-level means the base vocabulary is the 256 byte values (each shown as a printable
//! character), so any UTF-8 text can be encoded, emoji included, and nothing is ever unknown;
//! merges learned from the training documents then join frequent byte runs into tokens. The text
//! is first cut by GPT-2's regex into words, numbers, punctuation and whitespace runs, so no token
//! spans two words.
//!
//! One special token, [`END_OF_TEXT`], has id 0 and is never part of a merge. The shard writer
//! inserts it *by id* after every document. The same characters typed inside a text are ordinary
//! text: [`Bpe::encode`] gives them their byte-level tokens, never id 0, so no text can forge a
//! document boundary. Hugging Face's own loader does not keep that choice (the flag is not saved
//! in `tokenizer.json`): it turns typed `<|endoftext|>` into id 0, and agrees with us on all
//! other text.
//!
//! Ids are stored as u16 in the shards, so a vocabulary may hold at most [`MAX_VOCAB`] tokens.

use crate::documents::END_OF_TEXT;
use crate::{DataError, Result};
use std::path::Path;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder, TokenizerImpl};

/// The most tokens a vocabulary may have: ids must fit the shards' u16.
pub const MAX_VOCAB: usize = 1 << 16;

/// The smallest vocabulary training accepts: the special token and the 256 bytes.
pub const MIN_VOCAB: usize = 257;

/// A trained byte-level BPE tokenizer and the id of its end-of-text token.
#[derive(Clone, Debug)]
pub struct Bpe {
    tokenizer: Tokenizer,
    eot: u32,
}

/// The pre-tokenizer and decoder: GPT-2's byte-level mapping and word regex, with no space
/// added in front of a text (so encoding does not change the text it decodes back to).
fn byte_level() -> ByteLevel {
    ByteLevel::default().add_prefix_space(false).use_regex(true)
}

/// Trains a byte-level BPE on `documents` in memory: the tokenizer is built with a vocabulary of
/// `vocab_size` tokens (special token and 256 bytes included) from the merges of pairs seen at
/// least `min_frequency` times. A corpus too small to supply that many merges gives a smaller
/// vocabulary: [`Bpe::vocab_size`] says how large it came out.
///
/// Each document is fed as one sequence, so no merge is learned across a document boundary.
pub fn train<'a>(
    documents: impl Iterator<Item = &'a str>,
    vocab_size: usize,
    min_frequency: u64,
) -> Result<Bpe> {
    const WHAT: &str = "BPE training";
    if !(MIN_VOCAB..=MAX_VOCAB).contains(&vocab_size) {
        return Err(DataError::invalid(
            WHAT,
            format!(
                "vocabulary of {vocab_size} tokens asked; it must be at least {MIN_VOCAB} (the \
                 end-of-text token and 256 bytes) and at most {MAX_VOCAB} (ids are stored as u16)"
            ),
        ));
    }
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(min_frequency)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from(END_OF_TEXT, true)])
        // All 256 bytes, seen or not, so that any later text can be encoded.
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tokenizer: TokenizerImpl<
        BPE,
        NormalizerWrapper,
        ByteLevel,
        PostProcessorWrapper,
        ByteLevel,
    > = TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(None)
        .with_pre_tokenizer(Some(byte_level()))
        .with_post_processor(None)
        .with_decoder(Some(byte_level()))
        .build()
        .map_err(|e| DataError::invalid(WHAT, e.to_string()))?;
    // The training iterator must be `Send`; a list of borrowed slices is, and costs a pointer and
    // a length per document, not a copy of the text.
    let documents: Vec<&str> = documents.collect();
    if documents.iter().all(|d| d.is_empty()) {
        return Err(DataError::invalid(WHAT, "no text to train on"));
    }
    tokenizer
        .train(&mut trainer, documents.into_iter())
        .map_err(|e| DataError::invalid(WHAT, e.to_string()))?;
    let bpe = Bpe::from_tokenizer(tokenizer.into(), WHAT)?;
    if bpe.eot != 0 {
        return Err(DataError::invalid(
            WHAT,
            format!("{END_OF_TEXT} got id {} instead of 0", bpe.eot),
        ));
    }
    Ok(bpe)
}

impl Bpe {
    /// Wraps a Hugging Face tokenizer, checking that it has [`END_OF_TEXT`] and that every id fits
    /// a u16; `what` names the tokenizer in errors. Typed `<|endoftext|>` becomes ordinary text
    /// (see the module notes).
    pub fn from_tokenizer(tokenizer: Tokenizer, what: &str) -> Result<Self> {
        Self::checked(tokenizer).map_err(|problem| DataError::invalid(what, problem))
    }

    fn checked(mut tokenizer: Tokenizer) -> Result<Self, String> {
        let eot = tokenizer
            .token_to_id(END_OF_TEXT)
            .ok_or_else(|| format!("has no {END_OF_TEXT} token, which marks document ends"))?;
        let vocab = tokenizer.get_vocab(true);
        let max_id = vocab.values().copied().max().unwrap_or(0) as usize;
        if vocab.len() > MAX_VOCAB || max_id >= MAX_VOCAB {
            return Err(format!(
                "vocabulary of {} tokens (largest id {max_id}) does not fit u16 shards, which hold \
                 at most {MAX_VOCAB} tokens with ids below {MAX_VOCAB}",
                vocab.len()
            ));
        }
        tokenizer.set_encode_special_tokens(true);
        Ok(Self { tokenizer, eot })
    }

    /// The id of [`END_OF_TEXT`] (0 for a tokenizer trained by [`train`]).
    pub fn eot_id(&self) -> u32 {
        self.eot
    }

    /// The number of tokens, special token included.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The Hugging Face tokenizer inside.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The ids of `text`, with no special tokens added; typed `<|endoftext|>` is plain text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| DataError::invalid("BPE encoding", e.to_string()))
    }

    /// The text of `ids`. [`Bpe::eot_id`] decodes to `<|endoftext|>`. Ids that split a multi-byte
    /// character (a window cut from the middle of a text) give U+FFFD for the broken character.
    /// An id outside the vocabulary is an error, not silently skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&bad) = ids
            .iter()
            .find(|&&id| self.tokenizer.id_to_token(id).is_none())
        {
            return Err(DataError::invalid(
                "BPE decoding",
                format!(
                    "id {bad} is not in the vocabulary of {} tokens",
                    self.vocab_size()
                ),
            ));
        }
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| DataError::invalid("BPE decoding", e.to_string()))
    }

    /// The `tokenizer.json` text: the bytes [`Bpe::save`] writes and [`Bpe::sha256`] hashes.
    pub fn to_json(&self) -> Result<String> {
        self.tokenizer
            .to_string(true)
            .map_err(|e| DataError::invalid("BPE serialisation", e.to_string()))
    }

    /// The sha256 of [`Bpe::to_json`], as lowercase hex: the identity a corpus of ids records,
    /// since ids mean nothing without the tokenizer that made them.
    pub fn sha256(&self) -> Result<String> {
        Ok(crate::download::sha256_hex(self.to_json()?.as_bytes()))
    }

    /// Writes `tokenizer.json` (atomically: a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self
            .to_json()
            .map_err(|e| DataError::format(path, e.to_string()))?;
        crate::text::write_atomic(path, json.as_bytes())
    }

    /// Reads a `tokenizer.json`; it must have [`END_OF_TEXT`] and fit u16 ids.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let tokenizer: Tokenizer = crate::text::parse_tokenizer(&bytes, path)?;
        Self::checked(tokenizer).map_err(|problem| DataError::format(path, problem))
    }
}

/// A small tokenizer shared by the tests of this crate: trained once, on Austen's first 200 KB.
#[cfg(test)]
pub(crate) fn test_bpe() -> &'static Bpe {
    static BPE: std::sync::OnceLock<Bpe> = std::sync::OnceLock::new();
    BPE.get_or_init(|| {
        let docs = crate::documents::Source::Austen.split(&crate::documents::AUSTEN[..200_000]);
        train(docs.into_iter(), 512, 2).expect("training on Austen")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `cargo fuzz run bpe_tokenizer`: a syntax error inside the `decoder` section made
    /// the tokenizers crate panic instead of returning its error (the character tokenizer's side
    /// is in `text`).
    #[test]
    fn fuzz_regression_a_broken_decoder_section_is_an_error_not_a_panic() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fuzz-regressions");
        for name in [
            "tokenizer-decoder-syntax-char.json",
            "tokenizer-decoder-syntax-bpe.json",
        ] {
            let e = Bpe::load(&dir.join(name)).unwrap_err().to_string();
            assert!(e.contains("not a tokenizer.json"), "{e}");
        }
    }
    use crate::documents::{AUSTEN, Source};

    const SAMPLES: &[&str] = &[
        "",
        "It is a truth universally acknowledged, that a single man.",
        "Élodie a mangé une crème brûlée à Noël; Ærøskøbing; naïve façade.",
        "emoji 🦀🎉 and a family 👩‍👩‍👧 and 日本語のテキスト",
        "line one\nline two\r\n\n\n\ttabbed\n",
        "   leading, runs    of     spaces, trailing   ",
        "<|endoftext|>",
        "typed <|endoftext|> in the middle<|endoftext|>and glued",
        "\u{0}\u{7f} control bytes \u{fffd}",
    ];

    fn temp_dir(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nervus-bpe-{name}-{}", std::process::id()))
    }

    #[test]
    fn decode_of_encode_is_exact_and_typed_end_of_text_is_plain_text() {
        let bpe = test_bpe();
        for &s in SAMPLES {
            let ids = bpe.encode(s).unwrap();
            assert_eq!(bpe.decode(&ids).unwrap(), s, "{ids:?}");
            assert!(!ids.contains(&bpe.eot_id()), "{s:?} gave the EOT id");
        }
        assert_eq!(bpe.eot_id(), 0);
        // The id itself decodes to the marker.
        let mut ids = bpe.encode("one").unwrap();
        ids.push(0);
        ids.extend(bpe.encode("two").unwrap());
        assert_eq!(bpe.decode(&ids).unwrap(), "one<|endoftext|>two");
        let e = bpe.decode(&[1, 512]).unwrap_err().to_string();
        assert!(e.contains("id 512") && e.contains("512 tokens"), "{e}");
    }

    #[test]
    fn vocabulary_is_the_size_asked_or_smaller_when_the_text_runs_out() {
        assert_eq!(test_bpe().vocab_size(), 512);
        let small = train(["abc abc abd"].into_iter(), 1000, 0).unwrap();
        // 257 base tokens plus the few merges three words allow.
        assert!(
            (258..270).contains(&small.vocab_size()),
            "{}",
            small.vocab_size()
        );
        assert_eq!(
            small.decode(&small.encode("dcba 🦀").unwrap()).unwrap(),
            "dcba 🦀"
        );
    }

    #[test]
    fn training_is_deterministic() {
        // The corpus records the tokenizer's sha256, so the same documents must give the same file.
        let docs = Source::Austen.split(&AUSTEN[..60_000]);
        let a = train(docs.iter().copied(), 400, 2).unwrap();
        let b = train(docs.iter().copied(), 400, 2).unwrap();
        assert_eq!(a.sha256().unwrap(), b.sha256().unwrap());
    }

    #[test]
    fn vocabularies_outside_the_u16_range_are_refused() {
        for size in [MAX_VOCAB + 1, 100_000, 256] {
            let e = train(["some text"].into_iter(), size, 0).unwrap_err();
            assert!(e.to_string().contains(&format!("{size} tokens")), "{e}");
        }
        assert!(train(["", ""].into_iter(), 300, 0).is_err());

        // A tokenizer.json with 65,537 tokens: loadable by HF, refused by us with the file named.
        let vocab: serde_json::Map<String, serde_json::Value> = (0..=MAX_VOCAB)
            .map(|i| match i {
                0 => (END_OF_TEXT.to_string(), 0.into()),
                i => (format!("t{i}"), i.into()),
            })
            .collect();
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [{ "id": 0, "content": END_OF_TEXT, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true }],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
            "model": { "type": "BPE", "vocab": vocab, "merges": [] }
        });
        let dir = temp_dir("big");
        let path = dir.join("tokenizer.json");
        crate::text::write_atomic(&path, json.to_string().as_bytes()).unwrap();
        let e = Bpe::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.json") && e.contains("65537 tokens"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn saved_tokenizer_loads_with_identical_ids_and_hf_agrees() {
        let bpe = test_bpe();
        let dir = temp_dir("save");
        let path = dir.join("tokenizer.json");
        bpe.save(&path).unwrap();
        let loaded = Bpe::load(&path).unwrap();
        assert_eq!(loaded.sha256().unwrap(), bpe.sha256().unwrap());
        assert_eq!(
            bpe.sha256().unwrap(),
            crate::download::sha256_hex(&std::fs::read(&path).unwrap()),
            "sha256 is the saved file's"
        );
        let hf = tokenizers::Tokenizer::from_file(&path).unwrap();
        for &s in SAMPLES {
            let ours = bpe.encode(s).unwrap();
            assert_eq!(loaded.encode(s).unwrap(), ours, "{s:?}");
            let theirs = hf.encode(s, false).unwrap().get_ids().to_vec();
            if s.contains(END_OF_TEXT) {
                // HF's loader matches the typed marker as the special token (see module notes).
                assert!(theirs.contains(&0), "{s:?}");
                assert_eq!(hf.decode(&theirs, false).unwrap(), s);
            } else {
                assert_eq!(theirs, ours, "{s:?}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn load_names_the_file_without_end_of_text() {
        let dir = temp_dir("noeot");
        let path = dir.join("tokenizer.json");
        let chars = crate::text::CharTokenizer::from_text("abc");
        chars.save(&path).unwrap();
        let e = Bpe::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.json") && e.contains(END_OF_TEXT),
            "{e}"
        );
        std::fs::write(&path, "{ not json").unwrap();
        let e = Bpe::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.json") && e.contains("not a tokenizer.json"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compression_on_austen() {
        let bpe = test_bpe();
        let seen = &AUSTEN[..200_000];
        let unseen = &AUSTEN[200_000..400_000];
        for (name, text) in [("trained-on", seen), ("unseen", unseen)] {
            let tokens: usize = Source::Austen
                .split(text)
                .iter()
                .map(|d| bpe.encode(d).unwrap().len())
                .sum();
            let ratio = text.len() as f64 / tokens as f64;
            println!("vocab 512, {name} 200 KB of Austen: {tokens} tokens, {ratio:.3} bytes/token");
            assert!(ratio > 2.0, "{ratio}");
        }
    }
}
