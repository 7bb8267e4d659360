//! `engine::replay`: runs one device's trace from a [`Snapshot`](crate::snapshot::Snapshot) through the caching allocator
//! ([`crate::allocator`]) on a [`SimDevice`], with the recorded settings or others, and reports
//! what the allocator did: peaks, the OOM (where PyTorch raises, the replay stops), every event,
//! a timeline, the final segments, and — with the recorded settings — whether the simulated
//! trace is the recorded one.
//!
//! # How a trace becomes allocator calls (spec C.17)
//!
//! | trace entry | call |
//! |---|---|
//! | `alloc` | `malloc(size, stream)` |
//! | `free_requested` | `free(block)`; if its `free_completed` does not follow at once, the block had `record_stream` uses and stays pending |
//! | `free_completed` (not right after its `free_requested`) | the pending block's events completed: `complete_events` — unless the group of such entries runs into a release the next malloc makes (or its `oom`): then the malloc's own flush completed them, and they are left pending for the simulated flush, which needs them pending to fail its first search as PyTorch did |
//! | `segment_alloc`, `segment_map` | nothing: the next malloc makes them |
//! | `segment_free`, `segment_unmap` | either the next malloc releases them (its release paths), or the program called `empty_cache()` here: see below |
//! | `oom` | the malloc of the rounded size must fail; if allocations follow, the program caught it (cuDNN does) and the replay goes on |
//! | `snapshot` | checkpoint: simulated active bytes must equal its size |
//!
//! **`empty_cache()` or malloc?** A run of `segment_free`/`segment_unmap` entries that is not
//! followed by a new segment (`segment_alloc`/`segment_map`) or an `oom` can only be
//! `empty_cache()`. When it is, the replay asks the allocator whether the coming malloc would
//! have to release memory ([`CachingAllocator::would_release`]: no cached block fits, and the
//! limit, the device or garbage collection stands in the way); if not, the run is an
//! `empty_cache()`. With other settings than the recorded ones the allocator's state is not the
//! recorded one, so the recorded trace decides: a malloc released memory only if its new segment
//! would have taken reserved memory above the highest level the trace ever reached (the limit
//! can be no lower than that).
//!
//! **Addresses.** With `use_oracle`, the simulated device hands out the recorded segment
//! addresses while the simulation asks for the recorded sizes (see [`SimDevice`]); otherwise,
//! or after the first mismatch, synthetic ones. Recorded block addresses are mapped to the
//! simulated blocks, so frees find their block either way.
//!
//! **OOM index.** [`Replay::oom_event_index`] is the index, in the device's trace, of the entry
//! whose malloc failed: an `alloc` entry when the replay fails where the recording succeeded, or
//! the recorded `oom` entry when it fails where the recording failed too (and that OOM was not
//! caught: no `alloc` follows it).
//!
//! **Traces that start mid-run** (ring buffer wrapped, history enabled late): detected cheaply
//! from the trace's own segment entries and the dump's final segments; then the state before the
//! first entry is rebuilt ([`crate::trace::initial_state`]) and the allocator is seeded with it —
//! every non-expandable segment with its live and pending blocks, free space merged. Blocks known
//! only by their request have estimated sizes (counted in [`InitialHandling`]). A mid-run trace
//! whose initial state holds expandable segments is refused ([`ReplayError::MidRunExpandable`]):
//! their page mapping cannot be rebuilt from a trace.

mod compare;
mod device;
mod driver;
mod export;
mod prepass;
mod seed;

use serde::Serialize;

use crate::allocator::{
    AddressOrder, AllocatorConfig, OracleDivergence, OutOfMemory, SegmentInfo, Stats,
};
use crate::snapshot::Action;

pub use device::ReplayDevice;
pub use driver::{replay, replay_on};

#[cfg(doc)]
use crate::allocator::{CachingAllocator, SimDevice};

/// `totalGlobalMem` of the corpus card (an NVIDIA H200, 139.80 GiB), the default device size: it
/// sizes expandable segments' address ranges and is the base of a memory fraction. A snapshot
/// does not record it.
pub const DEFAULT_DEVICE_TOTAL: u64 = 150_109_880_320;

