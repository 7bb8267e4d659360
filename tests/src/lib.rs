//! Harness for the end-to-end tests in `e2e/`: finds (or builds) the real `oomlens` binary and runs
//! it the way a user does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The `oomlens` binary of this build profile, built once if `cargo test` did not build it.
pub fn oomlens_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/e2e-<hash> → target/<profile>/oomlens
        let exe = std::env::current_exe().unwrap_or_default();
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let bin = profile_dir.join("oomlens");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .current_dir(workspace())
            .args(["build", "-q", "-p", "oomlens"]);
        if release {
            build.arg("--release");
        }
        // Always build: cheap when up to date, and never tests a stale binary.
        let status = build.status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "could not build the oomlens binary"
        );
        bin
    })
}

/// Runs `oomlens` with `args` in the workspace root.
pub fn oomlens(args: &[&str]) -> Output {
    match Command::new(oomlens_bin())
        .current_dir(workspace())
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("could not run {}: {e}", oomlens_bin().display()),
    }
}

/// Runs `oomlens` with `args`, which must succeed, and parses its stdout as one JSON document.
pub fn json_of(args: &[&str]) -> serde_json::Value {
    let out = oomlens(args);
    assert!(
        out.status.success(),
        "oomlens {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => panic!("oomlens {args:?}: stdout is not one JSON document: {e}"),
    }
}

pub mod browser;
pub mod server;
