//! Data for the nervus models: the MNIST digits (an IDX reader, the vendored 10k subset and a
//! verified download of the full set), text corpora for character models (and [`crawl`], which
//! makes one from a documentation site), and the small deterministic random generator every data
//! pipeline in the workspace draws from.
//!
//! Training never downloads: a download happens only when a user asks for one, through
//! [`download`], into the cache directory named by [`cache::data_dir`].
//!
//! Cargo features: `download` (reqwest, for the verified downloads) and `crawl` (the crawler; url
//! as well), both on by default. Without `download`, a download asked for is refused with a
//! one-line error and everything else works.

pub mod bpe;
pub mod cache;
pub mod corpus;
#[cfg(feature = "crawl")]
pub mod crawl;
pub mod documents;
pub mod download;
mod error;
pub mod idx;
pub mod mnist;
pub mod moving;
pub mod quiet;
pub mod rng;
pub mod shards;
pub mod text;

pub use error::{DataError, Result};
