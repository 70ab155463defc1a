//! int8 weights, cached beside the model as `model.q8.safetensors`.
//!
//! One scale per output row: measured against a scale per 64 inputs on a 124M GPT-2
//! (`cargo xtask bench generate`, docs/engine.md), a row's scale keeps the dot product one loop
//! with one multiply at its end, and ran twice as fast, while a group's scale cost a
//! multiply-and-sum every 64 inputs.
//!
//! The cache knows which checkpoint it was made from by the checkpoint's full path, size and
//! modification time (to the nanosecond, where the file system keeps it). The size alone is not
//! enough: a model retrained and saved over itself is the same length to the byte (the
//! reference's stale-cache bug), and two directories with the same last component are two models.
//! A copy that keeps timestamps can still defeat it (make's flaw); hashing would close that, at a
//! cost on a large checkpoint that the cache exists to avoid.

use super::EngineError;
use burn::prelude::*;
use nervus_models::checkpoint::CheckpointError;
use nervus_models::decode::matrix::Q8Matrix;
use nervus_models::gpt::Gpt;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The cache file's name, beside `model.safetensors`.
pub const CACHE: &str = "model.q8.safetensors";
const FORMAT: &str = "nervus-q8-rows-1";

/// Which checkpoint a cache was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: u128,
}

impl Source {
    pub fn of(checkpoint: &Path) -> Result<Self, CheckpointError> {
        let io = |e| CheckpointError::io(checkpoint, e);
        let path = std::fs::canonicalize(checkpoint).map_err(io)?;
        let meta = std::fs::metadata(&path).map_err(io)?;
        let mtime_ns = meta
            .modified()
            .map_err(io)?
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Ok(Self {
            path,
            size: meta.len(),
            mtime_ns,
        })
    }

    fn metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("source".to_string(), self.path.display().to_string()),
            ("source_size".to_string(), self.size.to_string()),
            ("source_mtime_ns".to_string(), self.mtime_ns.to_string()),
        ])
    }
}

/// The model's int8 weights: from the cache when it was made from this very checkpoint, else
/// quantised now and cached. The second value says which (and why a cache could not be written:
/// a read-only directory is not an error).
pub fn load_or_make<B: Backend>(
    dir: &Path,
    model: &Gpt<B>,
) -> Result<(HashMap<String, Q8Matrix>, String), EngineError> {
    let source = Source::of(&dir.join("model.safetensors"))?;
    let cache = dir.join(CACHE);
    if let Some(q8) = read(&cache, &source) {
        return Ok((q8, format!("read from {CACHE}")));
    }
    let q8 = nervus_models::decode::quantize(model, None);
    let how = match write(&cache, &source, &q8) {
        Ok(()) => format!("quantised now, cached in {CACHE}"),
        Err(e) => format!("quantised now; not cached: {e}"),
    };
    Ok((q8, how))
}

/// The cache's weights when it exists, reads, and was made from `source`; `None` otherwise (a
/// stale or damaged cache is made again, never used).
pub fn read(cache: &Path, source: &Source) -> Option<HashMap<String, Q8Matrix>> {
    let bytes = std::fs::read(cache).ok()?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).ok()?;
    if meta.metadata().as_ref()? != &source.metadata() {
        return None;
    }
    let st = SafeTensors::deserialize(&bytes).ok()?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let Some(base) = name.strip_suffix(".q") else {
            continue;
        };
        let scales = st.tensor(&format!("{base}.scale")).ok()?;
        let (&[rows, cols], &[srows, 1]) = (view.shape(), scales.shape()) else {
            return None;
        };
        if view.dtype() != Dtype::I8 || scales.dtype() != Dtype::F32 || srows != rows {
            return None;
        }
        let q = view.data().iter().map(|&b| b as i8).collect();
        let scales = scales
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        out.insert(
            base.to_string(),
            Q8Matrix {
                rows,
                cols,
                group: cols,
                q,
                scales,
            },
        );
    }
    Some(out)
}

/// Writes the cache atomically (a temporary file, then a rename).
pub fn write(cache: &Path, source: &Source, q8: &HashMap<String, Q8Matrix>) -> Result<(), String> {
    let mut names: Vec<&String> = q8.keys().collect();
    names.sort();
    let scale_bytes: HashMap<&String, Vec<u8>> = names
        .iter()
        .map(|n| (*n, bytemuck_f32(&q8[*n].scales)))
        .collect();
    let mut views = Vec::new();
    for n in &names {
        let m = &q8[*n];
        if m.group != m.cols {
            return Err(format!(
                "`{n}` has a scale per {} inputs, not per row",
                m.group
            ));
        }
        let q: &[u8] = bytemuck::cast_slice(&m.q);
        views.push((
            format!("{n}.q"),
            TensorView::new(Dtype::I8, vec![m.rows, m.cols], q).map_err(|e| e.to_string())?,
        ));
        views.push((
            format!("{n}.scale"),
            TensorView::new(Dtype::F32, vec![m.rows, 1], &scale_bytes[*n])
                .map_err(|e| e.to_string())?,
        ));
    }
    let bytes =
        safetensors::serialize(views, Some(source.metadata())).map_err(|e| e.to_string())?;
    nervus_datasets::text::write_atomic(cache, &bytes).map_err(|e| e.to_string())
}

fn bytemuck_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
