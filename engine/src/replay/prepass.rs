//! One cheap pass over a trace before replaying it: the highest reserved level the recording
//! reached, the last `alloc` entry (to tell a final OOM from a caught one), and whether the trace
//! starts mid-run — decided from segment entries only (a few hundred), without the full
//! backward walk of `trace::initial_state`: a trace starts from an empty allocator exactly when
//! every `segment_free`/`segment_unmap` releases memory the trace itself obtained, and every
//! segment of the final dump lies in memory the trace obtained. (A block that predates the trace
//! lives in a segment that predates it, which then either is released during the trace or is
//! still in the dump.)

use crate::snapshot::{Action, Snapshot, TraceEntry};
use crate::trace::RangeSet;

/// What the pass found.
#[derive(Debug, Clone)]
pub(super) struct Prepass {
    /// Highest reserved bytes the recording reached (counted from 0).
    pub(super) max_reserved: u64,
    /// Index of the last `alloc` entry.
    pub(super) last_alloc: Option<usize>,
    /// The trace does not start from an empty allocator.
    pub(super) starts_mid_run: bool,
    /// Indices of the segment entries (`segment_alloc`/`_free`/`_map`/`_unmap`), in order: a few
    /// hundred, so later passes over segment entries need not walk the whole trace.
    pub(super) segment_entries: Vec<u32>,
}

pub(super) fn prepass(snapshot: &Snapshot, device: u32, entries: &[TraceEntry]) -> Prepass {
    let mut ranges = RangeSet::default();
    let mut reserved = 0u64;
    let mut max_reserved = 0u64;
    let mut last_alloc = None;
    let mut mid_run = false;
    let mut segment_entries = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let seg = matches!(
            e.action,
            Action::SegmentAlloc | Action::SegmentMap | Action::SegmentFree | Action::SegmentUnmap
        );
        if seg {
            segment_entries.push(u32::try_from(i).unwrap_or(u32::MAX));
        }
        match e.action {
            Action::Alloc => last_alloc = Some(i),
            Action::SegmentAlloc | Action::SegmentMap => {
                ranges.insert(e.addr, e.size, e.action == Action::SegmentMap, e.stream);
                reserved = reserved.saturating_add(e.size);
                max_reserved = max_reserved.max(reserved);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                if ranges.remove(e.addr, e.size) != e.size {
                    mid_run = true;
                }
                reserved = reserved.saturating_sub(e.size);
            }
            _ => {}
        }
    }
    if !mid_run {
        mid_run = snapshot
            .segments
            .iter()
            .filter(|s| s.device == device)
            .any(|s| ranges.covered(s.address, s.total_size) != s.total_size);
    }
    Prepass {
        max_reserved,
        last_alloc,
        starts_mid_run: mid_run,
        segment_entries,
    }
}
