//! Verified downloads. A file is fetched into `<name>.partial`, hashed while it streams, and renamed
//! into place only when its checksum is the published one; a partial file is never resumed, because
//! nothing can vouch for the bytes already in it. A file already in place is re-verified before it
//! is trusted, and replaced if it fails.

use crate::{DataError, Result};
use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::io::Read;
#[cfg(feature = "download")]
use std::io::Write;
use std::path::{Path, PathBuf};
#[cfg(feature = "download")]
use std::time::Duration;

/// A published checksum, as lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checksum {
    Md5(String),
    Sha256(String),
    /// Git's object id of a file of `size` bytes: the sha1 of `blob <size>\0` and the contents
    /// (what the Hugging Face hub publishes for files it keeps in git rather than LFS).
    GitBlob {
        sha1: String,
        size: u64,
    },
}

impl Checksum {
    #[cfg_attr(not(feature = "download"), allow(dead_code))]
    fn algorithm(&self) -> &'static str {
        match self {
            Checksum::Md5(_) => "md5",
            Checksum::Sha256(_) => "sha256",
            Checksum::GitBlob { .. } => "git blob sha1",
        }
    }

    fn expected(&self) -> &str {
        match self {
            Checksum::Md5(h) | Checksum::Sha256(h) | Checksum::GitBlob { sha1: h, .. } => h,
        }
    }

    fn hasher(&self) -> Hasher {
        match self {
            Checksum::Md5(_) => Hasher::Md5(Md5::new()),
            Checksum::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Checksum::GitBlob { size, .. } => {
                let mut h = Sha1::new();
                h.update(format!("blob {size}\0").as_bytes());
                Hasher::Sha1(h)
            }
        }
    }
}

enum Hasher {
    Md5(Md5),
    Sha256(Sha256),
    Sha1(Sha1),
}

impl Hasher {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha1(h) => h.update(bytes),
        }
    }

    fn hex(self) -> String {
        let digest: Vec<u8> = match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
        };
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The hex digest of a file's contents.
pub fn file_digest(path: &Path, algorithm: &Checksum) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut hasher = algorithm.hasher();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.hex())
}

/// The sha256 of a byte slice, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut h = Hasher::Sha256(Sha256::new());
    h.update(bytes);
    h.hex()
}

/// One file to fetch.
#[derive(Clone, Debug)]
pub struct Remote {
    /// A name for messages ("MNIST train-images-idx3-ubyte.gz").
    pub what: String,
    /// Mirrors, tried in order.
    pub urls: Vec<String>,
    /// Where the verified file ends up.
    pub dest: PathBuf,
    /// The published checksum, or `None` to record the hash of a first download (the caller keeps
    /// it and passes it next time: trust on first use, for sources that publish none).
    pub checksum: Option<Checksum>,
}

/// What [`fetch`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The file was already in place and verified.
    Cached,
    /// Downloaded and verified; the sha256 is given so a caller without a published checksum
    /// can record it.
    Downloaded { bytes: u64, sha256: String },
}

/// The HTTP client downloads go through (reqwest's, with the `download` feature).
#[cfg(feature = "download")]
pub type Client = reqwest::blocking::Client;

/// Without the `download` feature there is no client: [`client`] says so, and nothing fetches.
#[cfg(not(feature = "download"))]
#[derive(Debug)]
pub enum Client {}

/// Without the `download` feature: the one-line error a download asked of such a build gets.
#[cfg(not(feature = "download"))]
pub fn client() -> Result<Client> {
    Err(DataError::Invalid {
        what: "a download".into(),
        problem: "this build of nervus-datasets has no `download` feature (reqwest): \
                  build it with that feature, or put the files in place by hand"
            .into(),
    })
}

/// A client with timeouts suited to large files on slow links.
#[cfg(feature = "download")]
pub fn client() -> Result<Client> {
    reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .timeout(None)
        .user_agent(concat!("nervus/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| DataError::Http {
            url: String::new(),
            problem: format!("cannot build an HTTP client: {e}"),
        })
}

