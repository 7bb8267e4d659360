//! Replay speed: trace entries per second through `engine::replay` (the allocator simulation, the
//! comparison with the recording, the timeline and the event log), reading and decoding the
//! snapshot excluded.
//!
//! `cargo bench -p oomlens-engine --bench replay [-- FILE…]`. Without files it uses
//! `../shared/corpus/large/gpt__baseline__long400.pickle.gz` (961,801 entries) and says
//! `skipped:` when that is absent. Each file is replayed a few times; the best and the median
//! run are reported, for the default options (everything recorded) and for a bare replay
//! (no event log, no timeline), with the recorded settings and with `expandable_segments:True`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oomlens_engine::allocator::AllocatorConfig;
use oomlens_engine::replay::{ReplayOptions, replay};
use oomlens_engine::snapshot::{ReadOptions, read_snapshot_bytes};

fn main() {
    let mut files: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .collect();
    if files.is_empty() {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/corpus/large/gpt__baseline__long400.pickle.gz");
        if !p.exists() {
            eprintln!("skipped: {} not found (pass a snapshot file)", p.display());
            return;
        }
        files.push(p);
    }
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let t = Instant::now();
        let snapshot = read_snapshot_bytes(&bytes, &ReadOptions::default()).unwrap();
        let read = t.elapsed();
        let n: usize = snapshot.traces.iter().map(|t| t.entries.len()).sum();
        println!("{}: {n} entries, read in {read:.2?}", path.display());
        let bare = ReplayOptions {
            record_events: false,
            record_timeline: false,
            ..ReplayOptions::default()
        };
        let expandable = ReplayOptions {
            config: Some(AllocatorConfig {
                expandable_segments: true,
                ..AllocatorConfig::default()
            }),
            ..ReplayOptions::default()
        };
        for (name, opts) in [
            ("recorded settings, full output", ReplayOptions::default()),
            ("recorded settings, bare", bare),
            ("expandable_segments:True", expandable),
        ] {
            let mut times: Vec<Duration> = Vec::new();
            let mut peak = 0;
            for _ in 0..7 {
                let t = Instant::now();
                let r = replay(&snapshot, &opts).unwrap();
                times.push(t.elapsed());
                peak = r.peak_reserved_bytes;
                std::hint::black_box(&r);
            }
            times.sort();
            let rate = |d: Duration| n as f64 / d.as_secs_f64() / 1e6;
            println!(
                "  {name:32} best {:>8.2?} ({:5.1} M entries/s)  median {:>8.2?} ({:5.1} M entries/s)  peak reserved {peak}",
                times[0],
                rate(times[0]),
                times[times.len() / 2],
                rate(times[times.len() / 2]),
            );
        }
    }
}
