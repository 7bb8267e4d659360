//! `engine::trace`: one device's trace walked from its true start. It owns two things:
//!
//! * [`initial_state`]: whether the trace starts from an empty allocator or mid-run (ring buffer
//!   wrapped, history enabled late), found by undoing the trace backwards from the dump's final
//!   `segments` (spec A.8), and which blocks and segments were already live before its first entry.
//! * [`Walker`]: an iterator over the entries that yields, after every entry, the allocator
//!   statistics the trace implies (`allocated`, `active`, `requested`, `reserved`, spec C.14) and
//!   what changed, tracking live blocks by address in an `FxHashMap` (no allocation per event).
//!
//! It reads a [`Snapshot`] only; it does not simulate the allocator's choices (which free block,
//! when to cudaMalloc): the trace already says where every block went. Analysis on top of it
//! (categories, sites, fragmentation) lives in `engine::analysis`.
//!
//! # How exact the figures are
//!
//! * `reserved_bytes` is exact: every cudaMalloc/cudaFree and map/unmap is in the trace with its
//!   size.
//! * `allocated_bytes` needs each block's size, and an `alloc` entry only carries the unrounded
//!   request. [`SizeModel::Rounded`] takes `round_size(request)` (spec C.2), which is low whenever
//!   the allocator handed out a whole unsplit block (a 19.5 MiB request served by a 20 MiB block).
//!   [`SizeModel::Inferred`] (the default) deduces the block from the addresses: a block is cut
//!   from the front of a free block, free blocks are always maximally merged, so the free block
//!   that served an `alloc` at address `a` runs from `a` to the next live or pending block (or the
//!   end of the segment / mapped range), and PyTorch's split rule (C.8) says whether the remainder
//!   was split off. For a trace that starts from an empty allocator this reproduces the real block
//!   sizes; on the corpus (all 47 snapshots and the two per-op allocator traces) peak allocated and
//!   every per-op value matched `torch.cuda.memory_stats` exactly. It is still a deduction, not the
//!   allocator replay: it trusts the split rule of the PyTorch version, ignores `no_split`
//!   MemPools, and inherits any error in the sizes of blocks that were live before the trace.
//! * For a trace that starts mid-run, blocks that were live at its start and freed during it are
//!   known only by their requested size: their size is `round_size(requested)`, widened to the
//!   free space after it where the split rule says the remainder would not have been split
//!   (spec A.8 point 2), and counted in [`InitialState::estimated_sizes`].

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::snapshot::{Action, BlockState, Snapshot, StackId, TraceEntry};
use crate::units::Bytes;

/// Every block size is a multiple of this (kMinBlockSize).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Rounded sizes up to this go to the small pool (kSmallSize).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Size of every small-pool segment (kSmallBuffer).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// How many notes of one kind are written out before the rest are only counted.
const MAX_NOTES_PER_KIND: u64 = 3;

// ------------------------------------------------------------------------------------------------
// Size rules
// ------------------------------------------------------------------------------------------------

/// The allocator settings that decide block sizes: `roundup_power2_divisions` (C.2),
/// `max_split_size` (C.8) and `expandable_segments` (C.13). `Default` is PyTorch's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SizeRules {
    /// 16 entries; index i covers [2^i MiB, 2^(i+1) MiB). All 0 = plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; 16],
    /// Blocks at least this large are never split; `None` = unlimited (the default).
    pub max_split_size: Option<u64>,
    /// `expandable_segments:True` was in force.
    pub expandable_segments: bool,
}

impl SizeRules {
    /// The rules of a snapshot's `allocator_settings`, PyTorch's defaults when it has none.
    pub fn from_snapshot(snapshot: &Snapshot) -> SizeRules {
        match &snapshot.allocator_settings {
            Some(s) => SizeRules {
                roundup_power2_divisions: s.roundup_power2_divisions,
                max_split_size: s.max_split_size,
                expandable_segments: s.expandable_segments,
            },
            None => SizeRules::default(),
        }
    }

    /// `round_size(n)` with these rules (spec C.2).
    pub fn round_size(&self, n: u64) -> u64 {
        round_size(n, &self.roundup_power2_divisions)
    }

    /// PyTorch's `should_split(block, size)` (spec C.8): whether a free block of `block` bytes
    /// serving a request rounded to `rounded` is split, leaving the remainder free.
    pub fn should_split(&self, block: u64, rounded: u64, expandable: bool) -> bool {
        let remaining = block.saturating_sub(rounded);
        if rounded <= SMALL_SIZE || expandable {
            remaining >= MIN_BLOCK_SIZE
        } else {
            self.max_split_size.is_none_or(|m| rounded < m) && remaining > SMALL_SIZE
        }
    }
}

/// PyTorch's `round_size(n)` (c10 CUDACachingAllocator.cpp, spec C.2): requests under 512 bytes
/// take 512; otherwise the next multiple of 512, or, where `roundup_power2_divisions` gives
/// `d > 1` divisions for the size's power-of-two interval and `n > 512·d`, the next of the `d`
/// equal steps between two powers of two.
pub fn round_size(n: u64, divisions: &[u64; 16]) -> u64 {
    if n < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let log = u64::from(63 - n.leading_zeros());
    let index = usize::try_from(log.saturating_sub(20).min(15)).unwrap_or(15);
    let d = divisions.get(index).copied().unwrap_or(0);
    if d > 1 && n > MIN_BLOCK_SIZE.saturating_mul(d) {
        return roundup_power2_next_division(n, d);
    }
    n.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
}

