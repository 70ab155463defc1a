//! Fetching a model from the Hugging Face hub, every file verified.
//!
//! The repo's file list (`/api/models/OWNER/REPO/tree/main`) publishes, for each file, its git
//! object id, and for files kept in LFS (the weights) their sha256 as well; each file is checked
//! against the one that applies before it is renamed into place (`nervus_datasets::download`).
//! The files go into a staging directory that takes the model's place only when all are in, so an
//! interrupted download leaves no half model behind. `HF_ENDPOINT` names a mirror, as for
//! transformers.

use super::store::Store;
use nervus_datasets::download::{self, Checksum, Remote};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(
        "cannot reach {endpoint} ({detail}): offline? Put the repo's config.json, \
         model.safetensors and tokenizer files into {} by hand",
        dir.display()
    )]
    Offline {
        endpoint: String,
        detail: String,
        dir: PathBuf,
    },
    #[error("{repo}: {detail}")]
    Repo { repo: String, detail: String },
    #[error(transparent)]
    Data(#[from] nervus_datasets::DataError),
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
}

/// The files of a repo the engine reads, when the repo has them.
const WANTED: &[&str] = &[
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
];

#[derive(serde::Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: String,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(serde::Deserialize)]
struct Lfs {
    oid: String,
}

/// The hub's address: `HF_ENDPOINT`, else huggingface.co.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string()
}

/// Fetches `repo` (`OWNER/REPO`) into the store; returns its directory. `progress(file, done,
/// total)` is called as bytes arrive.
pub fn download(
    store: &Store,
    repo: &str,
    progress: &mut dyn FnMut(&str, u64, Option<u64>),
) -> Result<PathBuf, HubError> {
    download_from(&endpoint(), store, repo, progress)
}

