//! MNIST digits: 28×28 unsigned-byte images with labels 0–9.
//!
//! Two sources. The default is the 10,000-digit subset that ships inside this crate (the first
//! 10k of MNIST's training set, split 80/20 within each class: 7,996 train / 2,004 test; see the
//! README's data section for provenance and licence). The full set (60,000 / 10,000) is fetched on
//! request by [`download`] and verified against the md5 sums torchvision pins.

use crate::download::{Checksum, Fetched, Remote, fetch};
use crate::idx::parse_idx;
use crate::{DataError, Result};
use std::path::{Path, PathBuf};

/// Image side in pixels.
pub const SIDE: usize = 28;
/// Pixels per image.
pub const PIXELS: usize = SIDE * SIDE;
/// Number of classes.
pub const CLASSES: usize = 10;

/// The four file names, in the order train images, train labels, test images, test labels.
pub const FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

/// md5 of each full-MNIST file in [`FILES`], as torchvision pins them.
pub const FULL_MD5: [&str; 4] = [
    "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "d53e105ee54ea40749a09fcbcd1e9432",
    "9fb629c4189551a2d022fa330f9573f3",
    "ec29112dd5afa0611ce80d1b7f02629c",
];

/// Mirrors of the full set, tried in order.
pub const MIRRORS: [&str; 3] = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
];

const VENDORED: [&[u8]; 4] = [
    include_bytes!("../data/mnist-10k/train-images-idx3-ubyte.gz"),
    include_bytes!("../data/mnist-10k/train-labels-idx1-ubyte.gz"),
    include_bytes!("../data/mnist-10k/t10k-images-idx3-ubyte.gz"),
    include_bytes!("../data/mnist-10k/t10k-labels-idx1-ubyte.gz"),
];

/// One split: `len()` images of [`PIXELS`] bytes each, and their labels.
#[derive(Clone, Debug)]
pub struct Split {
    /// `len() * PIXELS` bytes, image after image, row-major.
    pub images: Vec<u8>,
    /// One label 0–9 per image.
    pub labels: Vec<u8>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The `i`-th image's pixels.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * PIXELS..(i + 1) * PIXELS]
    }
}

/// A train and a test split.
#[derive(Clone, Debug)]
pub struct Mnist {
    pub train: Split,
    pub test: Split,
    /// Where it came from, for messages ("vendored 10k subset", a directory).
    pub source: String,
}

fn split(images: (&[u8], &Path), labels: (&[u8], &Path)) -> Result<Split> {
    let img = parse_idx(images.0, images.1)?;
    if img.dims.len() != 3 || img.dims[1] != SIDE || img.dims[2] != SIDE {
        return Err(DataError::format(
            images.1,
            format!(
                "expected images of shape [n, 28, 28], header says {:?}",
                img.dims
            ),
        ));
    }
    let lab = parse_idx(labels.0, labels.1)?;
    if lab.dims.len() != 1 {
        return Err(DataError::format(
            labels.1,
            format!("expected labels of shape [n], header says {:?}", lab.dims),
        ));
    }
    if lab.dims[0] != img.dims[0] {
        return Err(DataError::format(
            labels.1,
            format!(
                "{} labels for {} images in {}",
                lab.dims[0],
                img.dims[0],
                images.1.display()
            ),
        ));
    }
    if let Some((i, &l)) = lab
        .data
        .iter()
        .enumerate()
        .find(|(_, l)| **l as usize >= CLASSES)
    {
        return Err(DataError::format(
            labels.1,
            format!("label {l} at index {i} is not a digit 0-9"),
        ));
    }
    Ok(Split {
        images: img.data,
        labels: lab.data,
    })
}

impl Mnist {
    /// The 10,000-digit subset embedded in this crate.
    pub fn vendored() -> Self {
        let name = |i: usize| PathBuf::from(format!("vendored/{}", FILES[i]));
        let (a, b, c, d) = (name(0), name(1), name(2), name(3));
        // The embedded bytes are fixed at compile time and checked by this crate's tests
        // (`vendored_subset_is_the_documented_one`), so failing here is a build defect.
        let train = split((VENDORED[0], &a), (VENDORED[1], &b))
            .expect("vendored MNIST train split is valid");
        let test = split((VENDORED[2], &c), (VENDORED[3], &d))
            .expect("vendored MNIST test split is valid");
        Mnist {
            train,
            test,
            source: "vendored 10k subset".into(),
        }
    }