/// `roundup_power2_next_division(n, d)` (spec C.2).
fn roundup_power2_next_division(n: u64, d: u64) -> u64 {
    if n.is_power_of_two() {
        return n;
    }
    let floor = 1u64 << (63 - n.leading_zeros());
    let step = floor >> (63 - d.leading_zeros());
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let r = n & !(step - 1);
    if r == n { r } else { r.saturating_add(step) }
}

// ------------------------------------------------------------------------------------------------
// Reserved address ranges
// ------------------------------------------------------------------------------------------------

/// One reserved address range: a cudaMalloc'd segment or a mapped range of an expandable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeInfo {
    pub(crate) end: u64,
    pub(crate) expandable: bool,
    pub(crate) stream: u64,
}

/// Reserved address ranges by start address. Segment events are rare (hundreds per trace), so a
/// `BTreeMap` is cheap; it gives the "which segment holds this address" lookups.
#[derive(Debug, Clone, Default)]
pub(crate) struct RangeSet {
    map: BTreeMap<u64, RangeInfo>,
}

impl RangeSet {
    /// Adds `[addr, addr+size)`; whatever it overlapped is replaced. Returns the bytes that were
    /// already reserved there (0 when consistent).
    pub(crate) fn insert(&mut self, addr: u64, size: u64, expandable: bool, stream: u64) -> u64 {
        let end = addr.saturating_add(size);
        if end <= addr {
            // Empty (or cut to nothing at the top of the address space): every stored range has
            // `start < end`, which the lookups rely on.
            return 0;
        }
        let overlap = self.remove(addr, size);
        self.map.insert(
            addr,
            RangeInfo {
                end,
                expandable,
                stream,
            },
        );
        overlap
    }

    /// Removes `[addr, addr+size)`, splitting ranges it cuts. Returns the bytes actually removed.
    pub(crate) fn remove(&mut self, addr: u64, size: u64) -> u64 {
        let end = addr.saturating_add(size);
        if end <= addr {
            return 0;
        }
        let mut hits: Vec<(u64, RangeInfo)> = Vec::new();
        for (&start, info) in self.map.range(..end).rev() {
            if info.end <= addr {
                // Ranges never overlap each other, so nothing further left can reach `addr`.
                break;
            }
            hits.push((start, *info));
        }
        let mut removed = 0u64;
        for (start, info) in hits {
            self.map.remove(&start);
            let cut_from = start.max(addr);
            let cut_to = info.end.min(end);
            removed = removed.saturating_add(cut_to.saturating_sub(cut_from));
            if start < addr {
                self.map.insert(start, RangeInfo { end: addr, ..info });
            }
            if info.end > end {
                self.map.insert(end, info);
            }
        }
        removed
    }

    /// Bytes of `[addr, addr+size)` that are reserved.
    pub(crate) fn covered(&self, addr: u64, size: u64) -> u64 {
        let end = addr.saturating_add(size);
        let mut bytes = 0u64;
        for (&start, info) in self.map.range(..end).rev() {
            if info.end <= addr {
                break;
            }
            bytes = bytes.saturating_add(info.end.min(end).saturating_sub(start.max(addr)));
        }
        bytes
    }

    /// The contiguous region holding `addr`: its range, and for an expandable range every
    /// adjacent expandable range after it (one mapped stretch of one expandable segment).
    pub(crate) fn region_of(&self, addr: u64) -> Option<(u64, RangeInfo)> {
        let (&start, info) = self.map.range(..=addr).next_back()?;
        if addr >= info.end {
            return None;
        }
        let mut region = *info;
        if region.expandable {
            while let Some(next) = self.map.get(&region.end) {
                if !next.expandable || next.end <= region.end {
                    break;
                }
                region.end = next.end;
            }
        }
        Some((start, region))
    }

    /// Regions in address order, adjacent expandable ranges merged.
    pub(crate) fn regions(&self) -> Vec<(u64, RangeInfo)> {
        let mut out: Vec<(u64, RangeInfo)> = Vec::with_capacity(self.map.len());
        for (&start, info) in &self.map {
            if let Some((_, last)) = out.last_mut()
                && last.expandable
                && info.expandable
                && last.end == start
            {
                last.end = info.end;
                continue;
            }
            out.push((start, *info));
        }
        out
    }

