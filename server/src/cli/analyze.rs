//! `oomlens analyze FILE [--json]`: a snapshot or an OOM log, told apart by content, into a report.

use std::path::Path;

use oomlens_engine::report;

use super::{Failure, emit, snapshot_input};
use crate::ingest::{self, Limits};

pub fn run(path: &Path, json: bool, top: usize) -> Result<(), Failure> {
    let name = ingest::display_name(path);
    let input = snapshot_input::open_input(path, "a snapshot or an OOM log file")?;
    let report = ingest::analyze(&input, &Limits::default())
        .map_err(|why| Failure::BadInput(format!("{name}: {why}")))?
        .with_source_name(&name);
    let text = if json {
        let mut s =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::Internal(e.into()))?;
        s.push('\n');
        s
    } else {
        report::render_text(&report, top)
    };
    emit(&text)
}
