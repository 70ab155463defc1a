//! A tokenized corpus, written once and read memory-mapped.
//!
//! Encoding a corpus with BPE takes far longer than a training step reads it, so it is done once:
//! [`write_corpus`] encodes document by document and streams the ids, as little-endian u16, into
//! fixed-size shard files; [`Shards`] maps them back so a training loop can draw windows from a
//! corpus larger than memory without copying it. The layout of a corpus directory:
//!
//! ```text
//! corpus.json               the manifest (written last: no manifest, no corpus)
//! train/shard-00000.bin     shard_tokens ids each (the last shard of a split may hold fewer)
//! train/shard-00001.bin
//! val/shard-00000.bin       the held-out documents, taken from the end of the corpus
//! ```
//!
//! The end-of-text id follows every document, so a window that crosses a boundary shows the model
//! where one text ends and the next, unrelated, begins. The manifest records the tokenizer's
//! sha256 (ids mean nothing without it), the counts needed to turn a loss per token into bits per
//! byte, and how much of the text sits in documents long enough to fill a context
//! ([`long_document_share`]).

use crate::bpe::{Bpe, MAX_VOCAB};
use crate::{DataError, Result};
use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The manifest's file name inside a corpus directory.
pub const MANIFEST: &str = "corpus.json";

/// The manifest format this code writes and reads.
pub const FORMAT: u32 = 1;

/// The two parts of a corpus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
}

impl Split {
    /// The split's directory name.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

/// `corpus.json`: what was written, and with which tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusManifest {
    /// [`FORMAT`].
    pub format: u32,
    /// [`Bpe::sha256`] of the tokenizer that made the ids.
    pub tokenizer_sha256: String,
    pub vocab_size: usize,
    /// The id written after every document.
    pub eot_id: u32,
    /// Ids per shard file (the last of a split may hold fewer).
    pub shard_tokens: usize,
    /// The share of documents held out, as asked.
    pub held_out: f64,
    pub train: SplitManifest,
    pub val: SplitManifest,
}

/// One split of a corpus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitManifest {
    pub documents: usize,
    /// Ids in the shards: the documents' tokens plus one end-of-text id per document.
    pub tokens: u64,
    /// UTF-8 bytes of the documents' text (boundaries excluded): the denominator of bits per byte.
    pub text_bytes: u64,
    /// The shard files of the split, in order, relative to the split's directory.
    pub shards: Vec<ShardEntry>,
    /// For each context length asked, the share of document tokens in documents at least that
    /// long (see [`long_document_share`]).
    pub long_document_share: Vec<ContextShare>,
}

/// One shard file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The file name, e.g. `shard-00000.bin`.
    pub file: String,
    pub tokens: u64,
}

/// The share of tokens in documents of at least `context` tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextShare {
    pub context: usize,
    pub share: f64,
}

impl SplitManifest {
    /// Text bytes per document token (end-of-text ids excluded): the tokenizer's compression.
    pub fn bytes_per_token(&self) -> f64 {
        let doc_tokens = self.tokens.saturating_sub(self.documents as u64);
        if doc_tokens == 0 {
            0.0
        } else {
            self.text_bytes as f64 / doc_tokens as f64
        }
    }
}

impl CorpusManifest {
    /// Reads `<dir>/corpus.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let json = std::fs::read_to_string(&path).map_err(|e| DataError::io(&path, e))?;
        let manifest: Self = serde_json::from_str(&json)
            .map_err(|e| DataError::format(&path, format!("not a corpus manifest: {e}")))?;
        if manifest.format != FORMAT {
            return Err(DataError::format(
                &path,
                format!(
                    "manifest format {} (this code reads format {FORMAT})",
                    manifest.format
                ),
            ));
        }
        Ok(manifest)
    }

    pub fn split(&self, split: Split) -> &SplitManifest {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }

    /// Checks that `bpe` is the tokenizer the corpus was written with; `dir` names the corpus.
    pub fn check_tokenizer(&self, bpe: &Bpe, dir: &Path) -> Result<()> {
        let sha = bpe.sha256()?;
        if sha != self.tokenizer_sha256 {
            return Err(DataError::format(
                dir.join(MANIFEST),
                format!(
                    "written with tokenizer sha256 {}, but the tokenizer given has {sha}",
                    self.tokenizer_sha256
                ),
            ));
        }
        Ok(())
    }
}

