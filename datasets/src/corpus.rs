//! The texts the examples train on, found or fetched: a character model's ([`char_corpus`]) and
//! a language model's ([`lm_corpus`]), each a downloaded corpus, a file, or the text that ships
//! with the repository.

use crate::documents::{AUSTEN, Source};
use crate::download::{Checksum, Fetched, Remote, client, fetch, fetch_recorded, record_path};
use crate::text::{SHAKESPEARE, TINY_SHAKESPEARE_SHA256, TINY_SHAKESPEARE_URL, read_text};
use crate::{DataError, Result};
use std::path::Path;

/// The text a character model trains on, with the name a run records: tiny-shakespeare fetched
/// into the cache and verified (`download = Some("tiny-shakespeare")`, the one corpus on offer),
/// else the file `file`, else the vendored [`SHAKESPEARE`].
pub fn char_corpus(download: Option<&str>, file: Option<&Path>) -> Result<(String, String)> {
    if let Some(name) = download {
        if name != "tiny-shakespeare" {
            return Err(DataError::invalid(
                format!("--download {name}"),
                "unknown corpus: the one available is tiny-shakespeare",
            ));
        }
        let dest = crate::cache::data_dir().join("text/tinyshakespeare.txt");
        let remote = Remote {
            what: "tiny-shakespeare input.txt".into(),
            urls: vec![TINY_SHAKESPEARE_URL.into()],
            dest: dest.clone(),
            checksum: Some(Checksum::Sha256(TINY_SHAKESPEARE_SHA256.into())),
        };
        if let Fetched::Downloaded { bytes, .. } = fetch(&client()?, &remote, &mut |_, _| {})? {
            eprintln!(
                "downloaded {bytes} bytes into {} (sha256 verified)",
                dest.display()
            );
        }
        return Ok(("tiny-shakespeare".into(), read_text(&dest)?));
    }
    if let Some(path) = file {
        return Ok((path.display().to_string(), read_text(path)?));
    }
    Ok(("shakespeare.txt (vendored)".into(), SHAKESPEARE.to_string()))
}

/// Where the TinyStories files are published.
pub const TINYSTORIES: &str =
    "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/";

/// The text a language model trains on, with its name and how it is cut: a TinyStories file
/// fetched into the cache (`download` is `tinystories` or `tinystories-valid`; TinyStories
/// publishes no checksum, so the first download's sha256 is recorded beside the file and every
/// later use checks against it, [`crate::download::fetch_recorded`]), else the file `file`, else
/// the vendored [`AUSTEN`]. Download progress goes to stderr.
pub fn lm_corpus(download: Option<&str>, file: Option<&Path>) -> Result<(String, String, Source)> {
    if let Some(name) = download {
        let file = match name {
            "tinystories" => "TinyStoriesV2-GPT4-train.txt",
            "tinystories-valid" => "TinyStoriesV2-GPT4-valid.txt",
            other => {
                return Err(DataError::invalid(
                    format!("--download {other}"),
                    "unknown corpus: the ones available are tinystories, tinystories-valid",
                ));
            }
        };
        let dest = crate::cache::data_dir().join("text").join(file);
        let mut shown = 0u64;
        let mut progress = |done: u64, total: Option<u64>| {
            // A line every 5% (or every 100 MB when the size is not known).
            let step = total.map_or(100 << 20, |t| (t / 20).max(1));
            if done >= shown + step || Some(done) == total {
                shown = done;
                match total {
                    Some(t) => eprintln!("  {file}: {} of {} MB", done >> 20, t >> 20),
                    None => eprintln!("  {file}: {} MB", done >> 20),
                }
            }
        };
        let fetched = fetch_recorded(
            &client()?,
            &format!("TinyStories {file}"),
            vec![format!("{TINYSTORIES}{file}")],
            &dest,
            &mut progress,
        )?;
        if let Fetched::Downloaded { bytes, sha256 } = fetched {
            eprintln!(
                "downloaded {bytes} bytes into {}; sha256 {sha256} (recorded in {})",
                dest.display(),
                record_path(&dest).display()
            );
        }
        return Ok((name.to_string(), read_text(&dest)?, Source::Delimited));
    }
    if let Some(path) = file {
        let text = read_text(path)?;
        let source = Source::detect(&text);
        return Ok((path.display().to_string(), text, source));
    }
    Ok((
        "austen.txt (vendored)".into(),
        AUSTEN.to_string(),
        Source::Austen,
    ))
}
