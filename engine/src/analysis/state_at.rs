//! The caching allocator's state at the OOM, for a chart of segments and their blocks: what was
//! allocated, what was free, and why no free block could serve the request.
//!
//! [`state_at_oom`] replays the trace of the OOM's device ([`crate::replay`], recorded settings,
//! under the same inferred limit as [`super::exact`]) up to the `oom` entry that
//! [`super::Analysis::oom`] reports, and reads the allocator's own segments
//! ([`crate::allocator::CachingAllocator::snapshot`]) when its malloc has failed: after the
//! release of cached segments that PyTorch makes before it raises, so these are the segments
//! the OOM message counts ("reserved by PyTorch but unallocated") and a dump at the OOM lists.
//! Each free block says whether it could have served the request, and if not, why (PyTorch's
//! `get_free_block` rules: pool, stream, size, `max_split_size`); [`OomState::why`] sums it up in
//! one line.

use serde::{Deserialize, Serialize};

use super::exact::{entries_of, inferred_limit};
use crate::allocator::{AllocatorConfig, SegmentInfo, alloc_size, is_small, round_size};
use crate::replay::{ReplayOptions, replay};
use crate::snapshot::{Action, BlockState, PoolKind, Snapshot};
use crate::units::Bytes;

/// The allocator's state when an allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomState {
    /// CUDA device ordinal.
    pub device: u32,
    /// Index of the `oom` entry in the device's trace.
    pub event_index: usize,
    /// `time_us` of that entry.
    pub time_us: Option<i64>,
    /// The request that failed.
    pub request: OomRequest,
    /// The per-process limit the replay ran under: the highest reserved level the trace reached
    /// (a snapshot does not record the real limit, which was at least that; see
    /// [`super::exact`]). `None` when the trace has no `oom` entry.
    pub limit_bytes: Option<u64>,
    /// Free device memory PyTorch saw (the entry's `device_free`).
    pub device_free_bytes: u64,
    /// Σ allocated block sizes.
    pub allocated_bytes: u64,
    /// Σ segment sizes.
    pub reserved_bytes: u64,
    /// Segments in address order (an expandable segment: one per mapped range).
    pub segments: Vec<StateSegment>,
    /// Why no cached block could serve the request, in one line.
    pub why: String,
    /// The replay reproduced the recording up to this entry (a complete trace, every segment
    /// event as recorded), so this is the state PyTorch had.
    pub exact: bool,
    /// What to know about how it was obtained.
    pub notes: Vec<String>,
}

/// The allocation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomRequest {
    /// Bytes requested. The `oom` entry records the request rounded by `round_size`, so this is
    /// that rounded size.
    pub size: u64,
    /// `round_size(size)`: the block size looked for.
    pub rounded_size: u64,
    /// The segment it would have taken when no cached block fits (`get_allocation_size`).
    pub alloc_size: u64,
    /// Stream.
    pub stream: u64,
    /// The pool it needed.
    pub pool: PoolKind,
}

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSegment {
    /// Base address.
    pub address: u64,
    /// Bytes.
    pub total_size: u64,
    /// Stream.
    pub stream: u64,
    /// Pool.
    pub pool: PoolKind,
    /// Part of an expandable segment.
    pub expandable: bool,
    /// Blocks in address order; their sizes sum to `total_size`.
    pub blocks: Vec<StateBlock>,
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateBlock {
    /// Offset from the segment's base.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Allocated, pending free (freed, waiting for another stream's work) or free.
    pub state: BlockState,
    /// Handed out to a tensor (`state` is `active_allocated`).
    pub allocated: bool,
    /// The caller's unrounded size, for allocated and pending blocks.
    pub requested_size: Option<u64>,
    /// For free blocks: whether it could have served the request, or why not.
    pub fit: Option<FreeBlockFit>,
}

/// Whether a free block could have served the request (PyTorch's `get_free_block`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeBlockFit {
    /// It could have (the replay then differs from the recording: see the notes).
    Fits,
    /// Smaller than the rounded request.
    TooSmall,
    /// In the other pool (small blocks ≤ 1 MiB, large blocks above).
    OtherPool,
    /// Cached for another stream.
    OtherStream,
    /// An oversize block (≥ `max_split_size`) that the request may not take: it is below
    /// `max_split_size`, or the block exceeds it by `max_non_split_rounding` or more.
    Oversize,
}

/// The allocator's state at the OOM [`super::Analysis::oom`] reports (the OOM the program did not
/// survive), from a replay with the recorded settings. `None` when the snapshot has no `oom`
/// entry, or the replay cannot run (`cudaMallocAsync`, a mid-run trace with expandable segments)
/// or stops before that entry (it ran out of memory earlier than the recording).
pub fn state_at_oom(snapshot: &Snapshot) -> Option<OomState> {
    let (device, index) = reported_oom(snapshot)?;
    state_at_oom_entry(snapshot, device, index)
}

