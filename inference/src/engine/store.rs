//! Where models live, and what a name means.
//!
//! The home is `$NERVUS_HOME`, else `$XDG_DATA_HOME/nervus`, else `~/.local/share/nervus`:
//! - `models/NAME`: models trained here (`engine train --name NAME`);
//! - `hub/OWNER/REPO`: models fetched from the Hugging Face hub (`--download`);
//! - `default`: the model `engine use` chose.
//!
//! A model is named in three ways, tried in this order (transformers' rule: a directory wins):
//! an existing directory (one without a `config.json` gives way to a model trained here under
//! the same name), a model trained here, a hub repo id. A repo id always has a slash and a
//! name never does, so the last two cannot be confused.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "model name {0:?}: a name is letters, digits, '-', '_' and '.', without '/' or '..' \
         (a hub repo id is OWNER/REPO)"
    )]
    BadName(String),
    #[error("no model {name:?}: not a directory, not trained here ({}){}", home.display(), listing(.known))]
    Unknown {
        name: String,
        home: PathBuf,
        known: Vec<String>,
    },
    #[error(
        "hub model {repo} is not here: run again with --download to fetch it, or, offline, put its \
         config.json, model.safetensors and tokenizer files into {} by hand",
        dir.display()
    )]
    NotDownloaded { repo: String, dir: PathBuf },
    #[error("{}: no such directory", .0.display())]
    NoDirectory(PathBuf),
    #[error(
        "no model given and none chosen: name one (--model NAME, a directory or OWNER/REPO), or \
         choose a default with `engine use NAME`"
    )]
    NoDefault,
    #[error(
        "{name} is a model trained here and cannot be downloaded again: run `engine rm {name} --yes` \
         to remove it"
    )]
    NeedsYes { name: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn listing(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!("; trained here: {}", known.join(", "))
    }
}

/// What a model name resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Directory(PathBuf),
    Trained { name: String, dir: PathBuf },
    Hub { repo: String, dir: PathBuf },
}

impl Found {
    pub fn dir(&self) -> &Path {
        match self {
            Found::Directory(d) => d,
            Found::Trained { dir, .. } | Found::Hub { dir, .. } => dir,
        }
    }
}

/// The models' home (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    pub root: PathBuf,
}

/// A model listed by `ls`.
#[derive(Clone, Debug)]
pub struct Listed {
    pub name: String,
    pub dir: PathBuf,
    pub bytes: u64,
    pub default: bool,
}

impl Store {
    /// The home the environment names.
    pub fn from_env() -> Self {
        let root = match std::env::var_os("NERVUS_HOME") {
            Some(h) if !h.is_empty() => PathBuf::from(h),
            _ => match std::env::var_os("XDG_DATA_HOME") {
                Some(x) if !x.is_empty() => PathBuf::from(x).join("nervus"),
                _ => dirs::home_dir()
                    .unwrap_or_else(|| PathBuf::from("."))
                    .join(".local/share/nervus"),
            },
        };
        Self { root }
    }

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// A trained model's directory (the name checked).
    pub fn trained(&self, name: &str) -> Result<PathBuf, StoreError> {
        check_name(name)?;
        Ok(self.root.join("models").join(name))
    }

    /// A hub repo's directory (`OWNER/REPO`, each part checked as a name).
    pub fn hub(&self, repo: &str) -> Result<PathBuf, StoreError> {
        let (owner, name) = repo
            .split_once('/')
            .ok_or_else(|| StoreError::BadName(repo.into()))?;
        check_name(owner)
            .and_then(|_| check_name(name))
            .map_err(|_| StoreError::BadName(repo.into()))?;
        Ok(self.root.join("hub").join(owner).join(name))
    }

    /// What `spec` names; `None` means the default model.
    pub fn resolve(&self, spec: Option<&str>) -> Result<Found, StoreError> {
        let spec = match spec {
            Some(s) => s.to_string(),
            None => self.default_model()?.ok_or(StoreError::NoDefault)?,
        };
        let path = Path::new(&spec);
        // A directory that holds a model wins; one that does not gives way to a trained model
        // of that name, if there is one (and is otherwise the model asked for, whose missing
        // config.json the loader then names).
        let trained_here =
            check_name(&spec).is_ok() && self.root.join("models").join(&spec).is_dir();
        if path.is_dir() && (path.join("config.json").is_file() || !trained_here) {
            return Ok(Found::Directory(path.to_path_buf()));
        }
        if spec.starts_with('/') || spec.starts_with('.') {
            return Err(StoreError::NoDirectory(path.to_path_buf()));
        }
        if spec.contains('/') {
            let dir = self.hub(&spec)?;
            if dir.join("config.json").is_file() {
                return Ok(Found::Hub { repo: spec, dir });
            }
            return Err(StoreError::NotDownloaded { repo: spec, dir });
        }
        let dir = self.trained(&spec)?;
        if dir.is_dir() {
            return Ok(Found::Trained { name: spec, dir });
        }
        Err(StoreError::Unknown {
            name: spec,
            home: self.root.join("models"),
            known: self.list_trained().iter().map(|m| m.name.clone()).collect(),
        })
    }

