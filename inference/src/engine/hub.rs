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
    let dir = store.hub(repo)?;
    let endpoint = endpoint();
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