/// The share of tokens that sit in documents at least `context` tokens long:
/// `sum(l for l in lengths if l >= context) / sum(lengths)`, 0 for no tokens. A model with that
/// context learns long-range structure only from this share of its data; the rest of its windows
/// straddle unrelated documents. (The KALIA release measured 17.7% at 1024 tokens for a mixed web
/// corpus and 0.03% for TinyStories.)
pub fn long_document_share(doc_lengths: &[usize], context: usize) -> f64 {
    let total: usize = doc_lengths.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let long: usize = doc_lengths.iter().filter(|&&l| l >= context).sum();
    long as f64 / total as f64
}

fn shard_name(index: usize) -> String {
    format!("shard-{index:05}.bin")
}

fn is_shard_file(name: &str) -> bool {
    name.starts_with("shard-") && (name.ends_with(".bin") || name.ends_with(".bin.partial"))
}

/// Removes the shard files of an earlier corpus in `dir`, so that a rewrite with fewer shards
/// leaves none behind. Only names this module writes are touched.
fn remove_stale_shards(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(DataError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| DataError::io(dir, e))?;
        if entry.file_name().to_str().is_some_and(is_shard_file) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| DataError::io(&path, e))?;
        }
    }
    Ok(())
}

/// Buffers one shard of ids and writes it atomically when full: at most one shard is in memory.
struct ShardWriter {
    dir: PathBuf,
    shard_tokens: usize,
    buf: Vec<u8>,
    shards: Vec<ShardEntry>,
}

impl ShardWriter {
    fn new(dir: PathBuf, shard_tokens: usize) -> Self {
        Self {
            dir,
            shard_tokens,
            buf: Vec::new(),
            shards: Vec::new(),
        }
    }