/// The OOM [`super::Analysis::oom`] names: devices in ascending order, the first `oom` entry no
/// `alloc` of its device follows, else the first `oom` entry.
fn reported_oom(snapshot: &Snapshot) -> Option<(u32, usize)> {
    let mut devices: Vec<u32> = snapshot.traces.iter().map(|t| t.device).collect();
    devices.sort_unstable();
    devices.dedup();
    let mut first = None;
    for d in devices {
        let entries = entries_of(snapshot, d);
        let last_alloc = entries.iter().rposition(|e| e.action == Action::Alloc);
        for (i, e) in entries.iter().enumerate() {
            if e.action != Action::Oom {
                continue;
            }
            if last_alloc.is_none_or(|a| a < i) {
                return Some((d, i));
            }
            first = first.or(Some((d, i)));
        }
    }
    first
}

/// The state after the failed malloc of `device`'s `oom` entry `index`.
fn state_at_oom_entry(snapshot: &Snapshot, device: u32, index: usize) -> Option<OomState> {
    let entries = entries_of(snapshot, device);
    let entry = entries.get(index).filter(|e| e.action == Action::Oom)?;
    let options = ReplayOptions {
        device,
        capacity: inferred_limit(entries),
        record_events: false,
        record_timeline: false,
        stop_after: Some(index),
        ..ReplayOptions::default()
    };
    let r = replay(snapshot, &options).ok()?;
    if r.entries_replayed <= index {
        return None;
    }
    let mut notes = Vec::new();
    let mut exact = true;
    if r.initial.starts_mid_run {
        exact = false;
        notes.push("the trace starts mid-run: the replay started from a state rebuilt from the dump, with estimated sizes".to_string());
    }
    if let Some(d) = r
        .first_divergence
        .as_ref()
        .filter(|d| d.event_index <= index)
    {
        exact = false;
        notes.push(format!(
            "the replay differs from the recording from entry {}: {}",
            d.event_index, d.what
        ));
    }
    let request = request_of(&r.config, entry.size, entry.stream);
    let segments: Vec<StateSegment> = r
        .final_segments
        .iter()
        .map(|s| segment_of(s, &request, &r.config))
        .collect();
    let allocated_bytes = segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.allocated)
        .map(|b| b.size)
        .sum();
    let reserved_bytes = segments.iter().map(|s| s.total_size).sum();
    let device_free = entry.device_free().unwrap_or(0);
    let why = why(&segments, &request, reserved_bytes, r.capacity, device_free);
    if segments
        .iter()
        .flat_map(|s| &s.blocks)
        .any(|b| b.fit == Some(FreeBlockFit::Fits))
    {
        exact = false;
        notes.push("a free block could have served the request: the replay's state is not the one that failed".to_string());
    }
    Some(OomState {
        device,
        event_index: index,
        time_us: entry.time_us,
        request,
        limit_bytes: r.capacity,
        device_free_bytes: device_free,
        allocated_bytes,
        reserved_bytes,
        segments,
        why,
        exact,
        notes,
    })
}

fn request_of(config: &AllocatorConfig, size: u64, stream: u64) -> OomRequest {
    let rounded = round_size(size, &config.roundup_power2_divisions);
    OomRequest {
        size,
        rounded_size: rounded,
        alloc_size: alloc_size(rounded, config.large_segment_size),
        stream,
        pool: if is_small(rounded) {
            PoolKind::Small
        } else {
            PoolKind::Large
        },
    }
}

fn segment_of(s: &SegmentInfo, request: &OomRequest, config: &AllocatorConfig) -> StateSegment {
    let blocks = s
        .blocks
        .iter()
        .map(|b| {
            let allocated = b.state == BlockState::ActiveAllocated;
            let free = b.state == BlockState::Inactive;
            StateBlock {
                offset: b.address.saturating_sub(s.address),
                size: b.size,
                state: b.state,
                allocated,
                requested_size: (!free).then_some(b.requested_size),
                fit: free.then(|| fit(b.size, s.segment_type, s.stream, request, config)),
            }
        })
        .collect();
    StateSegment {
        address: s.address,
        total_size: s.total_size,
        stream: s.stream,
        pool: s.segment_type,
        expandable: s.is_expandable,
        blocks,
    }
}

/// PyTorch's `get_free_block` conditions for one free block (spec C.6), in the order a reader
/// would check them.
fn fit(
    size: u64,
    pool: PoolKind,
    stream: u64,
    request: &OomRequest,
    config: &AllocatorConfig,
) -> FreeBlockFit {
    let max_split = config.max_split_size.unwrap_or(u64::MAX);
    let want = request.rounded_size;
    if pool != request.pool {
        FreeBlockFit::OtherPool
    } else if size < want {
        FreeBlockFit::TooSmall
    } else if stream != request.stream {
        FreeBlockFit::OtherStream
    } else if (want < max_split && size >= max_split)
        || (want >= max_split && size >= want.saturating_add(config.max_non_split_rounding))
    {
        FreeBlockFit::Oversize
    } else {
        FreeBlockFit::Fits
    }
}

