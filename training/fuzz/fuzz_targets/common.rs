//! What the targets share: a saved model's files, written into a scratch directory of this
//! process with one of them replaced by the fuzzer's input (its first byte picks which, the rest
//! is the new content), and the backend the loaders run on.

use std::path::PathBuf;

pub type B = burn_ndarray::NdArray<f32>;

pub struct Fixture {
    dir: PathBuf,
    files: &'static [(&'static str, &'static [u8])],
}

impl Fixture {
    pub fn new(name: &str, files: &'static [(&'static str, &'static [u8])]) -> Self {
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("nervus-fuzz-{name}-{}", std::process::id()));
        Self { dir, files }
    }

    /// The fixture's directory with file `data[0] % files` holding `data[1..]`; `None` for an
    /// empty input.
    pub fn with(&self, data: &[u8]) -> Option<&std::path::Path> {
        let (&pick, rest) = data.split_first()?;
        let pick = pick as usize % self.files.len();
        let _ = std::fs::remove_dir_all(&self.dir);
        for (i, (name, bytes)) in self.files.iter().enumerate() {
            let path = self.dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a file in a folder"))
                .expect("the scratch directory");
            std::fs::write(&path, if i == pick { rest } else { bytes }).expect("a scratch file");
        }
        Some(&self.dir)
    }
}
