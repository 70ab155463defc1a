//! Writes that are whole or not there: a file through a synced temporary copy and a rename
//! ([`write_atomically`]), and Burn's checkpoints the same way ([`AtomicRecorder`]).

use burn::record::{
    FileRecorder, FullPrecisionSettings, NamedMpkBytesRecorder, NamedMpkFileRecorder, Recorder,
    RecorderError,
};
use std::path::{Path, PathBuf};

/// A file recorder that writes through a temporary file and a rename, so that a checkpoint on
/// disk is always a whole one, and reports a failed write. (Burn's file recorders delete the old
/// file, then write the new one in place, and drop a write error on the floor.)
#[derive(Debug, Default, Clone)]
pub struct AtomicRecorder(NamedMpkFileRecorder<FullPrecisionSettings>);

impl<B: burn::prelude::Backend> Recorder<B> for AtomicRecorder {
    type Settings = FullPrecisionSettings;
    type RecordArgs = PathBuf;
    type RecordOutput = ();
    type LoadArgs = PathBuf;

    fn save_item<I: serde::Serialize>(&self, item: I, file: PathBuf) -> Result<(), RecorderError> {
        let ext = <Self as FileRecorder<B>>::file_extension();
        let target = file.with_extension(ext);
        // The same bytes Burn's file recorder writes, but every write error is seen: Burn's
        // writer is dropped unflushed, so a full disk left an empty file that looked saved.
        let bytes = <NamedMpkBytesRecorder<FullPrecisionSettings> as Recorder<B>>::save_item(
            &NamedMpkBytesRecorder::new(),
            item,
            (),
        )?;
        write_atomically(&target, &bytes).map_err(|e| RecorderError::Unknown(e.to_string()))
    }

    /// Burn's own loading, with a panic inside it (Burn 0.21 panics on some damaged records, for
    /// one on a parameter id that does not decode: `ParamId::deserialize`) turned into an error
    /// that names the file, printed by nobody.
    fn load<R: burn::record::Record<B>>(
        &self,
        file: PathBuf,
        device: &B::Device,
    ) -> Result<R, RecorderError> {
        let shown = file.display().to_string();
        nervus_datasets::quiet::catch(|| Recorder::<B>::load(&self.0, file, device)).unwrap_or_else(
            |panic| {
                Err(RecorderError::Unknown(format!(
                    "{shown}: a damaged checkpoint ({panic})"
                )))
            },
        )
    }

    fn load_item<I: serde::de::DeserializeOwned>(
        &self,
        file: &mut PathBuf,
    ) -> Result<I, RecorderError> {
        <NamedMpkFileRecorder<FullPrecisionSettings> as Recorder<B>>::load_item(&self.0, file)
    }
}

impl<B: burn::prelude::Backend> FileRecorder<B> for AtomicRecorder {
    fn file_extension() -> &'static str {
        "mpk"
    }
}

/// `NERVUS_WRITE_DELAY_MS`: milliseconds every checkpoint and model write waits between writing
/// its temporary copy and renaming it into place, so that `cargo xtask kill-test` can land kills
/// inside writes. Unset (the default): no wait.
static WRITE_DELAY: std::sync::LazyLock<Option<std::time::Duration>> =
    std::sync::LazyLock::new(|| {
        std::env::var("NERVUS_WRITE_DELAY_MS")
            .ok()?
            .parse()
            .ok()
            .map(std::time::Duration::from_millis)
    });

/// Waits `NERVUS_WRITE_DELAY_MS` where that is set (see [`WRITE_DELAY`]).
pub fn hold_the_write_open() {
    if let Some(d) = *WRITE_DELAY {
        std::thread::sleep(d);
    }
}

/// `bytes` into `target` through a temporary file beside it, synced to the disk before the
/// rename, so that `target` is the old file or the whole new one. A failed write removes the
/// temporary file and leaves `target` alone.
pub fn write_atomically(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let staging = PathBuf::from(format!("{}.partial", target.display()));
    let write = || -> std::io::Result<()> {
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::fs::File::create(&staging)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    let result = write();
    hold_the_write_open();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&staging);
        return Err(std::io::Error::new(
            e.kind(),
            format!("writing {}: {e}", target.display()),
        ));
    }
    std::fs::rename(&staging, target).map_err(|e| {
        std::io::Error::new(e.kind(), format!("renaming into {}: {e}", target.display()))
    })
}