    /// Ranges as stored, in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &RangeInfo)> {
        self.map.iter().map(|(&s, i)| (s, i))
    }

    /// Σ sizes.
    pub(crate) fn total(&self) -> u64 {
        self.map.iter().fold(0u64, |acc, (&s, i)| {
            acc.saturating_add(i.end.saturating_sub(s))
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

// ------------------------------------------------------------------------------------------------
// Notes with a cap per kind
// ------------------------------------------------------------------------------------------------

/// Notes about what was rebuilt or found inconsistent: the first few of each kind in full, the
/// rest counted.
#[derive(Debug, Default)]
struct NoteLog {
    notes: Vec<String>,
    counts: FxHashMap<&'static str, u64>,
}

impl NoteLog {
    fn add(&mut self, kind: &'static str, text: impl FnOnce() -> String) {
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        if *n <= MAX_NOTES_PER_KIND {
            self.notes.push(text());
        }
    }

    fn finish(mut self) -> Vec<String> {
        let mut extra: Vec<(&'static str, u64)> = self
            .counts
            .iter()
            .filter(|(_, n)| **n > MAX_NOTES_PER_KIND)
            .map(|(k, n)| (*k, *n))
            .collect();
        extra.sort_unstable();
        for (kind, n) in extra {
            self.notes.push(format!(
                "{} more of kind '{kind}' not listed ({n} in all)",
                n - MAX_NOTES_PER_KIND
            ));
        }
        self.notes
    }
}

// ------------------------------------------------------------------------------------------------
// Initial state
// ------------------------------------------------------------------------------------------------

/// A block that was live (allocated or pending free) before the trace's first entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InitialBlock {
    /// Start address.
    pub addr: u64,
    /// Block size: exact when the block is still in the dump's `segments`; otherwise an estimate
    /// (see `size_estimated`).
    pub size: u64,
    /// The size is an estimate: only the requested size was in the trace (a free entry).
    pub size_estimated: bool,
    /// The caller's unrounded size.
    pub requested: u64,
    /// Stream.
    pub stream: u64,
    /// Allocation stack if known (from `segments`), else the stack of the free entry, if any.
    pub frames: StackId,
    /// Freed by the user but not yet returned to the pool (`active_pending_free`).
    pub pending_free: bool,
}

/// A reserved range (segment or mapped range) that existed before the trace's first entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InitialSegment {
    /// Start address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Part of an expandable segment.
    pub is_expandable: bool,
}

/// What was live on one device before the first entry of its trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InitialState {
    /// CUDA device ordinal.
    pub device: u32,
    /// Something was live before the first entry: the ring buffer wrapped, or history was
    /// enabled after the allocator was first used.
    pub starts_mid_run: bool,
    /// Blocks live at the start, in address order.
    pub blocks: Vec<InitialBlock>,
    /// Reserved ranges at the start, in address order.
    pub segments: Vec<InitialSegment>,
    /// Σ size of the allocated (not pending) blocks.
    pub allocated_bytes: u64,
    /// Σ size of all live blocks (allocated or pending).
    pub active_bytes: u64,
    /// Σ requested size of all live blocks.
    pub requested_bytes: u64,
    /// Σ segment sizes.
    pub reserved_bytes: u64,
    /// How many block sizes are estimates.
    pub estimated_sizes: usize,
    /// What was rebuilt and what is uncertain or inconsistent, in words.
    pub notes: Vec<String>,
}

/// A block during the backward walk.
#[derive(Debug, Clone, Copy)]
struct RevBlock {
    size: Option<u64>,
    requested: u64,
    stream: u64,
    frames: StackId,
    pending: bool,
}

/// Rebuilds the state before the first entry of `device`'s trace by undoing the trace backwards
/// from that device's final `segments` (spec A.8): walking backward, `alloc` ⇒ the block did not
/// exist before; `free_completed` ⇒ it was allocated and pending before; `free_requested` ⇒ it was
/// allocated before; `segment_alloc`/`segment_map` ⇒ the range did not exist before;
/// `segment_free`/`segment_unmap` ⇒ it existed. Inconsistencies never panic: they become notes.
pub fn initial_state(snapshot: &Snapshot, device: u32) -> InitialState {
    let rules = SizeRules::from_snapshot(snapshot);
    let entries: &[TraceEntry] = snapshot
        .traces
        .iter()
        .find(|t| t.device == device)
        .map_or(&[], |t| t.entries.as_slice());
    let mut notes = NoteLog::default();

    let mut blocks: FxHashMap<u64, RevBlock> = FxHashMap::default();
    let mut ranges = RangeSet::default();
    for seg in snapshot.segments.iter().filter(|s| s.device == device) {
        ranges.insert(seg.address, seg.total_size, seg.is_expandable, seg.stream);
        for b in &seg.blocks {
            let pending = match b.state {
                BlockState::ActiveAllocated => false,
                BlockState::ActivePendingFree => true,
                BlockState::Inactive => continue,
            };
            blocks.insert(
                b.address,
                RevBlock {
                    size: Some(b.size),
                    requested: b.requested_size,
                    stream: seg.stream,
                    frames: b.frames,
                    pending,
                },
            );
        }
    }

    for (i, e) in entries.iter().enumerate().rev() {
        match e.action {
            Action::Alloc => match blocks.remove(&e.addr) {
                Some(b) if b.pending => notes.add("alloc-of-pending", || {
                    format!(
                        "entry {i}: alloc at 0x{:x}, but that block is pending free right after it",
                        e.addr
                    )
                }),
                Some(_) => {}
                None => notes.add("alloc-unknown", || {
                    format!(
                        "entry {i}: alloc at 0x{:x} of a block that is not live after it (its free is missing)",
                        e.addr
                    )
                }),
            },
            Action::FreeRequested => match blocks.get_mut(&e.addr) {
                Some(b) if b.pending => b.pending = false,
                Some(_) => notes.add("free-of-allocated", || {
                    format!(
                        "entry {i}: free_requested at 0x{:x}, but the block is still allocated after it",
                        e.addr
                    )
                }),
                None => {
                    notes.add("free-without-completion", || {
                        format!(
                            "entry {i}: free_requested at 0x{:x} with neither a free_completed after it nor a pending block in the dump",
                            e.addr
                        )
                    });
                    blocks.insert(e.addr, rev_from_entry(e, false));
                }
            },
            Action::FreeCompleted => match blocks.entry(e.addr) {
                Entry::Occupied(_) => notes.add("completed-but-live", || {
                    format!(
                        "entry {i}: free_completed at 0x{:x}, but a block is live there right after it",
                        e.addr
                    )
                }),
                Entry::Vacant(v) => {
                    v.insert(rev_from_entry(e, true));
                }
            },
            Action::SegmentAlloc | Action::SegmentMap => {
                let removed = ranges.remove(e.addr, e.size);
                if removed != e.size {
                    notes.add("segment-unknown", || {
                        format!(
                            "entry {i}: {} at 0x{:x} of {}, but only {} of it is reserved after it",
                            e.action.as_str(),
                            e.addr,
                            Bytes(e.size),
                            Bytes(removed)
                        )
                    });
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let overlap = ranges.insert(
                    e.addr,
                    e.size,
                    e.action == Action::SegmentUnmap,
                    e.stream,
                );
                if overlap != 0 {
                    notes.add("segment-overlap", || {
                        format!(
                            "entry {i}: {} at 0x{:x}, but {} of that range is still reserved after it",
                            e.action.as_str(),
                            e.addr,
                            Bytes(overlap)
                        )
                    });
                }
            }
            Action::Snapshot | Action::Oom | Action::UserDefined | Action::Unknown => {}
        }
    }

    // Blocks, in address order, with sizes estimated where unknown.
    let mut list: Vec<(u64, RevBlock)> = blocks.into_iter().collect();
    list.sort_unstable_by_key(|(a, _)| *a);
    let mut out_blocks = Vec::with_capacity(list.len());
    let mut estimated = 0usize;
    for k in 0..list.len() {
        let (addr, b) = list[k];
        let (size, est) = match b.size {
            Some(s) => (s, false),
            None => {
                estimated += 1;
                let rounded = rules.round_size(b.requested);
                // Widen to the free space after it where the split rule would not have split
                // (spec A.8 point 2).
                let next = list.get(k + 1).map(|(a, _)| *a);
                let size = match ranges.region_of(addr) {
                    Some((_, region)) => {
                        let limit = next.map_or(region.end, |n| n.min(region.end));
                        let space = limit.saturating_sub(addr);
                        if space > rounded && !rules.should_split(space, rounded, region.expandable)
                        {
                            space
                        } else {
                            rounded
                        }
                    }
                    None => rounded,
                };
                (size, true)
            }
        };
        out_blocks.push(InitialBlock {
            addr,
            size,
            size_estimated: est,
            requested: b.requested,
            stream: b.stream,
            frames: b.frames,
            pending_free: b.pending,
        });
    }
    let segments: Vec<InitialSegment> = ranges
        .iter()
        .map(|(addr, info)| InitialSegment {
            addr,
            size: info.end.saturating_sub(addr),
            is_expandable: info.expandable,
        })
        .collect();

    let mut state = InitialState {
        device,
        starts_mid_run: !out_blocks.is_empty() || !ranges.is_empty(),
        reserved_bytes: ranges.total(),
        estimated_sizes: estimated,
        ..InitialState::default()
    };
    for b in &out_blocks {
        if !b.pending_free {
            state.allocated_bytes = state.allocated_bytes.saturating_add(b.size);
        }
        state.active_bytes = state.active_bytes.saturating_add(b.size);
        state.requested_bytes = state.requested_bytes.saturating_add(b.requested);
    }
    let mut head = Vec::new();
    if state.starts_mid_run {
        let why = if entries.is_empty() {
            "the trace is empty (history off or cleared), so everything in the dump predates it"
        } else {
            "the ring buffer wrapped or history was enabled after the allocator was first used"
        };
        head.push(format!(
            "trace starts mid-run: {} blocks ({} allocated, {} pending free) and {} reserved ranges ({}) were live before its first entry; {why}",
            out_blocks.len(),
            Bytes(state.allocated_bytes),
            Bytes(state.active_bytes.saturating_sub(state.allocated_bytes)),
            segments.len(),
            Bytes(state.reserved_bytes)
        ));
        if estimated > 0 {
            head.push(format!(
                "{estimated} of those block sizes are estimates: the blocks were freed during the trace and only their requested size is known (round_size, widened to the following free space where the split rule would not have split); allocated figures can be off by the difference"
            ));
        }
        let unknown_frames = out_blocks
            .iter()
            .filter(|b| b.frames == StackId::EMPTY)
            .count();
        if unknown_frames > 0 {
            head.push(format!(
                "{unknown_frames} blocks live at the start have no allocation stack (allocated before recording or frames not recorded)"
            ));
        }
    }
    head.extend(notes.finish());
    state.notes = head;
    state.blocks = out_blocks;
    state.segments = segments;
    state
}

fn rev_from_entry(e: &TraceEntry, pending: bool) -> RevBlock {
    RevBlock {
        size: None,
        requested: e.size,
        stream: e.stream,
        frames: e.frames,
        pending,
    }
}

// ------------------------------------------------------------------------------------------------
// Forward walk
// ------------------------------------------------------------------------------------------------

/// How the walker sizes the block of an `alloc` entry (which carries only the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeModel {
    /// `round_size(request)` (spec C.2): low where the allocator handed out a whole unsplit block.
    Rounded,
    /// The free block at the address, less what the split rule (C.8) splits off: the real block
    /// size when the layout before it is known (see the module docs).
    #[default]
    Inferred,
}

/// Allocator statistics after an entry (spec C.14), as the trace gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MemoryStats {
    /// Σ size of allocated blocks (`allocated_bytes.all.current`).
    pub allocated_bytes: u64,
    /// Σ size of allocated and pending-free blocks (`active_bytes`).
    pub active_bytes: u64,
    /// Σ requested size of active blocks (`requested_bytes`).
    pub requested_bytes: u64,
    /// Σ segment / mapped sizes (`reserved_bytes`): exact.
    pub reserved_bytes: u64,
    /// Number of allocated blocks (`allocation.all.current`).
    pub allocations: u64,
}

