//! `oomlens replay FILE [--capacity SIZE] [--alloc-conf STRING] [--export-snapshot OUT] [--json]`:
//! runs a snapshot's trace through the re-implemented caching allocator, with the recorded or
//! other settings and an optional per-process limit, and says where it runs out of memory.

use std::path::PathBuf;

use oomlens_engine::allocator::AllocatorConfig;
use oomlens_engine::replay::{ReplayOptions, replay};
use oomlens_engine::report::{ReplayReport, render_replay_text};

use super::{Failure, emit, snapshot_input};

/// What `oomlens replay` was asked to do (validated by clap and [`ReplayArgs::config`]).
#[derive(Debug)]
pub struct ReplayArgs {
    /// The snapshot.
    pub file: PathBuf,
    /// Per-process limit in bytes.
    pub capacity: Option<u64>,
    /// A `PYTORCH_CUDA_ALLOC_CONF` string.
    pub alloc_conf: Option<String>,
    /// Where to write the replay as a snapshot.
    pub export_snapshot: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
    /// CUDA device of the trace.
    pub device: u32,
}

impl ReplayArgs {
    /// The allocator settings asked for (`None`: the recorded ones).
    fn config(&self) -> Result<Option<AllocatorConfig>, Failure> {
        self.alloc_conf
            .as_deref()
            .map(|s| {
                AllocatorConfig::parse(s)
                    .map_err(|e| Failure::BadInput(format!("--alloc-conf {s:?}: {e}")))
            })
            .transpose()
    }
}

pub fn run(args: &ReplayArgs) -> Result<(), Failure> {
    let config = args.config()?;
    let name = snapshot_input::display_name(&args.file);
    let snapshot = snapshot_input::read(&args.file)?;
    let options = ReplayOptions {
        device: args.device,
        config,
        capacity: args.capacity,
        record_events: args.export_snapshot.is_some(),
        record_timeline: false,
        ..ReplayOptions::default()
    };
    let t0 = std::time::Instant::now();
    let result =
        replay(&snapshot, &options).map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
    tracing::info!(elapsed = ?t0.elapsed(), entries = result.entries_replayed, "replayed");
    if let Some(out) = &args.export_snapshot {
        snapshot_input::write(&result.to_snapshot(&snapshot), out)?;
    }
    let report = ReplayReport::new(&result, Some(&name));
    let text = if args.json {
        let mut s =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::Internal(e.into()))?;
        s.push('\n');
        s
    } else {
        render_replay_text(&report)
    };
    emit(&text)
}
