//! Fuzz target: the snapshot decoder (gzip or plain; pickle or JSON) on arbitrary bytes, default
//! options, then the analysis with its exact-peak replay on what it read. Any panic, abort, stack
//! overflow, timeout or out-of-memory is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oomlens_engine::snapshot::{ReadOptions, read_snapshot_bytes};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = read_snapshot_bytes(data, &ReadOptions::default()) {
        // Touch what the analysis reads: every entry's stack, every block's.
        let mut n = 0usize;
        for e in s.traces.iter().flat_map(|t| &t.entries) {
            n += s.stacks.frames(e.frames).len();
            let _ = e.device_free();
        }
        for b in s.segments.iter().flat_map(|g| &g.blocks) {
            n += s.stacks.frames(b.frames).len();
        }
        std::hint::black_box(n);
        std::hint::black_box(oomlens_engine::analysis::analyze_exact(&s).exact);
    }
});
