//! Reading a snapshot named on the command line (a file, or `-` for standard input), for the
//! commands that need a snapshot and nothing else (`replay`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use oomlens_engine::snapshot::{ReadOptions, Snapshot, read_snapshot, read_snapshot_parallel};

use super::Failure;

/// The display name of `path` (`<stdin>` for `-`).
pub fn display_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

/// Reads the snapshot at `path`; every failure is bad input naming the file.
pub fn read(path: &Path) -> Result<Snapshot, Failure> {
    let name = display_name(path);
    let opts = ReadOptions::default();
    let t0 = std::time::Instant::now();
    let snapshot = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
        read_snapshot(buf.as_slice(), &opts)
    } else {
        if path.is_dir() {
            return Err(Failure::BadInput(format!(
                "{name}: is a directory, expected a snapshot file"
            )));
        }
        let f = File::open(path).map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
        read_snapshot_parallel(f, &opts)
    };
    let snapshot = snapshot.map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
    tracing::info!(elapsed = ?t0.elapsed(), "snapshot read");
    Ok(snapshot)
}