/// A live block as the walker tracks it. `Copy` and small: handed out by value in [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LiveBlock {
    /// Sequential id: initial blocks are `0..n` in [`InitialState::blocks`] order, then one per
    /// `alloc` entry in trace order.
    pub id: u32,
    /// Start address.
    pub addr: u64,
    /// Block size (see [`SizeModel`]).
    pub size: u64,
    /// The size is an estimate (an initial block known only by its request, or an `alloc` the
    /// inference could not place).
    pub size_estimated: bool,
    /// The caller's unrounded size.
    pub requested: u64,
    /// Stream.
    pub stream: u64,
    /// Allocation stack (for initial blocks: what the dump or the free entry gave).
    pub frames: StackId,
    /// Index of the `alloc` entry; `None` for blocks live before the trace.
    pub alloc_index: Option<u32>,
    /// Freed by the user, not yet returned to the pool.
    pub pending_free: bool,
}

/// What one entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing the walker tracks (`snapshot`, `user_defined`, unknown actions).
    None,
    /// A block was handed out.
    Alloc {
        /// The new block.
        block: LiveBlock,
        /// Id of a block the trace still had live at that address (an inconsistency), now
        /// dropped.
        replaced: Option<u32>,
    },
    /// A block was freed by the user (`allocated` falls); it may stay pending.
    FreeRequested {
        /// The block, now pending.
        block: LiveBlock,
    },
    /// A block went back to the pool (`active` falls).
    FreeCompleted {
        /// The block, no longer live.
        block: LiveBlock,
        /// It had no `free_requested` first, so `allocated` fell here too.
        was_allocated: bool,
    },
    /// A segment was cudaMalloc'd or a range mapped.
    SegmentAdded {
        /// Start address.
        addr: u64,
        /// Bytes.
        size: u64,
        /// `segment_map` (expandable).
        expandable: bool,
        /// Stream.
        stream: u64,
    },
    /// A segment was freed or a range unmapped.
    SegmentRemoved {
        /// Start address.
        addr: u64,
        /// Bytes the trace knew as reserved there (less than the entry's size when inconsistent).
        size: u64,
    },
    /// The allocator raised OutOfMemoryError.
    Oom {
        /// The rounded request.
        requested: u64,
        /// Free device memory at that moment.
        device_free: u64,
    },
    /// The entry did not fit the state (a free of an unknown address, …); counted in
    /// [`Walker::anomalies`] and described in [`Walker::notes`].
    Inconsistent,
}

