//! Snapshot files on the command line: reading one (a file, or `-` for standard input) for the
//! commands that need a snapshot and nothing else (`replay`, `whatif`), and writing one
//! (`--export-snapshot`).

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};

use oomlens_engine::snapshot::{Snapshot, WriteOptions, write_snapshot};

use super::Failure;
use crate::ingest::{Input, Limits, read_snapshot_input};

pub use crate::ingest::display_name;

/// The input named on the command line: a file, or standard input read whole for `-`.
/// `expected` completes "is a directory, expected …".
pub fn open_input(path: &Path, expected: &str) -> Result<Input, Failure> {
    let name = display_name(path);
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
        return Ok(Input::Bytes(buf));
    }
    if path.is_dir() {
        return Err(Failure::BadInput(format!(
            "{name}: is a directory, expected {expected}"
        )));
    }
    Ok(Input::File(path.to_path_buf()))
}

/// Reads the snapshot at `path`; every failure is bad input naming the file.
pub fn read(path: &Path) -> Result<Snapshot, Failure> {
    let input = open_input(path, "a snapshot file")?;
    read_snapshot_input(&input, &Limits::default())
        .map_err(|e| Failure::BadInput(format!("{}: {e}", display_name(path))))
}

/// Writes `snapshot` to `out` as a protocol-4 pickle (gzip when `out` ends in `.gz`), through a
/// temporary file in the same directory, so a failure never leaves half a file at `out`.
pub fn write(snapshot: &Snapshot, out: &Path) -> Result<(), Failure> {
    let bad = |e: &dyn std::fmt::Display| {
        Failure::BadInput(format!("--export-snapshot {}: {e}", out.display()))
    };
    let gzip = out.extension().is_some_and(|e| e == "gz");
    let opts = WriteOptions {
        gzip: gzip.then_some(6),
        ..WriteOptions::default()
    };
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| bad(&e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, tmp.as_file_mut());
    write_snapshot(snapshot, &mut w, &opts).map_err(|e| bad(&e))?;
    w.flush().map_err(|e| bad(&e))?;
    drop(w);
    // A temporary file is private (0600); the export is an ordinary file.
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| bad(&e))?;
    tmp.persist(out).map_err(|e| bad(&e.error))?;
    tracing::info!(path = %out.display(), "snapshot written");
    Ok(())
}
