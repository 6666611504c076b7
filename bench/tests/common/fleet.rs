//! What the fleet tests (harness, peers) share: where the built binaries are, and scratch
//! directories.

use std::path::{Path, PathBuf};

/// The directory holding `inferrail` and `inferrail-sim` (INFERRAIL_BIN_DIR, else the target
/// directory's `debug`); fails clearly when they are missing.
pub fn bin_dir() -> PathBuf {
    let dir = match std::env::var_os("INFERRAIL_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("CARGO_TARGET_DIR") {
            Some(t) => PathBuf::from(t).join("debug"),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug"),
        },
    };
    for bin in ["inferrail", "inferrail-sim"] {
        assert!(
            dir.join(bin).is_file(),
            "{} is missing: build the binaries first with `cargo build --workspace --bins` \
             (or set INFERRAIL_BIN_DIR)",
            dir.join(bin).display()
        );
    }
    dir
}

/// A fresh, empty directory for one test: `<tmp>/inferrail-<suite>-<name>-<pid>`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inferrail-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