/// [`download`] from the hub at `endpoint` (a mirror, or a test's loopback server).
pub fn download_from(
    endpoint: &str,
    store: &Store,
    repo: &str,
    progress: &mut dyn FnMut(&str, u64, Option<u64>),
) -> Result<PathBuf, HubError> {
    let dir = store.hub(repo)?;
    let endpoint = endpoint.trim_end_matches('/').to_string();
    let client = download::client()?;
    let list_url = format!("{endpoint}/api/models/{repo}/tree/main");
    let offline = |detail: String| HubError::Offline {
        endpoint: endpoint.clone(),
        detail,
        dir: dir.clone(),
    };
    let response = client.get(&list_url).send().map_err(|e| {
        if e.is_connect() || e.is_timeout() {
            offline(e.to_string())
        } else {
            HubError::Repo {
                repo: repo.into(),
                detail: format!("{list_url}: {e}"),
            }
        }
    })?;
    if !response.status().is_success() {
        return Err(HubError::Repo {
            repo: repo.into(),
            detail: format!(
                "{list_url} answered HTTP {} (no such repo, or a private one)",
                response.status()
            ),
        });
    }
    let entries: Vec<Entry> = response
        .text()
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| HubError::Repo {
            repo: repo.into(),
            detail: format!("{list_url}: not the hub's file list: {e}"),
        })?;
    let files: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.kind == "file" && WANTED.contains(&e.path.as_str()))
        .collect();
    for needed in ["config.json", "model.safetensors"] {
        if !files.iter().any(|e| e.path == needed) {
            let sharded = entries
                .iter()
                .any(|e| e.path == "model.safetensors.index.json");
            return Err(HubError::Repo {
                repo: repo.into(),
                detail: if sharded && needed == "model.safetensors" {
                    "the weights are sharded (model.safetensors.index.json): the engine reads \
                     one model.safetensors"
                        .into()
                } else {
                    format!("the repo has no {needed}")
                },
            });
        }
    }
    let parent = dir.parent().unwrap_or(&dir).to_path_buf();
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let staging = parent.join(format!(".{name}.partial"));
    for e in &files {
        let checksum = match &e.lfs {
            Some(l) => Checksum::Sha256(l.oid.clone()),
            None => Checksum::GitBlob {
                sha1: e.oid.clone(),
                size: e.size,
            },
        };
        let remote = Remote {
            what: format!("{repo} {}", e.path),
            urls: vec![format!("{endpoint}/{repo}/resolve/main/{}", e.path)],
            dest: staging.join(&e.path),
            checksum: Some(checksum),
        };
        download::fetch(&client, &remote, &mut |done, total| {
            progress(&e.path, done, total)
        })?;
    }
    let io = |e: std::io::Error| HubError::Data(nervus_datasets::DataError::io(&dir, e));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io)?;
    }
    std::fs::rename(&staging, &dir).map_err(io)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::path::Path;

    /// A loopback stand-in for the hub: the file list and the files, as `serve` says.
    fn hub(serve: impl Fn(&str) -> Option<Vec<u8>> + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req);
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                let (status, body) = match serve(&path) {
                    Some(b) => ("200 OK", b),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(&body);
            }
        });
        format!("http://{addr}")
    }

    fn repo_file(name: &str) -> std::path::PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        match name {
            "vocab.json" | "merges.txt" => root.join("datasets/data/gpt2-tokenizer").join(name),
            _ => root.join("models/tests/fixtures/gpt2-bpe").join(name),
        }
    }

    /// The hub's file list for the fixture: the weights in LFS (sha256), the rest in git.
    fn listing() -> Vec<u8> {
        let entries: Vec<serde_json::Value> = [
            "config.json",
            "model.safetensors",
            "vocab.json",
            "merges.txt",
            "README.md",
        ]
        .iter()
        .map(|name| {
            let path = repo_file(name);
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let digest = |c: &Checksum| download::file_digest(&path, c).unwrap_or_default();
            let git = digest(&Checksum::GitBlob {
                sha1: String::new(),
                size,
            });
            if *name == "model.safetensors" {
                let sha = digest(&Checksum::Sha256(String::new()));
                serde_json::json!({"type": "file", "path": name, "size": 135, "oid": "0",
                        "lfs": {"oid": sha, "size": size}})
            } else {
                serde_json::json!({"type": "file", "path": name, "size": size, "oid": git})
            }
        })
        .collect();
        serde_json::to_vec(&entries).unwrap()
    }

    fn scratch(name: &str) -> Store {
        let d = std::env::temp_dir().join(format!("nervus-hub-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Store::new(d)
    }

    #[test]
    fn a_repo_is_fetched_verified_and_runs() {
        let endpoint = hub(|path| match path {
            "/api/models/openai-community/tiny/tree/main" => Some(listing()),
            p => {
                let name = p.strip_prefix("/openai-community/tiny/resolve/main/")?;
                std::fs::read(repo_file(name)).ok()
            }
        });
        let store = scratch("ok");
        let mut files = Vec::new();
        let dir = download_from(
            &endpoint,
            &store,
            "openai-community/tiny",
            &mut |f, _, _| {
                if !files.contains(&f.to_string()) {
                    files.push(f.to_string())
                }
            },
        )
        .unwrap();
        assert_eq!(dir, store.root.join("hub/openai-community/tiny"));
        files.sort();
        assert_eq!(
            files,
            [
                "config.json",
                "merges.txt",
                "model.safetensors",
                "vocab.json"
            ]
        );
        // Now a name like any other.
        let found = store.resolve(Some("openai-community/tiny")).unwrap();
        assert_eq!(found.dir(), dir);
        assert_eq!(store.list_downloaded()[0].name, "openai-community/tiny");
        let engine = crate::engine::Engine::<burn_ndarray::NdArray<f32>>::load(
            &dir,
            crate::engine::Quant::F32,
            true,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(engine.codec.encode("Hello world").unwrap(), [15496, 995]);
    }

    #[test]
    fn a_file_that_fails_its_checksum_leaves_no_model_behind() {
        let endpoint = hub(|path| match path {
            "/api/models/o/r/tree/main" => Some(listing()),
            "/o/r/resolve/main/config.json" => Some(b"{\"tampered\": true}".to_vec()),
            p => std::fs::read(repo_file(p.strip_prefix("/o/r/resolve/main/")?)).ok(),
        });
        let store = scratch("bad");
        let e = download_from(&endpoint, &store, "o/r", &mut |_, _, _| {}).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("config.json"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        assert!(!store.root.join("hub/o/r").exists());
        assert!(matches!(
            store.resolve(Some("o/r")),
            Err(crate::engine::store::StoreError::NotDownloaded { .. })
        ));
    }

    #[test]
    fn offline_is_one_line_naming_where_the_files_go() {
        let store = scratch("offline");
        let e = download_from("http://127.0.0.1:1", &store, "o/r", &mut |_, _, _| {})
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot reach http://127.0.0.1:1"), "{e}");
        assert!(e.contains("hub/o/r by hand"), "{e}");
        // A repo id that is not OWNER/REPO, or hides a '..', is refused before any request.
        for bad in ["o/r/x", "../r", "o/.."] {
            assert!(download_from("http://127.0.0.1:1", &store, bad, &mut |_, _, _| {}).is_err());
        }
    }
}