/// One step of the walk: the entry, the statistics after it, and what it changed.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// Index of the entry in the device's trace.
    pub index: usize,
    /// The entry.
    pub entry: &'a TraceEntry,
    /// Statistics after the entry.
    pub stats: MemoryStats,
    /// What it changed.
    pub change: Change,
}

/// Walks one device's trace from its initial state; an iterator of [`Step`]s.
///
/// ```
/// # use oomlens_engine::snapshot::Snapshot;
/// # use oomlens_engine::trace::Walker;
/// let snapshot = Snapshot::default();
/// let mut peak = 0;
/// for step in Walker::new(&snapshot, 0) {
///     peak = peak.max(step.stats.allocated_bytes);
/// }
/// assert_eq!(peak, 0);
/// ```
#[derive(Debug)]
pub struct Walker<'a> {
    entries: &'a [TraceEntry],
    next: usize,
    rules: SizeRules,
    model: SizeModel,
    live: FxHashMap<u64, LiveBlock>,
    /// Live and pending large-pool blocks (> 1 MiB) by address → size, for the layout inference
    /// (only large-pool blocks in non-expandable segments need it).
    occupied: BTreeMap<u64, u64>,
    ranges: RangeSet,
    stats: MemoryStats,
    initial_stats: MemoryStats,
    next_id: u32,
    anomalies: u64,
    estimated: u64,
    /// Some initial block sizes are estimates: check that a new block does not overlap the one
    /// before it.
    check_overlap: bool,
    notes: NoteLog,
}

