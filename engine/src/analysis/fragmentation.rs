//! How the cached memory was cut up at a moment: reserved − allocated, the free blocks and the
//! largest one, and — at an OOM — whether a large enough free block was missing although enough
//! free memory was cached (fragmentation) or the memory simply was not there. Owns the gap
//! computation; it reads the records and range events of a device run.
//!
//! Where the layout comes from:
//! * `segments`: at an OOM after which the trace changes nothing more, the dump's own blocks are
//!   the state at the OOM; the free blocks are its `inactive` blocks (exact).
//! * `trace`: otherwise the layout is rebuilt for that moment: the reserved ranges the trace had
//!   then (adjacent mapped ranges of an expandable segment merged), minus the blocks occupied then
//!   (allocated or pending free) at their deduced sizes; every gap is a free block, since the
//!   allocator always merges adjacent free blocks. Exact when the block sizes are (a complete
//!   trace); with blocks of estimated size (a trace that starts mid-run) a gap can be off by the
//!   estimation error. Pools are told apart by segment size (a 2 MiB cudaMalloc is the small
//!   pool; an expandable range that is not a multiple of 20 MiB is taken as small-pool pages).

use serde::Serialize;

use super::{DeviceRun, RangeEvent};
use crate::snapshot::{Action, BlockState, PoolKind, Snapshot, TraceEntry};
use crate::trace::{MemoryStats, SMALL_BUFFER, SMALL_SIZE};
use crate::units::Bytes;

/// Large-pool page of an expandable segment (kLargeBuffer).
const LARGE_PAGE: u64 = 20 << 20;

/// Fragmentation at the peak and at the OOM.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Fragmentation {
    /// At the allocated peak.
    pub at_peak: Option<FragmentationAt>,
    /// Just before the OOM ([`super::Analysis::oom`]).
    pub at_oom: Option<FragmentationAt>,
}

/// The free space at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct FragmentationAt {
    /// The entry after which (peak) or before which (OOM) this was measured.
    pub event_index: Option<usize>,
    /// `segments` (the dump's real blocks) or `trace` (layout rebuilt from the trace).
    pub source: &'static str,
    /// Reserved bytes.
    pub reserved_bytes: u64,
    /// Allocated bytes.
    pub allocated_bytes: u64,
    /// Reserved − allocated (PyTorch's "reserved by PyTorch but unallocated").
    pub unallocated_bytes: u64,
    /// Σ free blocks that could serve the request (its pool and stream); all free blocks at the
    /// peak. Less than `unallocated_bytes` by the blocks pending free.
    pub free_bytes: u64,
    /// Number of those free blocks.
    pub free_blocks: u64,
    /// The largest of them.
    pub largest_free_block_bytes: u64,
    /// The pool considered (the request's), `null` = both.
    pub pool: Option<PoolKind>,
    /// The stream considered (the request's), `null` = all.
    pub stream: Option<u64>,
    /// The OOM's rounded request.
    pub requested_bytes: Option<u64>,
    /// At the OOM: the free blocks held enough bytes in all (`free_bytes ≥ requested_bytes`) but
    /// none was large enough (`largest_free_block_bytes < requested_bytes`). When false because
    /// `free_bytes` is short too, fragmentation can still be why a new segment did not fit: the
    /// `summary` then compares reserved + request with allocated + request.
    pub blocked_by_fragmentation: Option<bool>,
    /// The same in words.
    pub summary: String,
}

#[derive(Debug, Default)]
struct Gaps {
    total: u64,
    count: u64,
    largest: u64,
}

impl Gaps {
    fn add(&mut self, gap: u64) {
        if gap == 0 {
            return;
        }
        self.total = self.total.saturating_add(gap);
        self.count += 1;
        self.largest = self.largest.max(gap);
    }
}

/// Nothing after entry `index` changes the allocator state.
fn last_change(entries: &[TraceEntry], index: usize) -> bool {
    entries.get(index.saturating_add(1)..).is_some_and(|rest| {
        rest.iter().all(|e| {
            matches!(
                e.action,
                Action::Snapshot | Action::Oom | Action::UserDefined | Action::Unknown
            )
        })
    })
}