/// Fetches `remote` unless a verified copy is already in place. `progress(done, total)` is called
/// as bytes arrive (`total` is `None` when the server does not say).
pub fn fetch(
    client: &Client,
    remote: &Remote,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Fetched> {
    if remote.dest.exists() {
        match &remote.checksum {
            Some(sum) if file_digest(&remote.dest, sum)? == sum.expected() => {
                return Ok(Fetched::Cached);
            }
            Some(_) => {
                // A copy that fails verification is worth nothing: replace it.
                std::fs::remove_file(&remote.dest).map_err(|e| DataError::io(&remote.dest, e))?;
            }
            None => return Ok(Fetched::Cached),
        }
    }
    if let Some(parent) = remote.dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| DataError::io(parent, e))?;
    }
    let mut unreachable = Vec::new();
    let mut last_error = None;
    for url in &remote.urls {
        match fetch_one(client, url, remote, progress) {
            Ok(done) => return Ok(done),
            Err(FetchError::Unreachable(e)) => unreachable.push(format!("{url} ({e})")),
            Err(FetchError::Failed(e)) => last_error = Some(e),
        }
    }
    if let Some(e) = last_error {
        return Err(e);
    }
    Err(DataError::Offline {
        what: remote.what.clone(),
        tried: unreachable.join(", "),
        dir: remote
            .dest
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        names: remote
            .dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

/// Where [`fetch_recorded`] keeps the sha256 of a file's first download: `<dest>.sha256`.
pub fn record_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    dest.with_file_name(name)
}

/// Trust on first use, for a source that publishes no checksum: the sha256 of the first download
/// (or of a copy found in place with no record) is written to [`record_path`], and from then on
/// the file is held to it. A cached copy that no longer matches is fetched again, and a source that
/// now serves other bytes is refused with an error naming the record, which is left as it was.
pub fn fetch_recorded(
    client: &Client,
    what: &str,
    urls: Vec<String>,
    dest: &Path,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Fetched> {
    let record = record_path(dest);
    let known = match std::fs::read_to_string(&record) {
        Ok(text) => {
            let sha = text.trim().to_string();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(DataError::format(
                    &record,
                    format!(
                        "not a sha256 (64 hex digits) but `{}`: delete it to record the file afresh",
                        sha.chars().take(80).collect::<String>()
                    ),
                ));
            }
            Some(sha.to_ascii_lowercase())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(DataError::io(&record, e)),
    };
    let remote = Remote {
        what: match &known {
            Some(_) => format!(
                "{what} (sha256 recorded at its first download in {})",
                record.display()
            ),
            None => what.to_string(),
        },
        urls,
        dest: dest.to_path_buf(),
        checksum: known.clone().map(Checksum::Sha256),
    };
    let fetched = fetch(client, &remote, progress)?;
    if known.is_none() {
        let sha = match &fetched {
            Fetched::Downloaded { sha256, .. } => sha256.clone(),
            Fetched::Cached => file_digest(dest, &Checksum::Sha256(String::new()))?,
        };
        crate::text::write_atomic(&record, format!("{sha}\n").as_bytes())?;
    }
    Ok(fetched)
}

#[cfg_attr(not(feature = "download"), allow(dead_code))]
enum FetchError {
    /// No connection could be made: try the next mirror, and say "offline" if none answers.
    Unreachable(String),
    /// The server answered wrongly (status, truncation, checksum): a real error.
    Failed(DataError),
}

#[cfg(feature = "download")]
fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

#[cfg(not(feature = "download"))]
fn fetch_one(
    client: &Client,
    _: &str,
    _: &Remote,
    _: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Fetched, FetchError> {
    match *client {}
}

#[cfg(feature = "download")]
fn fetch_one(
    client: &Client,
    url: &str,
    remote: &Remote,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Fetched, FetchError> {
    let mut response = client.get(url).send().map_err(|e| {
        if e.is_connect() || e.is_timeout() {
            FetchError::Unreachable(e.to_string())
        } else {
            FetchError::Failed(DataError::Http {
                url: url.to_string(),
                problem: e.to_string(),
            })
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(FetchError::Failed(DataError::Http {
            url: url.to_string(),
            problem: format!("server answered HTTP {status}"),
        }));
    }
    let total = response.content_length();
    let partial = partial_path(&remote.dest);
    let result = (|| {
        let mut file = std::fs::File::create(&partial).map_err(|e| DataError::io(&partial, e))?;
        let mut hasher = remote
            .checksum
            .as_ref()
            .map(Checksum::hasher)
            .unwrap_or(Hasher::Sha256(Sha256::new()));
        let mut sha = Hasher::Sha256(Sha256::new());
        let mut buf = vec![0u8; 1 << 16];
        let mut done = 0u64;
        loop {
            let n = response.read(&mut buf).map_err(|e| DataError::Http {
                url: url.to_string(),
                problem: format!("connection broke after {done} bytes: {e}"),
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            sha.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| DataError::io(&partial, e))?;
            done += n as u64;
            progress(done, total);
        }
        if let Some(total) = total
            && done != total
        {
            return Err(DataError::Http {
                url: url.to_string(),
                problem: format!("truncated: received {done} of {total} bytes"),
            });
        }
        file.sync_all().map_err(|e| DataError::io(&partial, e))?;
        let sha = sha.hex();
        if let Some(sum) = &remote.checksum {
            let actual = hasher.hex();
            if actual != sum.expected() {
                return Err(DataError::Checksum {
                    what: format!("{} from {url}", remote.what),
                    algorithm: sum.algorithm(),
                    expected: sum.expected().to_string(),
                    actual,
                });
            }
        }
        std::fs::rename(&partial, &remote.dest).map_err(|e| DataError::io(&remote.dest, e))?;
        Ok(Fetched::Downloaded {
            bytes: done,
            sha256: sha,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map_err(FetchError::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_blob_id_is_gits_own() {
        // `printf 'hello\n' | git hash-object --stdin`
        let path = std::env::temp_dir().join(format!("nervus-blob-{}", std::process::id()));
        std::fs::write(&path, b"hello\n").unwrap();
        let sum = Checksum::GitBlob {
            sha1: String::new(),
            size: 6,
        };
        assert_eq!(
            file_digest(&path, &sum).unwrap(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        let _ = std::fs::remove_file(path);
    }
}
