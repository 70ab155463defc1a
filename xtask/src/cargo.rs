//! Cargo, run from an xtask command the way a user runs it from a shell.

use std::process::Command;

/// A `cargo` command without the variables `cargo run` set for this process (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*` and the rest). Passed on, they reach cargo's fingerprints: ring's build script
/// tracks `CARGO_MANIFEST_DIR`, so a build started from here re-ran it and rebuilt ring, rustls,
/// reqwest and every crate of this workspace above them, and the next `cargo test` rebuilt them
/// all back (about 100 s each way on 2 cores; CI's kill-test stages paid it twice).
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd
}
