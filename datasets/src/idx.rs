//! The IDX format (LeCun's, used by MNIST), read against its definition:
//!
//! ```text
//! byte 0, 1   zero
//! byte 2      element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//! byte 3      number of dimensions n
//! 4 * n       each dimension as a big-endian u32
//! rest        the elements, row-major, big-endian
//! ```
//!
//! Only unsigned bytes are accepted (every MNIST file is 0x08). A gzip'd file is recognised by its
//! own magic bytes and inflated first. Every check that fails says which file and what is wrong.

use crate::{DataError, Result};
use std::io::Read;
use std::path::Path;

/// A parsed IDX file of unsigned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idx {
    /// The dimensions from the header, outermost first.
    pub dims: Vec<usize>,
    /// `dims.iter().product()` elements, row-major.
    pub data: Vec<u8>,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

fn type_name(code: u8) -> &'static str {
    match code {
        0x08 => "unsigned byte",
        0x09 => "signed byte",
        0x0B => "i16",
        0x0C => "i32",
        0x0D => "f32",
        0x0E => "f64",
        _ => "unknown",
    }
}

/// Reads and parses `path` (raw or gzip'd).
pub fn read_idx(path: &Path) -> Result<Idx> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    parse_idx(&bytes, path)
}

/// The most a gzip'd IDX file may inflate to.
pub const MAX_INFLATED: u64 = 256 << 20;

/// Parses IDX bytes (raw or gzip'd); `name` is used in error messages only.
pub fn parse_idx(bytes: &[u8], name: &Path) -> Result<Idx> {
    let inflated;
    let bytes = if bytes.starts_with(&GZIP_MAGIC) {
        let mut out = Vec::new();
        // A few kilobytes of gzip can claim gigabytes: inflate no further than any IDX file
        // this reads needs (MNIST's largest is 47 MB).
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_INFLATED + 1)
            .read_to_end(&mut out)
            .map_err(|e| DataError::format(name, format!("gzip stream is damaged: {e}")))?;
        if out.len() as u64 > MAX_INFLATED {
            return Err(DataError::format(
                name,
                format!(
                    "the gzip stream inflates to more than {} MB, more than an IDX file here holds",
                    MAX_INFLATED >> 20
                ),
            ));
        }
        inflated = out;
        &inflated[..]
    } else {
        bytes
    };
    if bytes.len() < 4 {
        return Err(DataError::format(
            name,
            format!(
                "{} bytes is too short for an IDX header (4 bytes of magic)",
                bytes.len()
            ),
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(DataError::format(
            name,
            format!(
                "not an IDX file: magic starts {:02x} {:02x}, expected 00 00",
                bytes[0], bytes[1]
            ),
        ));
    }
    let code = bytes[2];
    if code != 0x08 {
        return Err(DataError::format(
            name,
            format!(
                "element type 0x{code:02x} ({}) is not supported; MNIST files hold unsigned bytes (0x08)",
                type_name(code)
            ),
        ));
    }
    let ndims = bytes[3] as usize;
    if ndims == 0 {
        return Err(DataError::format(name, "header declares zero dimensions"));
    }
    let header = 4 + 4 * ndims;
    if bytes.len() < header {
        return Err(DataError::format(
            name,
            format!(
                "truncated header: {ndims} dimensions need {header} bytes, file has {}",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = (0..ndims)
        .map(|i| {
            let o = 4 + 4 * i;
            u32::from_be_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        })
        .collect();
    let count = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| DataError::format(name, format!("dimensions {dims:?} overflow")))?;
    let body = bytes.len() - header;
    if body < count {
        return Err(DataError::format(
            name,
            format!(
                "truncated: dimensions {dims:?} promise {count} bytes of data, file holds {body}"
            ),
        ));
    }
    if body > count {
        return Err(DataError::format(
            name,
            format!(
                "{} unexpected bytes after the {count} that dimensions {dims:?} promise (the \
                 magic's last byte declares {ndims} dimensions)",
                body - count
            ),
        ));
    }
    Ok(Idx {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// Serialises an unsigned-byte IDX file (used by tests and by anyone making a subset).
pub fn encode_idx(dims: &[usize], data: &[u8]) -> Vec<u8> {
    assert_eq!(
        dims.iter().product::<usize>(),
        data.len(),
        "dims and data disagree"
    );
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for &d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn name() -> &'static Path {
        Path::new("x-idx3-ubyte")
    }

    fn err(bytes: &[u8]) -> String {
        parse_idx(bytes, name()).unwrap_err().to_string()
    }

    #[test]
    fn round_trip_raw_and_gzip() {
        let data: Vec<u8> = (0..24).collect();
        let raw = encode_idx(&[2, 3, 4], &data);
        let idx = parse_idx(&raw, name()).unwrap();
        assert_eq!(idx.dims, vec![2, 3, 4]);
        assert_eq!(idx.data, data);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&raw).unwrap();
        assert_eq!(parse_idx(&gz.finish().unwrap(), name()).unwrap(), idx);
    }

    /// A gzip bomb (300 MB of zeros in a few hundred kilobytes) is refused once it passes the
    /// cap, not inflated whole.
    #[test]
    fn a_gzip_stream_that_inflates_past_the_cap_is_refused() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        assert!(
            err(&bomb).contains("inflates to more than 256 MB"),
            "{}",
            err(&bomb)
        );
    }

    #[test]
    fn every_defect_is_named() {
        let good = encode_idx(&[2, 2], &[1, 2, 3, 4]);
        assert!(err(&good[..2]).contains("too short"));
        let mut bad = good.clone();
        bad[0] = 0x50;
        assert!(err(&bad).contains("not an IDX file"));
        let mut bad = good.clone();
        bad[2] = 0x0D;
        assert!(
            err(&bad).contains("0x0d (f32) is not supported"),
            "{}",
            err(&bad)
        );
        let mut bad = good.clone();
        bad[3] = 0;
        assert!(err(&bad).contains("zero dimensions"));
        assert!(err(&good[..7]).contains("truncated header"));
        let e = err(&good[..good.len() - 1]);
        assert!(
            e.contains("truncated") && e.contains("promise 4 bytes") && e.contains("holds 3"),
            "{e}"
        );
        let mut long = good.clone();
        long.push(9);
        assert!(err(&long).contains("1 unexpected bytes"));
        assert!(
            err(&long).starts_with("x-idx3-ubyte: "),
            "the file is named"
        );
    }

    #[test]
    fn damaged_gzip_is_an_error_not_garbage() {
        let raw = encode_idx(&[4], &[1, 2, 3, 4]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        let e = err(&gz[..gz.len() / 2]);
        assert!(e.contains("gzip stream is damaged"), "{e}");
    }
}