impl<'a> Walker<'a> {
    /// A walker over `device`'s trace, starting from [`initial_state`], sizing blocks with
    /// [`SizeModel::Inferred`].
    pub fn new(snapshot: &'a Snapshot, device: u32) -> Walker<'a> {
        let initial = initial_state(snapshot, device);
        Walker::with_initial(snapshot, device, &initial, SizeModel::Inferred)
    }

    /// A walker from a given initial state and size model.
    pub fn with_initial(
        snapshot: &'a Snapshot,
        device: u32,
        initial: &InitialState,
        model: SizeModel,
    ) -> Walker<'a> {
        let entries: &[TraceEntry] = snapshot
            .traces
            .iter()
            .find(|t| t.device == device)
            .map_or(&[], |t| t.entries.as_slice());
        let mut live = FxHashMap::default();
        live.reserve(initial.blocks.len().max(1024));
        let mut occupied = BTreeMap::new();
        let mut stats = MemoryStats::default();
        let mut next_id = 0u32;
        for b in &initial.blocks {
            let block = LiveBlock {
                id: next_id,
                addr: b.addr,
                size: b.size,
                size_estimated: b.size_estimated,
                requested: b.requested,
                stream: b.stream,
                frames: b.frames,
                alloc_index: None,
                pending_free: b.pending_free,
            };
            next_id = next_id.saturating_add(1);
            live.insert(b.addr, block);
            if b.size > SMALL_SIZE {
                occupied.insert(b.addr, b.size);
            }
            if !b.pending_free {
                stats.allocated_bytes = stats.allocated_bytes.saturating_add(b.size);
                stats.allocations += 1;
            }
            stats.active_bytes = stats.active_bytes.saturating_add(b.size);
            stats.requested_bytes = stats.requested_bytes.saturating_add(b.requested);
        }
        let mut ranges = RangeSet::default();
        for s in &initial.segments {
            // The stream of a range that predates the trace is unknown unless the dump has it.
            let stream = snapshot
                .segments
                .iter()
                .find(|g| {
                    g.device == device
                        && g.address <= s.addr
                        && s.addr < g.address.saturating_add(g.total_size)
                })
                .map_or(0, |g| g.stream);
            ranges.insert(s.addr, s.size, s.is_expandable, stream);
        }
        stats.reserved_bytes = ranges.total();
        Walker {
            entries,
            next: 0,
            rules: SizeRules::from_snapshot(snapshot),
            model,
            live,
            occupied,
            ranges,
            stats,
            initial_stats: stats,
            next_id,
            anomalies: 0,
            estimated: 0,
            check_overlap: initial.estimated_sizes > 0,
            notes: NoteLog::default(),
        }
    }

    /// Statistics before the first entry.
    pub fn initial_stats(&self) -> MemoryStats {
        self.initial_stats
    }

    /// Statistics after the last entry walked so far.
    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Number of entries of the trace.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The trace has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The size rules in use.
    pub fn rules(&self) -> SizeRules {
        self.rules
    }