/// How to replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// CUDA device ordinal of the trace to replay.
    pub device: u32,
    /// Allocator settings; `None` = the ones the snapshot recorded (PyTorch's defaults if it
    /// recorded none).
    pub config: Option<AllocatorConfig>,
    /// Per-process limit in bytes, as `set_per_process_memory_fraction` enforces it (reserved +
    /// new segment > limit ⇒ treated as a cudaMalloc failure). `None`: the config's
    /// `per_process_memory_fraction`, if any, else no limit.
    pub capacity: Option<u64>,
    /// Physical memory the driver can give this process (`None`: unlimited).
    pub device_memory: Option<u64>,
    /// `totalGlobalMem` of the device (see [`DEFAULT_DEVICE_TOTAL`]).
    pub device_total: u64,
    /// Hand out the recorded segment addresses while the simulation matches the recording.
    pub use_oracle: bool,
    /// Direction of synthetic addresses.
    pub address_order: AddressOrder,
    /// Keep every emitted event in [`Replay::events`].
    pub record_events: bool,
    /// Keep the allocated/reserved timeline in [`Replay::timeline`].
    pub record_timeline: bool,
    /// Go on after the OOM the program did not survive (the recorded `oom` entry no `alloc`
    /// follows): its malloc fails as recorded, and what the program released before the dump
    /// (the frees after it) is replayed too. [`Replay::oom_event_index`] still names it. An
    /// unexpected OOM (at an `alloc` entry) always stops the replay.
    pub continue_after_oom: bool,
    /// Stop after this entry (`None`: at the end, or at the OOM): the allocator's state then is
    /// [`Replay::final_segments`].
    pub stop_after: Option<usize>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            device: 0,
            config: None,
            capacity: None,
            device_memory: None,
            device_total: DEFAULT_DEVICE_TOTAL,
            use_oracle: true,
            address_order: AddressOrder::default(),
            record_events: true,
            record_timeline: true,
            continue_after_oom: false,
            stop_after: None,
        }
    }
}

/// One event of the simulated trace, with the trace entry whose operation caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplayEvent {
    /// Index of the input trace entry being replayed when the allocator emitted it.
    pub at: u32,
    /// What happened.
    pub action: Action,
    /// Block or segment address (for `oom`: free device memory).
    pub addr: u64,
    /// Bytes (as in a trace entry).
    pub size: u64,
    /// Stream.
    pub stream: u64,
}

/// A value after an input trace entry: a point of [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// Index of the input trace entry.
    pub index: u32,
    /// The value after it.
    pub bytes: u64,
}

/// Allocated and reserved bytes through the replay, as change points: a point for every trace
/// entry after which the value differs from the previous point. Reserved memory changes rarely,
/// so it has a list of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// `allocated_bytes.all.current` after each entry that changed it.
    pub allocated: Vec<TimelinePoint>,
    /// `reserved_bytes.all.current` after each entry that changed it.
    pub reserved: Vec<TimelinePoint>,
}

impl Timeline {
    /// (allocated, reserved) after the trace entry `index` (0 before the first change).
    pub fn at(&self, index: usize) -> (u64, u64) {
        let get = |v: &[TimelinePoint]| {
            let k = v.partition_point(|p| p.index as usize <= index);
            k.checked_sub(1)
                .and_then(|k| v.get(k))
                .map_or(0, |p| p.bytes)
        };
        (get(&self.allocated), get(&self.reserved))
    }
}

/// What kind of difference from the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DivergenceKind {
    /// A simulated event differs from the recorded one at that position.
    Event,
    /// The simulation emitted an event the recording does not have.
    ExtraEvent,
    /// The recording has an event the simulation did not emit.
    MissingEvent,
    /// A block was handed out at another address than recorded.
    Address,
    /// The simulation ran out of memory where the recording did not.
    UnexpectedOom,
    /// The recording ran out of memory where the simulation did not.
    MissedOom,
    /// At a `snapshot` entry, simulated active bytes differ from the recorded ones.
    Checkpoint,
}

/// The first place the simulation differs from the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Index of the input trace entry (the recorded event expected there, or the entry being
    /// replayed).
    pub event_index: usize,
    /// What kind of difference.
    pub kind: DivergenceKind,
    /// The recorded event, if any.
    pub expected: Option<ReplayEvent>,
    /// The simulated event, if any.
    pub got: Option<ReplayEvent>,
    /// In words.
    pub what: String,
}

