//! Where downloaded data lives.

use std::path::PathBuf;

/// The environment variable that overrides the cache directory.
pub const DATA_ENV: &str = "NERVUS_DATA";

/// `$NERVUS_DATA` if set, else the platform cache directory (`~/.cache/nervus` on Linux),
/// else `./nervus-data` when the platform has none.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DATA_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .map(|d| d.join("nervus"))
        .unwrap_or_else(|| PathBuf::from("nervus-data"))
}