    /// Live blocks (allocated or pending) now, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = &LiveBlock> {
        self.live.values()
    }

    /// The reserved ranges now.
    pub(crate) fn ranges(&self) -> &RangeSet {
        &self.ranges
    }

    /// Entries that did not fit the state so far.
    pub fn anomalies(&self) -> u64 {
        self.anomalies
    }

    /// `alloc` entries whose block size fell back to `round_size` (no free block found there).
    pub fn estimated_allocs(&self) -> u64 {
        self.estimated
    }

    /// Notes about inconsistencies met so far (consumes the walker).
    pub fn notes(self) -> Vec<String> {
        let mut notes = self.notes.finish();
        if self.estimated > 0 && self.model == SizeModel::Inferred {
            notes.push(format!(
                "{} alloc entries could not be placed in a known free block; their size is round_size(request)",
                self.estimated
            ));
        }
        notes
    }

    /// Compares the state reached so far with the dump's `segments` of this device: meaningful
    /// once the whole trace was walked.
    pub fn final_check(&self, snapshot: &Snapshot, device: u32) -> FinalCheck {
        let mut check = FinalCheck {
            reserved_bytes_trace: self.stats.reserved_bytes,
            allocated_bytes_trace: self.stats.allocated_bytes,
            live_blocks_trace: self.live.len() as u64,
            ..FinalCheck::default()
        };
        let mut seen = 0u64;
        for seg in snapshot.segments.iter().filter(|s| s.device == device) {
            check.reserved_bytes_segments =
                check.reserved_bytes_segments.saturating_add(seg.total_size);
            check.uncovered_segment_bytes = check.uncovered_segment_bytes.saturating_add(
                seg.total_size
                    .saturating_sub(self.ranges.covered(seg.address, seg.total_size)),
            );
            for b in &seg.blocks {
                let pending = match b.state {
                    BlockState::ActiveAllocated => false,
                    BlockState::ActivePendingFree => true,
                    BlockState::Inactive => continue,
                };
                check.live_blocks_segments += 1;
                if !pending {
                    check.allocated_bytes_segments =
                        check.allocated_bytes_segments.saturating_add(b.size);
                }
                match self.live.get(&b.address) {
                    Some(l) => {
                        seen += 1;
                        if l.size != b.size {
                            check.size_mismatches += 1;
                        }
                        if l.pending_free != pending {
                            check.state_mismatches += 1;
                        }
                    }
                    None => check.missing_in_trace += 1,
                }
            }
        }
        check.extra_in_trace = (self.live.len() as u64).saturating_sub(seen);
        check.matches = check.reserved_bytes_trace == check.reserved_bytes_segments
            && check.uncovered_segment_bytes == 0
            && check.allocated_bytes_trace == check.allocated_bytes_segments
            && check.missing_in_trace == 0
            && check.extra_in_trace == 0
            && check.size_mismatches == 0
            && check.state_mismatches == 0;
        check
    }

    fn block_size(&self, addr: u64, rounded: u64) -> Option<u64> {
        // Small-pool blocks and blocks of expandable segments split whenever 512 bytes or more
        // remain, and sizes are multiples of 512: their block is always the rounded request.
        if self.model == SizeModel::Rounded || rounded <= SMALL_SIZE {
            return Some(rounded);
        }
        let (start, region) = self.ranges.region_of(addr)?;
        if region.expandable {
            return Some(rounded);
        }
        let next = self
            .occupied
            .range(addr.saturating_add(1)..)
            .next()
            .map_or(region.end, |(&a, _)| a.min(region.end));
        let free = next.saturating_sub(addr);
        if free < rounded {
            return None;
        }
        if self.check_overlap
            && let Some((&prev, &psize)) = self.occupied.range(..addr).next_back()
            && prev >= start
            && prev.saturating_add(psize) > addr
        {
            // The block before overlaps this one: its size was overestimated.
            return None;
        }
        if self.rules.should_split(free, rounded, region.expandable) {
            Some(rounded)
        } else {
            Some(free)
        }
    }

    fn apply(&mut self, i: usize, e: &TraceEntry) -> Change {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        match e.action {
            Action::Alloc => {
                let rounded = self.rules.round_size(e.size);
                let (size, estimated) = match self.block_size(e.addr, rounded) {
                    Some(s) => (s, false),
                    None => {
                        if self.model == SizeModel::Inferred {
                            self.estimated += 1;
                        }
                        (rounded, self.model == SizeModel::Inferred)
                    }
                };
                let block = LiveBlock {
                    id: self.next_id,
                    addr: e.addr,
                    size,
                    size_estimated: estimated,
                    requested: e.size,
                    stream: e.stream,
                    frames: e.frames,
                    alloc_index: Some(index),
                    pending_free: false,
                };
                self.next_id = self.next_id.saturating_add(1);
                let old = self.live.insert(e.addr, block);
                let replaced = old.map(|o| o.id);
                if let Some(old) = old {
                    self.anomalies += 1;
                    self.notes.add("alloc-over-live", || {
                        format!(
                            "entry {i}: alloc at 0x{:x}, where the trace still had a live block; the old block was dropped",
                            e.addr
                        )
                    });
                    self.drop_block(&old);
                }
                if self.model == SizeModel::Inferred && size > SMALL_SIZE {
                    self.occupied.insert(e.addr, size);
                }
                let s = &mut self.stats;
                s.allocated_bytes = s.allocated_bytes.saturating_add(size);
                s.active_bytes = s.active_bytes.saturating_add(size);
                s.requested_bytes = s.requested_bytes.saturating_add(e.size);
                s.allocations += 1;
                Change::Alloc { block, replaced }
            }
            Action::FreeRequested => match self.live.get_mut(&e.addr) {
                Some(b) if !b.pending_free => {
                    b.pending_free = true;
                    let block = *b;
                    let s = &mut self.stats;
                    s.allocated_bytes = s.allocated_bytes.saturating_sub(block.size);
                    s.allocations = s.allocations.saturating_sub(1);
                    Change::FreeRequested { block }
                }
                Some(_) => {
                    self.anomalies += 1;
                    self.notes.add("double-free", || {
                        format!(
                            "entry {i}: free_requested at 0x{:x} of a block already pending free",
                            e.addr
                        )
                    });
                    Change::Inconsistent
                }
                None => {
                    self.anomalies += 1;
                    self.notes.add("free-unknown", || {
                        format!(
                            "entry {i}: free_requested at 0x{:x}, an address with no live block",
                            e.addr
                        )
                    });
                    Change::Inconsistent
                }
            },
            Action::FreeCompleted => match self.live.remove(&e.addr) {
                Some(block) => {
                    let was_allocated = !block.pending_free;
                    self.drop_block(&block);
                    Change::FreeCompleted {
                        block,
                        was_allocated,
                    }
                }
                None => {
                    self.anomalies += 1;
                    self.notes.add("free-unknown", || {
                        format!(
                            "entry {i}: free_completed at 0x{:x}, an address with no live block",
                            e.addr
                        )
                    });
                    Change::Inconsistent
                }
            },
            Action::SegmentAlloc | Action::SegmentMap => {
                let expandable = e.action == Action::SegmentMap;
                let overlap = self.ranges.insert(e.addr, e.size, expandable, e.stream);
                let s = &mut self.stats;
                s.reserved_bytes = s
                    .reserved_bytes
                    .saturating_sub(overlap)
                    .saturating_add(e.size);
                if overlap != 0 {
                    self.anomalies += 1;
                    self.notes.add("segment-overlap", || {
                        format!(
                            "entry {i}: {} at 0x{:x} overlaps {} the trace already had reserved",
                            e.action.as_str(),
                            e.addr,
                            Bytes(overlap)
                        )
                    });
                }
                Change::SegmentAdded {
                    addr: e.addr,
                    size: e.size,
                    expandable,
                    stream: e.stream,
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let removed = self.ranges.remove(e.addr, e.size);
                self.stats.reserved_bytes = self.stats.reserved_bytes.saturating_sub(removed);
                if removed != e.size {
                    self.anomalies += 1;
                    self.notes.add("segment-unknown", || {
                        format!(
                            "entry {i}: {} at 0x{:x} of {}, but the trace knew only {} reserved there",
                            e.action.as_str(),
                            e.addr,
                            Bytes(e.size),
                            Bytes(removed)
                        )
                    });
                }
                Change::SegmentRemoved {
                    addr: e.addr,
                    size: removed,
                }
            }
            Action::Oom => Change::Oom {
                requested: e.size,
                device_free: e.device_free().unwrap_or(0),
            },
            Action::Snapshot => {
                // `size` = Σ active bytes at that moment (of the device, as far as known).
                let active = self.stats.active_bytes;
                if e.size != active {
                    self.notes.add("snapshot-checkpoint", || {
                        format!(
                            "entry {i}: a snapshot recorded {} active, the trace gives {}",
                            Bytes(e.size),
                            Bytes(active)
                        )
                    });
                }
                Change::None
            }
            Action::UserDefined | Action::Unknown => Change::None,
        }
    }

    /// Removes a block from the layout and the statistics.
    fn drop_block(&mut self, block: &LiveBlock) {
        if self.model == SizeModel::Inferred && block.size > SMALL_SIZE {
            self.occupied.remove(&block.addr);
        }
        let s = &mut self.stats;
        if !block.pending_free {
            s.allocated_bytes = s.allocated_bytes.saturating_sub(block.size);
            s.allocations = s.allocations.saturating_sub(1);
        }
        s.active_bytes = s.active_bytes.saturating_sub(block.size);
        s.requested_bytes = s.requested_bytes.saturating_sub(block.requested);
    }
}