    /// The digits a run asks for: the full set from `dir` (fetched into it from [`MIRRORS`] and
    /// verified first when `download`), or without either the vendored subset. `dir` defaults
    /// to [`full_dir`] of the cache when downloading.
    pub fn load(download: bool, dir: Option<&Path>) -> Result<Self> {
        let default = full_dir(&crate::cache::data_dir());
        let full = dir.unwrap_or(&default);
        if download {
            let client = crate::download::client()?;
            self::download(&client, full, &MIRRORS, &mut |_, _, _| {})?;
        } else if dir.is_none() {
            return Ok(Self::vendored());
        }
        Self::from_dir(full)
    }

    /// Reads the four files from `dir`, gzip'd (the published names) or not (the names without
    /// `.gz`).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let mut bytes = Vec::new();
        let mut paths = Vec::new();
        for name in FILES {
            let gz = dir.join(name);
            let raw = dir.join(name.trim_end_matches(".gz"));
            let path = if gz.exists() {
                gz
            } else if raw.exists() {
                raw
            } else {
                return Err(DataError::format(
                    &gz,
                    format!(
                        "missing (looked for {name} and {} in {})",
                        name.trim_end_matches(".gz"),
                        dir.display()
                    ),
                ));
            };
            bytes.push(std::fs::read(&path).map_err(|e| DataError::io(&path, e))?);
            paths.push(path);
        }
        Ok(Mnist {
            train: split((&bytes[0], &paths[0]), (&bytes[1], &paths[1]))?,
            test: split((&bytes[2], &paths[2]), (&bytes[3], &paths[3]))?,
            source: dir.display().to_string(),
        })
    }
}

/// The directory the full set is downloaded into.
pub fn full_dir(cache: &Path) -> PathBuf {
    cache.join("mnist")
}

/// Fetches (or verifies) the full MNIST into `dir` from `mirrors` (base addresses ending in `/`).
/// Returns what happened to each file.
pub fn download(
    client: &crate::download::Client,
    dir: &Path,
    mirrors: &[&str],
    progress: &mut dyn FnMut(&str, u64, Option<u64>),
) -> Result<Vec<Fetched>> {
    FILES
        .iter()
        .zip(FULL_MD5)
        .map(|(name, md5)| {
            let remote = Remote {
                what: format!("MNIST {name}"),
                urls: mirrors.iter().map(|m| format!("{m}{name}")).collect(),
                dest: dir.join(name),
                checksum: Some(Checksum::Md5(md5.to_string())),
            };
            fetch(client, &remote, &mut |d, t| progress(name, d, t))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::sha256_hex;

    #[test]
    fn vendored_subset_is_the_documented_one() {
        // SHA256SUMS beside the files, as published with the subset.
        let sums = include_str!("../data/mnist-10k/SHA256SUMS");
        for (name, bytes) in FILES.iter().zip(VENDORED) {
            let line = sums.lines().find(|l| l.ends_with(name)).unwrap();
            assert_eq!(
                line.split_whitespace().next().unwrap(),
                sha256_hex(bytes),
                "{name}"
            );
        }
        let m = Mnist::vendored();
        assert_eq!((m.train.len(), m.test.len()), (7_996, 2_004));
        let mut counts = [0usize; 10];
        for &l in &m.test.labels {
            counts[l as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| c > 150),
            "every digit is in the test split: {counts:?}"
        );
        // Real digits: ink in the middle, none in the corners, the usual ~19% of pixels lit.
        let lit =
            m.train.images.iter().filter(|&&p| p > 0).count() as f64 / m.train.images.len() as f64;
        assert!((0.15..0.25).contains(&lit), "share of lit pixels {lit}");
    }

    #[test]
    fn from_dir_names_the_missing_file() {
        let dir = std::env::temp_dir().join(format!("nervus-mnist-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Mnist::from_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains("train-images-idx3-ubyte.gz") && e.contains("missing"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mismatched_counts_and_bad_labels_are_refused() {
        use crate::idx::encode_idx;
        let images = encode_idx(&[2, 28, 28], &[0u8; 2 * PIXELS]);
        let labels = encode_idx(&[3], &[1, 2, 3]);
        let e = split((&images, Path::new("i")), (&labels, Path::new("l"))).unwrap_err();
        assert!(e.to_string().contains("3 labels for 2 images"), "{e}");
        let labels = encode_idx(&[2], &[1, 12]);
        let e = split((&images, Path::new("i")), (&labels, Path::new("l"))).unwrap_err();
        assert!(e.to_string().contains("label 12 at index 1"), "{e}");
        let images = encode_idx(&[2, 27, 29], &[0u8; 2 * 27 * 29]);
        let e = split((&images, Path::new("i")), (&labels, Path::new("l"))).unwrap_err();
        assert!(e.to_string().contains("[n, 28, 28]"), "{e}");
    }
}