/// One line: why the cache could not serve the request, then why no new segment was possible.
fn why(
    segments: &[StateSegment],
    request: &OomRequest,
    reserved: u64,
    limit: Option<u64>,
    device_free: u64,
) -> String {
    let free: Vec<(FreeBlockFit, u64)> = segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter_map(|b| b.fit.map(|f| (f, b.size)))
        .collect();
    let want = Bytes(request.rounded_size);
    let pool = match request.pool {
        PoolKind::Small => "small",
        PoolKind::Large => "large",
    };
    let total: u64 = free.iter().map(|(_, s)| s).sum();
    let in_pool: Vec<u64> = free
        .iter()
        .filter(|(f, _)| *f != FreeBlockFit::OtherPool)
        .map(|(_, s)| *s)
        .collect();
    let count_of = |k: FreeBlockFit| free.iter().filter(|(f, _)| *f == k).count();
    let bytes_of =
        |k: FreeBlockFit| -> u64 { free.iter().filter(|(f, _)| *f == k).map(|(_, s)| s).sum() };
    let cache = if free.is_empty() {
        format!(
            "no free cached block: every block of the {} reserved is allocated or pending",
            Bytes(reserved)
        )
    } else if count_of(FreeBlockFit::Fits) > 0 {
        format!(
            "{} free blocks could serve the {want} request",
            count_of(FreeBlockFit::Fits)
        )
    } else if in_pool.is_empty() {
        format!(
            "no free block in the {pool} pool the {want} request needs; {} free in total, all in the other pool ({} blocks)",
            Bytes(total),
            free.len()
        )
    } else if count_of(FreeBlockFit::OtherStream) > 0 && count_of(FreeBlockFit::Oversize) == 0 {
        format!(
            "the free blocks large enough for the {want} request are cached for another stream ({} blocks, {}); {} free in total over {} blocks",
            count_of(FreeBlockFit::OtherStream),
            Bytes(bytes_of(FreeBlockFit::OtherStream)),
            Bytes(total),
            free.len()
        )
    } else if count_of(FreeBlockFit::Oversize) > 0 {
        format!(
            "the free blocks large enough for the {want} request are oversize blocks (max_split_size) it may not take ({} blocks, {}); {} free in total over {} blocks",
            count_of(FreeBlockFit::Oversize),
            Bytes(bytes_of(FreeBlockFit::Oversize)),
            Bytes(total),
            free.len()
        )
    } else {
        let largest = in_pool.iter().copied().max().unwrap_or(0);
        format!(
            "largest free block {} < {want} requested; {} free in total, fragmented over {} blocks",
            Bytes(largest),
            Bytes(total),
            free.len()
        )
    };
    let seg = Bytes(request.alloc_size);
    let after = Bytes(reserved.saturating_add(request.alloc_size));
    let new_segment = if request.alloc_size > device_free {
        format!(
            "and the device had only {} free for a new {seg} segment",
            Bytes(device_free)
        )
    } else {
        match limit {
            Some(l) if reserved.saturating_add(request.alloc_size) > l => format!(
                "and a new {seg} segment would have taken reserved memory to {after}, over a per-process limit (the device had {} free; the most this process reserved was {})",
                Bytes(device_free),
                Bytes(l)
            ),
            _ => format!("and no new {seg} segment could be obtained"),
        }
    };
    format!("{cache}; {new_segment}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(rounded: u64) -> OomRequest {
        OomRequest {
            size: rounded,
            rounded_size: rounded,
            alloc_size: rounded,
            stream: 0,
            pool: if is_small(rounded) {
                PoolKind::Small
            } else {
                PoolKind::Large
            },
        }
    }

    #[test]
    fn fit_follows_get_free_block() {
        let c = AllocatorConfig::default();
        let r = request(100 << 20);
        assert_eq!(
            fit(50 << 20, PoolKind::Large, 0, &r, &c),
            FreeBlockFit::TooSmall
        );
        assert_eq!(
            fit(200 << 20, PoolKind::Large, 7, &r, &c),
            FreeBlockFit::OtherStream
        );
        assert_eq!(
            fit(200 << 20, PoolKind::Large, 0, &r, &c),
            FreeBlockFit::Fits
        );
        assert_eq!(
            fit(2 << 20, PoolKind::Small, 0, &r, &c),
            FreeBlockFit::OtherPool
        );
        let c = AllocatorConfig {
            max_split_size: Some(128 << 20),
            ..AllocatorConfig::default()
        };
        assert_eq!(
            fit(200 << 20, PoolKind::Large, 0, &r, &c),
            FreeBlockFit::Oversize
        );
    }
}
