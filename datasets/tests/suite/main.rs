//! The datasets crate's integration tests, one binary (one link instead of one per file).
//!
//! Run one file's tests with a filter: `cargo test --release -p nervus-datasets --test suite
//! crawl`.

#[cfg(feature = "crawl")]
mod crawl;
#[cfg(feature = "download")]
mod download;