    fn push(&mut self, id: u32) -> Result<()> {
        let id = u16::try_from(id).map_err(|_| {
            DataError::format(
                self.dir.join(shard_name(self.shards.len())),
                format!("token id {id} does not fit a u16"),
            )
        })?;
        self.buf.extend_from_slice(&id.to_le_bytes());
        if self.buf.len() == 2 * self.shard_tokens {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = shard_name(self.shards.len());
        crate::text::write_atomic(&self.dir.join(&file), &self.buf)?;
        self.shards.push(ShardEntry {
            file,
            tokens: (self.buf.len() / 2) as u64,
        });
        self.buf.clear();
        Ok(())
    }
}

/// Encodes `documents` with `bpe` into a corpus directory `dir` (layout in the module notes) and
/// returns its manifest.
///
/// The last `held_out` share of the documents (rounded, at least one when `held_out > 0`, never
/// all) goes to `val/`, the rest to `train/`: taken from the end, not sampled, so that a corpus in
/// reading order is judged on text after what it learned from. Each document is encoded on its
/// own and streamed into the writer with the end-of-text id after it; only one document's ids and
/// one shard are in memory at a time (plus a pointer and length per document, to count them
/// before splitting). Shards are written atomically, the manifest last, after the manifest and
/// shard files of any earlier corpus in `dir` are removed.
pub fn write_corpus<'a>(
    dir: &Path,
    bpe: &Bpe,
    documents: impl Iterator<Item = &'a str>,
    held_out: f64,
    shard_tokens: usize,
    contexts: &[usize],
) -> Result<CorpusManifest> {
    let what = format!("corpus {}", dir.display());
    if !(0.0..1.0).contains(&held_out) {
        return Err(DataError::invalid(
            what,
            format!("held-out share {held_out} must be in [0, 1)"),
        ));
    }
    if shard_tokens == 0 {
        return Err(DataError::invalid(
            what,
            "shards must hold at least one token",
        ));
    }
    if bpe.vocab_size() > MAX_VOCAB {
        return Err(DataError::invalid(
            what,
            format!(
                "vocabulary of {} tokens does not fit u16 shards (at most {MAX_VOCAB})",
                bpe.vocab_size()
            ),
        ));
    }
    let documents: Vec<&str> = documents.collect();
    let n = documents.len();
    let mut n_val = (held_out * n as f64).round() as usize;
    if held_out > 0.0 {
        n_val = n_val.max(1);
    }
    if n == 0 || n_val >= n {
        return Err(DataError::invalid(
            what,
            format!(
                "{n} documents cannot be split into train and a held-out share of {held_out}: \
                 training needs at least one"
            ),
        ));
    }

    let manifest_path = dir.join(MANIFEST);
    match std::fs::remove_file(&manifest_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(DataError::io(&manifest_path, e)),
    }
    let (train_docs, val_docs) = documents.split_at(n - n_val);
    let mut splits = Vec::with_capacity(2);
    for (split, docs) in [(Split::Train, train_docs), (Split::Val, val_docs)] {
        let split_dir = dir.join(split.name());
        remove_stale_shards(&split_dir)?;
        let mut writer = ShardWriter::new(split_dir, shard_tokens);
        let mut lengths = Vec::with_capacity(docs.len());
        let mut text_bytes = 0u64;
        for doc in docs {
            let ids = bpe.encode(doc)?;
            lengths.push(ids.len());
            text_bytes += doc.len() as u64;
            for id in ids {
                writer.push(id)?;
            }
            writer.push(bpe.eot_id())?;
        }
        writer.flush()?;
        splits.push(SplitManifest {
            documents: docs.len(),
            tokens: (lengths.iter().sum::<usize>() + docs.len()) as u64,
            text_bytes,
            shards: writer.shards,
            long_document_share: contexts
                .iter()
                .map(|&context| ContextShare {
                    context,
                    share: long_document_share(&lengths, context),
                })
                .collect(),
        });
    }
    let val = splits.pop().expect("two splits");
    let train = splits.pop().expect("two splits");
    let manifest = CorpusManifest {
        format: FORMAT,
        tokenizer_sha256: bpe.sha256()?,
        vocab_size: bpe.vocab_size(),
        eot_id: bpe.eot_id(),
        shard_tokens,
        held_out,
        train,
        val,
    };
    let json = serde_json::to_string_pretty(&manifest)
        .map_err(|e| DataError::format(&manifest_path, e.to_string()))?;
    crate::text::write_atomic(&manifest_path, json.as_bytes())?;
    Ok(manifest)
}

/// One split of a corpus, memory-mapped: ids are read from the page cache on demand, never copied
/// into one vector.
#[derive(Debug)]
pub struct Shards {
    maps: Vec<Mmap>,
    /// `starts[k]` is the index of shard `k`'s first id; the last entry is the total.
    starts: Vec<usize>,
    files: Vec<PathBuf>,
}

/// Maps a shard read-only.
fn map_shard(file: &std::fs::File, path: &Path) -> Result<Mmap> {
    // SAFETY: a mapping is sound only while nobody truncates or rewrites the file under it. Shard
    // files are written by `write_corpus` into a temporary file, renamed into place, and never
    // modified after: a later rewrite removes or renames over the *name*, which leaves the inode
    // this mapping holds intact.
    unsafe { Mmap::map(file) }.map_err(|e| DataError::io(path, e))
}

impl Shards {
    /// Opens `split` of the corpus in `dir`, as its `corpus.json` describes it.
    pub fn open(dir: &Path, split: Split) -> Result<Self> {
        Self::open_split(dir, &CorpusManifest::load(dir)?, split)
    }

