//! Named tensors on disk in the safetensors format, written atomically.
//!
//! A model is a list of named arrays and nothing else, so the only decision in saving one is which
//! names and which layouts; those are a contract with whoever reads the file (transformers,
//! diffusers, PyTorch). Each model's own file says which contract it keeps; this one only moves
//! bytes, and never leaves a half-written file where a good one was: it writes `<name>.partial`
//! and renames it into place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What can go wrong reading or writing a checkpoint; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {problem}")]
    Format { file: PathBuf, problem: String },
    #[error("{file}: tensor `{name}` is missing")]
    Missing { file: PathBuf, name: String },
    #[error("{file}: tensor `{name}` has shape {got:?}, the model expects {expected:?}")]
    Shape {
        file: PathBuf,
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
}

impl CheckpointError {
    pub fn format(file: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        Self::Format {
            file: file.into(),
            problem: problem.into(),
        }
    }

    pub fn io(file: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            file: file.into(),
            source,
        }
    }
}

/// One named array of f32, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl NamedTensor {
    pub fn new(name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) -> Self {
        let name = name.into();
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "tensor {name}: shape {shape:?} and data length disagree"
        );
        Self { name, shape, data }
    }

    /// The transpose of a 2-D tensor (for moving between `[in, out]` and `[out, in]` layouts).
    pub fn transposed(mut self) -> Self {
        assert_eq!(self.shape.len(), 2, "transposed() is for 2-D tensors");
        let (r, c) = (self.shape[0], self.shape[1]);
        let mut t = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                t[j * r + i] = self.data[i * c + j];
            }
        }
        self.shape = vec![c, r];
        self.data = t;
        self
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader sees the old file or the new one and never a mixture.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(CheckpointError::io(path, e));
    }
    Ok(())
}

/// Serialises tensors (f32, little-endian) with optional string metadata, atomically.
pub fn write_safetensors(
    path: &Path,
    tensors: &[NamedTensor],
    metadata: Option<HashMap<String, String>>,
) -> Result<(), CheckpointError> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| t.data.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.shape.clone(), b)
                .map(|v| (t.name.clone(), v))
                .map_err(|e| CheckpointError::format(path, format!("tensor {}: {e}", t.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = safetensors::serialize(views, metadata)
        .map_err(|e| CheckpointError::format(path, e.to_string()))?;
    write_atomic(path, &out)
}

/// The tensors of a safetensors file, by name; f32, f64, f16 and bf16 are read (as f32).
#[derive(Clone, Debug)]
pub struct TensorFile {
    pub path: PathBuf,
    pub tensors: HashMap<String, NamedTensor>,
}

impl TensorFile {
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        let bytes = std::fs::read(path).map_err(|e| CheckpointError::io(path, e))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| CheckpointError::format(path, format!("not a safetensors file: {e}")))?;
        let mut tensors = HashMap::new();
        for (name, view) in st.tensors() {
            let raw = view.data();
            let data: Vec<f32> = match view.dtype() {
                safetensors::Dtype::F32 => raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                safetensors::Dtype::F64 => raw
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
                    .collect(),
                safetensors::Dtype::BF16 => raw
                    .chunks_exact(2)
                    .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                    .collect(),
                safetensors::Dtype::F16 => raw
                    .chunks_exact(2)
                    .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
                safetensors::Dtype::I64 => raw
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
                    .collect(),
                other => {
                    return Err(CheckpointError::format(
                        path,
                        format!("tensor `{name}` has dtype {other:?}, which is not read here"),
                    ));
                }
            };
            let shape = view.shape().to_vec();
            tensors.insert(name.clone(), NamedTensor { name, shape, data });
        }
        Ok(Self {
            path: path.to_path_buf(),
            tensors,
        })
    }

    /// The tensor `name`, checked against the shape the model expects.
    pub fn take(&mut self, name: &str, expected: &[usize]) -> Result<NamedTensor, CheckpointError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| CheckpointError::Missing {
                file: self.path.clone(),
                name: name.to_string(),
            })?;
        if t.shape != expected {
            return Err(CheckpointError::Shape {
                file: self.path.clone(),
                name: name.to_string(),
                expected: expected.to_vec(),
                got: t.shape,
            });
        }
        Ok(t)
    }

    /// Names left after every expected tensor was taken: a file with extra tensors is not the
    /// model the caller thinks it is.
    pub fn finish(self) -> Result<(), CheckpointError> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let mut names: Vec<_> = self.tensors.into_keys().collect();
        names.sort();
        Err(CheckpointError::format(
            self.path,
            format!("unexpected tensors: {}", names.join(", ")),
        ))
    }
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if frac == 0 => sign,
        0 => {
            // Subnormal: renormalise.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((f & 0x3ff) << 13)
        }
        0x1f => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

/// Writes a serde value as pretty JSON, atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), CheckpointError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CheckpointError::format(path, e.to_string()))?;
    write_atomic(path, format!("{text}\n").as_bytes())
}