/// Fragmentation at state `s` (after `s` entries). `oom` is the OOM entry when measuring one.
pub(crate) fn at_state(
    snapshot: &Snapshot,
    run: &DeviceRun<'_>,
    s: u32,
    event_index: Option<usize>,
    stats: MemoryStats,
    oom: Option<&TraceEntry>,
) -> FragmentationAt {
    let requested = oom.map(|e| e.size);
    let pool = requested.map(|r| {
        if r <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    });
    let stream = oom.map(|e| e.stream);
    let wanted =
        |p: PoolKind, st: u64| pool.is_none_or(|x| x == p) && stream.is_none_or(|x| x == st);

    let from_segments = oom.is_some() && event_index.is_some_and(|i| last_change(run.entries, i));
    let mut gaps = Gaps::default();
    let (reserved, allocated, source) = if from_segments {
        let mut reserved = 0u64;
        let mut allocated = 0u64;
        for seg in snapshot.segments.iter().filter(|g| g.device == run.device) {
            reserved = reserved.saturating_add(seg.total_size);
            allocated = allocated.saturating_add(seg.allocated_size);
            if !wanted(seg.segment_type, seg.stream) {
                continue;
            }
            for b in &seg.blocks {
                if b.state == BlockState::Inactive {
                    gaps.add(b.size);
                }
            }
        }
        (reserved, allocated, "segments")
    } else {
        let mut ranges = run.base_ranges.clone();
        for (at, ev) in &run.range_events {
            if *at > s {
                break;
            }
            match *ev {
                RangeEvent::Added {
                    addr,
                    size,
                    expandable,
                    stream,
                } => {
                    ranges.insert(addr, size, expandable, stream);
                }
                RangeEvent::Removed { addr, size } => {
                    ranges.remove(addr, size);
                }
            }
        }
        let mut occupied: Vec<(u64, u64)> = run
            .records
            .iter()
            .filter(|r| r.occupies_at(s))
            .map(|r| (r.addr, r.size))
            .collect();
        occupied.sort_unstable();
        for (start, info) in ranges.regions() {
            let size = info.end.saturating_sub(start);
            let p = if (!info.expandable && size == SMALL_BUFFER)
                || (info.expandable && size % LARGE_PAGE != 0)
            {
                PoolKind::Small
            } else {
                PoolKind::Large
            };
            if !wanted(p, info.stream) {
                continue;
            }
            let mut cursor = start;
            let first = occupied.partition_point(|(a, _)| *a < start);
            for &(addr, bsize) in occupied.get(first..).unwrap_or(&[]) {
                if addr >= info.end {
                    break;
                }
                gaps.add(addr.saturating_sub(cursor));
                cursor = cursor.max(addr.saturating_add(bsize));
            }
            gaps.add(info.end.saturating_sub(cursor));
        }
        (stats.reserved_bytes, stats.allocated_bytes, "trace")
    };

    let unallocated = reserved.saturating_sub(allocated);
    let blocked = requested.map(|r| gaps.largest < r && gaps.total >= r);
    let place = match (pool, stream) {
        (Some(PoolKind::Large), Some(st)) => format!(" of the large pool on stream {st}"),
        (Some(PoolKind::Small), Some(st)) => format!(" of the small pool on stream {st}"),
        _ => String::new(),
    };
    let blocks = match gaps.count {
        0 => format!("no free block{place}"),
        1 => format!("1 free block{place} of {}", Bytes(gaps.total)),
        n => format!(
            "{n} free blocks{place} hold {}, the largest {}",
            Bytes(gaps.total),
            Bytes(gaps.largest)
        ),
    };
    let mut summary = format!(
        "{} reserved, {} allocated: {} reserved but unallocated; {blocks}",
        Bytes(reserved),
        Bytes(allocated),
        Bytes(unallocated),
    );
    if let Some(r) = requested {
        let verdict = if gaps.largest >= r {
            format!(
                "; a free block could hold the request of {} (the allocator's rules, e.g. max_split_size, kept it from being used)",
                Bytes(r)
            )
        } else if gaps.total >= r {
            format!(
                "; together they would hold the request of {}, but no single block does: fragmentation stopped it",
                Bytes(r)
            )
        } else {
            format!(
                "; {} the request of {}, so a new segment was needed and the device or the memory limit refused it. Reserved + request was {}; a perfectly packed cache (allocated + request) would have needed {}",
                match gaps.count {
                    0 => "nothing free to serve",
                    1 => "it is smaller than",
                    _ => "together they hold less than",
                },
                Bytes(r),
                Bytes(reserved.saturating_add(r)),
                Bytes(allocated.saturating_add(r))
            )
        };
        summary.push_str(&verdict);
    }
    FragmentationAt {
        event_index,
        source,
        reserved_bytes: reserved,
        allocated_bytes: allocated,
        unallocated_bytes: unallocated,
        free_bytes: gaps.total,
        free_blocks: gaps.count,
        largest_free_block_bytes: gaps.largest,
        pool,
        stream,
        requested_bytes: requested,
        blocked_by_fragmentation: blocked,
        summary,
    }
}