    /// Opens `split` of the corpus in `dir` described by `manifest`. Every shard must exist and
    /// hold exactly the ids the manifest says (two bytes each), or the file is named with the
    /// numbers that disagree.
    pub fn open_split(dir: &Path, manifest: &CorpusManifest, split: Split) -> Result<Self> {
        let entry = manifest.split(split);
        let manifest_path = dir.join(MANIFEST);
        let listed = entry
            .shards
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(s.tokens));
        if listed != Some(entry.tokens) {
            let listed = listed.map_or("2^64 or more".into(), |n| n.to_string());
            return Err(DataError::format(
                &manifest_path,
                format!(
                    "{} shards list {listed} tokens but the split has {}",
                    split.name(),
                    entry.tokens
                ),
            ));
        }
        let split_dir = dir.join(split.name());
        let mut maps = Vec::with_capacity(entry.shards.len());
        let mut starts = vec![0usize];
        let mut files = Vec::with_capacity(entry.shards.len());
        for shard in &entry.shards {
            if Path::new(&shard.file).file_name() != Some(std::ffi::OsStr::new(&shard.file)) {
                return Err(DataError::format(
                    &manifest_path,
                    format!("shard name {:?} is not a plain file name", shard.file),
                ));
            }
            let path = split_dir.join(&shard.file);
            let file = std::fs::File::open(&path).map_err(|e| DataError::io(&path, e))?;
            let bytes = file.metadata().map_err(|e| DataError::io(&path, e))?.len();
            check_shard_len(&path, bytes, shard.tokens)?;
            let map = map_shard(&file, &path)?;
            check_shard_len(&path, map.len() as u64, shard.tokens)?;
            let start = *starts.last().expect("starts begins with 0");
            starts.push(start + shard.tokens as usize);
            maps.push(map);
            files.push(path);
        }
        Ok(Self {
            maps,
            starts,
            files,
        })
    }

    /// The number of ids.
    pub fn len(&self) -> usize {
        *self.starts.last().expect("starts begins with 0")
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard files, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The shard holding id `i < len`.
    fn shard_of(&self, i: usize) -> usize {
        self.starts[..self.maps.len()].partition_point(|&s| s <= i) - 1
    }

    /// Id `i`.
    ///
    /// # Panics
    /// If `i >= len()`, like slice indexing.
    pub fn get(&self, i: usize) -> u32 {
        assert!(i < self.len(), "id {i} of a corpus of {}", self.len());
        let k = self.shard_of(i);
        let at = 2 * (i - self.starts[k]);
        u16::from_le_bytes([self.maps[k][at], self.maps[k][at + 1]]).into()
    }

    /// Ids `start..start + len`, across shard boundaries.
    ///
    /// # Panics
    /// If the window runs past `len()`.
    pub fn window(&self, start: usize, len: usize) -> Vec<u32> {
        let end = start.checked_add(len).expect("window end overflows usize");
        let mut out = Vec::with_capacity(len);
        out.extend(self.iter_range(start..end));
        out
    }

    /// The ids of `range`, read shard by shard.
    ///
    /// # Panics
    /// If `range` runs past `len()` or is reversed.
    pub fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = u32> + '_ {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "range {range:?} of a corpus of {}",
            self.len()
        );
        let shards = if range.is_empty() {
            0..0
        } else {
            self.shard_of(range.start)..self.shard_of(range.end - 1) + 1
        };
        shards.flat_map(move |k| {
            let lo = range.start.max(self.starts[k]) - self.starts[k];
            let hi = range.end.min(self.starts[k + 1]) - self.starts[k];
            self.maps[k][2 * lo..2 * hi]
                .chunks_exact(2)
                .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
        })
    }
}