/// How the state before the first trace entry was handled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InitialHandling {
    /// The trace does not start from an empty allocator.
    pub starts_mid_run: bool,
    /// Segments put into the allocator before the replay.
    pub seeded_segments: usize,
    /// Live or pending blocks put into them.
    pub seeded_blocks: usize,
    /// Of those, how many have estimated sizes (known only by their request).
    pub estimated_sizes: usize,
    /// Reserved bytes at the start.
    pub reserved_bytes: u64,
    /// Allocated bytes at the start.
    pub allocated_bytes: u64,
}

/// How the address oracle fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OracleReport {
    /// The oracle was offered.
    pub used: bool,
    /// Segment addresses it answered.
    pub segments_answered: usize,
    /// Reservation bases it answered.
    pub reservations_answered: usize,
    /// The request it could not answer (synthetic addresses from there on).
    pub divergence: Option<OracleDivergence>,
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    /// CUDA device ordinal.
    pub device: u32,
    /// The settings in effect.
    pub config: AllocatorConfig,
    /// Those are the recorded settings (so the recording is a reference to compare with).
    pub recorded_settings: bool,
    /// The per-process limit in effect.
    pub capacity: Option<u64>,
    /// The replay ended in an OutOfMemoryError (and stopped there).
    pub oom: bool,
    /// Index of the trace entry whose malloc raised it (see the module docs).
    pub oom_event_index: Option<usize>,
    /// The numbers of that OOM.
    pub oom_detail: Option<OutOfMemory>,
    /// Recorded `oom` entries reproduced and then caught by the program (allocations follow).
    pub caught_ooms: usize,
    /// Highest `allocated_bytes`.
    pub peak_allocated_bytes: u64,
    /// Highest `reserved_bytes`.
    pub peak_reserved_bytes: u64,
    /// Trace entry at which allocated bytes first reached their peak.
    pub peak_allocated_event_index: Option<usize>,
    /// Trace entry at which reserved bytes first reached their peak.
    pub peak_reserved_event_index: Option<usize>,
    /// With the recorded settings: the simulated `segment_alloc`/`segment_free`/`segment_map`/
    /// `segment_unmap` events equal the recorded ones in action, size and order.
    pub segment_events_identical: Option<bool>,
    /// With the recorded settings: every simulated event equals the recorded one (action,
    /// address, size; for `oom` action and size).
    pub trace_identical: Option<bool>,
    /// With the recorded settings: the first difference.
    pub first_divergence: Option<Divergence>,
    /// Input trace entries processed (all, unless the replay stopped at an OOM).
    pub entries_replayed: usize,
    /// Input trace entries.
    pub entries_total: usize,
    /// `empty_cache()` calls found in the trace and replayed.
    pub empty_cache_calls: usize,
    /// Every event the allocator emitted (if `record_events`).
    pub events: Vec<ReplayEvent>,
    /// Allocated/reserved after every entry that changed them (if `record_timeline`).
    pub timeline: Timeline,
    /// Segments and blocks when the replay ended.
    pub final_segments: Vec<SegmentInfo>,
    /// The allocator's statistics when the replay ended (`memory_stats()`).
    pub stats: Stats,
    /// State before the first entry.
    pub initial: InitialHandling,
    /// The address oracle.
    pub address_oracle: OracleReport,
    /// Anything else worth knowing, in words (capped).
    pub notes: Vec<String>,
}

/// Why a replay could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The snapshot has no trace for that device.
    #[error("the snapshot has no trace for device {device} (devices: {available:?})")]
    NoSuchDevice {
        /// The device asked for.
        device: u32,
        /// Devices with a trace.
        available: Vec<u32>,
    },
    /// `backend:cudaMallocAsync` is another allocator entirely.
    #[error("backend:cudaMallocAsync is not the caching allocator; it cannot be replayed")]
    UnsupportedBackend,
    /// A mid-run trace whose initial state holds expandable segments.
    #[error(
        "device {device}: the trace starts mid-run with expandable segments already mapped; their page layout cannot be rebuilt (record history before the first allocation)"
    )]
    MidRunExpandable {
        /// The device.
        device: u32,
    },
    /// The rebuilt initial state does not fit together.
    #[error("device {device}: the state before the trace could not be rebuilt: {what}")]
    Seed {
        /// The device.
        device: u32,
        /// What did not fit.
        what: String,
    },
    /// The allocator or the simulated device reported an inconsistency (a bug).
    #[error("internal error at trace entry {index}: {what}")]
    Internal {
        /// Trace entry being replayed.
        index: usize,
        /// What went wrong.
        what: String,
    },
}