    fn default_file(&self) -> PathBuf {
        self.root.join("default")
    }

    /// The model `use` chose, if any.
    pub fn default_model(&self) -> Result<Option<String>, StoreError> {
        match std::fs::read_to_string(self.default_file()) {
            Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io {
                path: self.default_file(),
                source: e,
            }),
        }
    }

    /// Makes `spec` the default (after checking that it resolves). A directory is kept as its
    /// absolute path, so the default means the same model from anywhere.
    pub fn set_default(&self, spec: &str) -> Result<Found, StoreError> {
        let found = self.resolve(Some(spec))?;
        let keep = match &found {
            Found::Directory(d) => std::fs::canonicalize(d)
                .unwrap_or_else(|_| d.clone())
                .display()
                .to_string(),
            _ => spec.to_string(),
        };
        let io = |e| StoreError::Io {
            path: self.root.clone(),
            source: e,
        };
        std::fs::create_dir_all(&self.root).map_err(io)?;
        nervus_datasets::text::write_atomic(&self.default_file(), keep.as_bytes()).map_err(
            |e| StoreError::Io {
                path: self.default_file(),
                source: std::io::Error::other(e.to_string()),
            },
        )?;
        Ok(found)
    }

    /// Models trained here, by name.
    pub fn list_trained(&self) -> Vec<Listed> {
        let default = self.default_model().ok().flatten();
        let mut out = Vec::new();
        for (name, dir) in subdirs(&self.root.join("models")) {
            out.push(Listed {
                default: default.as_deref() == Some(name.as_str()),
                bytes: dir_bytes(&dir),
                name,
                dir,
            });
        }
        out
    }

    /// Models fetched from the hub, as `OWNER/REPO`.
    pub fn list_downloaded(&self) -> Vec<Listed> {
        let default = self.default_model().ok().flatten();
        let mut out = Vec::new();
        for (owner, odir) in subdirs(&self.root.join("hub")) {
            for (name, dir) in subdirs(&odir) {
                let repo = format!("{owner}/{name}");
                out.push(Listed {
                    default: default.as_deref() == Some(repo.as_str()),
                    bytes: dir_bytes(&dir),
                    name: repo,
                    dir,
                });
            }
        }
        out
    }

    /// Removes a trained model (only with `yes`: it cannot be fetched again) or a downloaded one.
    /// Returns what was removed, for the message.
    pub fn remove(&self, spec: &str, yes: bool) -> Result<Found, StoreError> {
        let found = if spec.contains('/') {
            let dir = self.hub(spec)?;
            Found::Hub {
                repo: spec.into(),
                dir,
            }
        } else {
            Found::Trained {
                name: spec.into(),
                dir: self.trained(spec)?,
            }
        };
        if !found.dir().is_dir() {
            return Err(StoreError::Unknown {
                name: spec.into(),
                home: self.root.join("models"),
                known: self.list_trained().iter().map(|m| m.name.clone()).collect(),
            });
        }
        if let Found::Trained { name, .. } = &found
            && !yes
        {
            return Err(StoreError::NeedsYes { name: name.clone() });
        }
        std::fs::remove_dir_all(found.dir()).map_err(|e| StoreError::Io {
            path: found.dir().to_path_buf(),
            source: e,
        })?;
        if self.default_model().ok().flatten().as_deref() == Some(spec) {
            let _ = std::fs::remove_file(self.default_file());
        }
        Ok(found)
    }
}

impl Store {
    /// What `ls` prints: trained models, then downloaded ones, the default marked `*`.
    pub fn listing(&self) -> String {
        let mut out = format!("models in {}\n", self.root.display());
        let section = |out: &mut String, title: &str, models: Vec<Listed>, none: &str| {
            out.push_str(&format!("\n{title}\n"));
            if models.is_empty() {
                out.push_str(&format!("  (none: {none})\n"));
            }
            for m in models {
                out.push_str(&format!(
                    "{} {:<32} {:>9.1} MB\n",
                    if m.default { "*" } else { " " },
                    m.name,
                    m.bytes as f64 / 1e6
                ));
            }
        };
        section(
            &mut out,
            "trained here (cannot be downloaded again)",
            self.list_trained(),
            "engine train --data FILE --name NAME",
        );
        section(
            &mut out,
            "downloaded",
            self.list_downloaded(),
            "engine run --model OWNER/REPO --download",
        );
        out
    }
}

/// A model name's rule (see [`StoreError::BadName`]).
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && !name.contains("..")
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadName(name.into()))
    }
}

/// `(name, path)` of each directory in `dir` (staging directories of an interrupted save, whose
/// names start with '.', left out), sorted by name.
fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            (!name.starts_with('.')).then(|| (name, e.path()))
        })
        .collect();
    out.sort();
    out
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}