/// A shard must hold two bytes per id and exactly the ids the manifest lists; a writer never
/// leaves an empty one.
fn check_shard_len(path: &Path, bytes: u64, tokens: u64) -> Result<()> {
    if tokens > u64::MAX / 2 {
        // 2 × tokens would wrap around: 2^63 + 7 "tokens" would pass as the 14 bytes of 7.
        return Err(DataError::format(
            path,
            format!("the manifest says {tokens} tokens, more than any file holds"),
        ));
    }
    if !bytes.is_multiple_of(2) {
        return Err(DataError::format(
            path,
            format!(
                "{bytes} bytes is odd: a shard holds 2-byte ids, so this one is truncated or \
                 not a shard (the manifest says {tokens} tokens, {} bytes)",
                2 * tokens
            ),
        ));
    }
    if bytes != 2 * tokens {
        return Err(DataError::format(
            path,
            format!(
                "holds {} tokens ({bytes} bytes) but the manifest says {tokens} ({} bytes)",
                bytes / 2,
                2 * tokens
            ),
        ));
    }
    if tokens == 0 {
        return Err(DataError::format(path, "empty shard"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpe::test_bpe;

    const DOCS: &[&str] = &[
        "It is a truth universally acknowledged.",
        "A second, rather longer document, with more words in it than the first.",
        "Third: 🦀 and <|endoftext|> typed.",
        "Fourth document here.",
        "Fifth and last, held out.",
    ];

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nervus-shards-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn expected(bpe: &Bpe, docs: &[&str]) -> (Vec<u32>, Vec<usize>) {
        let mut ids = Vec::new();
        let mut lengths = Vec::new();
        for d in docs {
            let e = bpe.encode(d).unwrap();
            lengths.push(e.len());
            ids.extend(e);
            ids.push(bpe.eot_id());
        }
        (ids, lengths)
    }

    #[test]
    fn long_document_share_by_hand() {
        // 36 tokens in all; documents of 8 and 20 tokens reach context 8: 28 / 36.
        let lengths = [3, 5, 8, 20];
        assert_eq!(long_document_share(&lengths, 8), 28.0 / 36.0);
        assert_eq!(long_document_share(&lengths, 1), 1.0);
        assert_eq!(long_document_share(&lengths, 6), 28.0 / 36.0);
        assert_eq!(long_document_share(&lengths, 20), 20.0 / 36.0);
        assert_eq!(long_document_share(&lengths, 21), 0.0);
        assert_eq!(long_document_share(&[], 8), 0.0);
        assert_eq!(long_document_share(&[0, 0], 0), 0.0);
    }

    #[test]
    fn corpus_reads_back_as_written_across_shards() {
        let bpe = test_bpe();
        let dir = temp_dir("roundtrip");
        let contexts = [1, 8, 12, 1000];
        let m = write_corpus(&dir, bpe, DOCS.iter().copied(), 0.4, 7, &contexts).unwrap();
        assert_eq!(m, CorpusManifest::load(&dir).unwrap());
        assert_eq!(m.tokenizer_sha256, bpe.sha256().unwrap());
        assert_eq!((m.vocab_size, m.eot_id, m.format), (512, 0, FORMAT));
        m.check_tokenizer(bpe, &dir).unwrap();

        // 40% of 5 documents: the last two are held out.
        for (split, docs) in [(Split::Train, &DOCS[..3]), (Split::Val, &DOCS[3..])] {
            let (ids, lengths) = expected(bpe, docs);
            let sm = m.split(split);
            assert_eq!(sm.documents, docs.len());
            assert_eq!(sm.tokens as usize, ids.len());
            assert_eq!(
                sm.text_bytes as usize,
                docs.iter().map(|d| d.len()).sum::<usize>()
            );
            let want_shards = ids.len().div_ceil(7);
            assert!(want_shards >= 2, "the test must span shards");
            assert_eq!(sm.shards.len(), want_shards);
            for (k, s) in sm.shards.iter().enumerate() {
                assert_eq!(s.file, format!("shard-{k:05}.bin"));
                let full = k + 1 < want_shards;
                assert_eq!(s.tokens as usize, if full { 7 } else { ids.len() - 7 * k });
                let path = dir.join(split.name()).join(&s.file);
                assert_eq!(std::fs::metadata(path).unwrap().len(), 2 * s.tokens);
            }
            for (c, share) in contexts.iter().zip(&sm.long_document_share) {
                assert_eq!(share.context, *c);
                assert_eq!(share.share, long_document_share(&lengths, *c));
            }

            let shards = Shards::open(&dir, split).unwrap();
            assert_eq!(shards.len(), ids.len());
            assert_eq!(shards.files().len(), want_shards);
            for (i, &id) in ids.iter().enumerate() {
                assert_eq!(shards.get(i), id, "id {i}");
            }
            for start in 0..=ids.len() {
                for len in 0..=ids.len() - start {
                    assert_eq!(shards.window(start, len), ids[start..start + len]);
                }
            }
            assert!(shards.iter_range(0..ids.len()).eq(ids.iter().copied()));
            // The held-out text decodes to the last documents, boundaries marked.
            let text = bpe.decode(&shards.window(0, shards.len())).unwrap();
            assert_eq!(text, docs.join("<|endoftext|>") + "<|endoftext|>");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_or_short_shard_is_refused_with_its_name() {
        let bpe = test_bpe();
        let dir = temp_dir("truncated");
        write_corpus(&dir, bpe, DOCS.iter().copied(), 0.0, 7, &[]).unwrap();
        let path = dir.join("train").join("shard-00001.bin");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 14);

        std::fs::write(&path, &bytes[..13]).unwrap();
        let e = Shards::open(&dir, Split::Train).unwrap_err().to_string();
        assert!(
            e.contains("shard-00001.bin") && e.contains("13 bytes is odd"),
            "{e}"
        );
        std::fs::write(&path, &bytes[..12]).unwrap();
        let e = Shards::open(&dir, Split::Train).unwrap_err().to_string();
        assert!(
            e.contains("shard-00001.bin")
                && e.contains("holds 6 tokens (12 bytes)")
                && e.contains("says 7 (14 bytes)"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
        let e = Shards::open(&dir, Split::Train).unwrap_err().to_string();
        assert!(e.contains("shard-00001.bin"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_manifest_whose_token_counts_wrap_around_is_refused() {
        let bpe = test_bpe();
        let dir = temp_dir("wrap");
        write_corpus(&dir, bpe, DOCS.iter().copied(), 0.0, 7, &[]).unwrap();
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
        // 2 × (2^63 + 7) wraps to the 14 bytes the shard holds; the split's total agrees.
        let big = (1u64 << 63) + 7;
        assert_eq!(m["train"]["shards"][1]["tokens"], 7);
        m["train"]["shards"][1]["tokens"] = big.into();
        let total = m["train"]["tokens"].as_u64().unwrap() - 7 + big;
        m["train"]["tokens"] = total.into();
        std::fs::write(&path, m.to_string()).unwrap();
        let e = Shards::open(&dir, Split::Train)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard-00001.bin") && e.contains("more than any file holds"),
            "{e}"
        );
        // Counts whose sum wraps: the split's total cannot be what they add up to.
        m["train"]["shards"][1]["tokens"] = u64::MAX.into();
        std::fs::write(&path, m.to_string()).unwrap();
        let e = Shards::open(&dir, Split::Train)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("2^64 or more"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rewriting_removes_stale_shards_and_bad_requests_are_refused() {
        let bpe = test_bpe();
        let dir = temp_dir("rewrite");
        write_corpus(&dir, bpe, DOCS.iter().copied(), 0.2, 3, &[]).unwrap();
        let m = write_corpus(&dir, bpe, DOCS.iter().copied(), 0.2, 1 << 20, &[64]).unwrap();
        assert_eq!(m.train.shards.len(), 1);
        assert_eq!(std::fs::read_dir(dir.join("train")).unwrap().count(), 1);
        assert_eq!(m.val.documents, 1, "20% of five documents");
        // With no held-out share the val split is empty and opens as such.
        let m = write_corpus(&dir, bpe, DOCS.iter().copied(), 0.0, 16, &[]).unwrap();
        assert_eq!((m.train.documents, m.val.documents), (5, 0));
        assert!(Shards::open(&dir, Split::Val).unwrap().is_empty());
        assert_eq!(
            std::fs::read_dir(dir.join("val")).map_or(0, |d| d.count()),
            0
        );

        for (held_out, shard_tokens, docs) in [
            (1.0, 16, DOCS),
            (-0.1, 16, DOCS),
            (f64::NAN, 16, DOCS),
            (0.1, 0, DOCS),
            (0.0, 16, &[][..]),
            (0.5, 16, &DOCS[..1]),
        ] {
            let e = write_corpus(&dir, bpe, docs.iter().copied(), held_out, shard_tokens, &[])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("corpus ") && e.contains("rewrite"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