impl<'a> Iterator for Walker<'a> {
    type Item = Step<'a>;

    fn next(&mut self) -> Option<Step<'a>> {
        let entries = self.entries;
        let i = self.next;
        let entry = entries.get(i)?;
        self.next += 1;
        let change = self.apply(i, entry);
        Some(Step {
            index: i,
            entry,
            stats: self.stats,
            change,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.entries.len().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Walker<'_> {}

/// The walker's state at the end of the trace against the dump's `segments`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FinalCheck {
    /// Everything below agrees.
    pub matches: bool,
    /// Reserved bytes the trace ends with.
    pub reserved_bytes_trace: u64,
    /// Σ `total_size` of the device's segments.
    pub reserved_bytes_segments: u64,
    /// Bytes of the dump's segments the trace does not have reserved (at other addresses).
    pub uncovered_segment_bytes: u64,
    /// Allocated bytes the trace ends with.
    pub allocated_bytes_trace: u64,
    /// Σ size of `active_allocated` blocks in the segments.
    pub allocated_bytes_segments: u64,
    /// Live blocks (allocated or pending) the trace ends with.
    pub live_blocks_trace: u64,
    /// Active blocks in the segments.
    pub live_blocks_segments: u64,
    /// Active blocks of the dump the trace does not have.
    pub missing_in_trace: u64,
    /// Blocks the trace has live that the dump does not.
    pub extra_in_trace: u64,
    /// Blocks at the same address with a different size.
    pub size_mismatches: u64,
    /// Blocks at the same address, allocated in one and pending in the other.
    pub state_mismatches: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn round_size_plain() {
        let d = [0u64; 16];
        assert_eq!(round_size(0, &d), 512);
        assert_eq!(round_size(1, &d), 512);
        assert_eq!(round_size(512, &d), 512);
        assert_eq!(round_size(513, &d), 1024);
        assert_eq!(round_size(17_270_622, &d), 17_270_784);
        // Saturates rather than overflows (PyTorch rejects such sizes long before).
        assert_eq!(round_size(u64::MAX, &d), u64::MAX);
    }

    #[test]
    fn round_size_power2_divisions() {
        let d = [4u64; 16];
        assert_eq!(round_size(1200, &d), 1536);
        assert_eq!(round_size(5 * MIB + 1, &d), 6 * MIB);
        assert_eq!(round_size(70 * MIB + 1, &d), 80 * MIB);
        assert_eq!(round_size(300 * MIB + 1, &d), 320 * MIB);
        assert_eq!(round_size(1100 * MIB, &d), 1280 * MIB);
        assert_eq!(round_size(64 * MIB, &d), 64 * MIB);
    }

    #[test]
    fn split_rule() {
        let r = SizeRules::default();
        // 11 MiB in a free 12 MiB block: remaining exactly 1 MiB, not split.
        assert!(!r.should_split(12 * MIB, 11 * MIB, false));
        assert!(r.should_split(12 * MIB, 10 * MIB, false));
        assert!(r.should_split(2 * MIB, 512, false));
        assert!(!r.should_split(1024, 512, false) || 1024 - 512 >= 512);
        let capped = SizeRules {
            max_split_size: Some(128 * MIB),
            ..SizeRules::default()
        };
        assert!(!capped.should_split(300 * MIB, 200 * MIB, false));
        assert!(capped.should_split(300 * MIB, 200 * MIB, true));
    }

    #[test]
    fn range_set_splits_and_merges() {
        let mut r = RangeSet::default();
        r.insert(100, 100, true, 0);
        r.insert(200, 100, true, 0);
        assert_eq!(r.total(), 200);
        assert_eq!(r.region_of(150).map(|(s, i)| (s, i.end)), Some((100, 300)));
        assert_eq!(r.remove(150, 100), 100);
        assert_eq!(r.total(), 100);
        assert_eq!(r.region_of(175), None);
        assert_eq!(r.regions().len(), 2);
        assert_eq!(r.remove(0, 1000), 100);
        assert!(r.is_empty());
    }
}