/// Reads a JSON file into a serde value, naming the file on failure.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|e| CheckpointError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::format(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let dir = std::env::temp_dir().join(format!("nervus-ckpt-{}", std::process::id()));
        let path = dir.join("m.safetensors");
        let t = NamedTensor::new("a.weight", vec![2, 3], vec![1., 2., 3., 4., 5., 6.]);
        write_safetensors(&path, std::slice::from_ref(&t), None).unwrap();
        assert!(!dir.join("m.safetensors.partial").exists());
        let mut f = TensorFile::read(&path).unwrap();
        let e = f.clone().take("a.weight", &[3, 2]).unwrap_err().to_string();
        assert!(
            e.contains("a.weight") && e.contains("[2, 3]") && e.contains("[3, 2]"),
            "{e}"
        );
        let e = f.clone().take("b", &[1]).unwrap_err().to_string();
        assert!(e.contains("`b` is missing"), "{e}");
        assert_eq!(f.take("a.weight", &[2, 3]).unwrap(), t);
        f.finish().unwrap();
        std::fs::write(&path, b"garbage").unwrap();
        let e = TensorFile::read(&path).unwrap_err().to_string();
        assert!(
            e.contains("not a safetensors file") && e.contains("m.safetensors"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn transpose_moves_between_layouts() {
        let t = NamedTensor::new("w", vec![2, 3], vec![1., 2., 3., 4., 5., 6.]).transposed();
        assert_eq!(t.shape, vec![3, 2]);
        assert_eq!(t.data, vec![1., 4., 2., 5., 3., 6.]);
    }

    #[test]
    fn half_precision_decodes() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        // Zero is not a subnormal to renormalise (whose loop never ends on a zero fraction),
        // and keeps its sign.
        assert_eq!(f16_to_f32(0x0000).to_bits(), 0);
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
    }

    /// transformers and diffusers save f64, bf16, f16 and integer buffers as well as f32: each is
    /// decoded to its value (every value below is exact in its format), and a dtype that is not
    /// read is refused naming the tensor.
    #[test]
    fn every_stored_dtype_decodes_to_its_values() {
        use safetensors::Dtype;
        let dir = std::env::temp_dir().join(format!("nervus-dtypes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.safetensors");
        let f64s: Vec<u8> = [1.5f64, -0.25, 3e-3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // bf16 is an f32's top half: 1.0 = 0x3f80, −2.5 = 0xc020, 0.09375 = 0x3dc0.
        let bf16s: Vec<u8> = [0x3f80u16, 0xc020, 0x3dc0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // f16: 65504 (largest), −∞, 0.5, 2⁻¹⁴ (smallest normal), 3·2⁻²⁴ (a subnormal).
        let f16s: Vec<u8> = [0x7bffu16, 0xfc00, 0x3800, 0x0400, 0x0003]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i64s: Vec<u8> = [7i64, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let views = vec![
            ("f64", Dtype::F64, vec![3], &f64s),
            ("bf16", Dtype::BF16, vec![3], &bf16s),
            ("f16", Dtype::F16, vec![5], &f16s),
            ("i64", Dtype::I64, vec![2], &i64s),
        ];
        let write = |views: &[(&str, Dtype, Vec<usize>, &Vec<u8>)]| {
            let views: Vec<_> = views
                .iter()
                .map(|(n, d, s, b)| {
                    let v = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
                    (n.to_string(), v)
                })
                .collect();
            std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
        };
        write(&views);
        let mut f = TensorFile::read(&path).unwrap();
        let mut take = |n: &str, s: &[usize]| f.take(n, s).unwrap().data;
        assert_eq!(take("f64", &[3]), [1.5, -0.25, 3e-3f64 as f32]);
        assert_eq!(take("bf16", &[3]), [1.0, -2.5, 0.09375]);
        assert_eq!(
            take("f16", &[5]),
            [
                65504.0,
                f32::NEG_INFINITY,
                0.5,
                2f32.powi(-14),
                3.0 * 2f32.powi(-24)
            ]
        );
        assert_eq!(take("i64", &[2]), [7.0, -3.0]);
        f.finish().unwrap();
        assert!(f16_to_f32(0x7e00).is_nan());

        let bytes = vec![1u8, 2];
        write(&[("mask", Dtype::U8, vec![2], &bytes)]);
        let e = TensorFile::read(&path).unwrap_err().to_string();
        assert!(e.contains("`mask`") && e.contains("U8"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Tensors nobody asked for are named, sorted, in the error.
    #[test]
    fn tensors_left_over_are_refused_by_name() {
        let t = |n: &str| NamedTensor::new(n, vec![1], vec![0.0]);
        let f = TensorFile {
            path: PathBuf::from("x.safetensors"),
            tensors: [t("zeta"), t("alpha")]
                .into_iter()
                .map(|t| (t.name.clone(), t))
                .collect(),
        };
        let e = f.finish().unwrap_err().to_string();
        assert!(
            e.contains("x.safetensors") && e.contains("unexpected tensors: alpha, zeta"),
            "{e}"
        );
    }
}
