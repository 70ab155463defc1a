use std::path::PathBuf;

/// Everything that can go wrong reading or fetching data. Every variant names the file or the
/// address it is about, so a message can be acted on without a debugger.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file exists but its contents are not what its name promises.
    #[error("{file}: {problem}")]
    Format { file: PathBuf, problem: String },
    /// A file could not be read or written.
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A download finished but its bytes are not the published ones.
    #[error("{what}: checksum mismatch: expected {algorithm} {expected}, got {actual}")]
    Checksum {
        what: String,
        algorithm: &'static str,
        expected: String,
        actual: String,
    },
    /// The server answered, but not with the file.
    #[error("{url}: {problem}")]
    Http { url: String, problem: String },
    /// A crawl that could not start, or that ended with no page worth keeping.
    #[error("crawl of {url}: {problem}")]
    Crawl { url: String, problem: String },
    /// A request that cannot be carried out as asked, about no single file: a vocabulary larger
    /// than u16 token shards can hold, a held-out share outside `[0, 1)`, a tokenizer library
    /// failure. `what` names the operation.
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: String },
    /// No mirror could be reached at all.
    #[error(
        "offline: could not reach {tried} for {what}. Place the files by hand in {dir} \
         (names: {names}) and run the same command again: a file in place is checked and used, \
         not fetched"
    )]
    Offline {
        what: String,
        tried: String,
        dir: PathBuf,
        names: String,
    },
}

impl DataError {
    pub(crate) fn format(file: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        DataError::Format {
            file: file.into(),
            problem: problem.into(),
        }
    }

    pub fn invalid(what: impl Into<String>, problem: impl Into<String>) -> Self {
        DataError::Invalid {
            what: what.into(),
            problem: problem.into(),
        }
    }

    pub fn io(file: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            file: file.into(),
            source,
        }
    }
}

pub type Result<T, E = DataError> = std::result::Result<T, E>;
