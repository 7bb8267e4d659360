//! `engine::allocator`: PyTorch's CUDA caching allocator (the native backend of PyTorch 2.11,
//! `c10/cuda/CUDACachingAllocator.cpp`), re-implemented over a [`Device`] so that one
//! implementation drives both a simulation ([`SimDevice`]) and a real GPU (the runner's
//! `CudaDevice`). It owns the allocator's decisions and nothing else: no trace reading (that is
//! `engine::replay`), no IO.
//!
//! Every function keeps PyTorch's name and cites the section of
//! `reference/pytorch-allocator-spec.md` it implements, so a change in PyTorch maps to one place:
//!
//! | PyTorch | here | spec |
//! |---|---|---|
//! | `round_size`, `get_allocation_size` | [`round_size`], [`alloc_size`] | C.2, C.3 |
//! | `malloc` | [`CachingAllocator::malloc`] | C.4, C.15 |
//! | `get_free_block` | `find_free_block` (malloc.rs) | C.5 |
//! | `alloc_block` | `alloc_block` (malloc.rs) | C.6 |
//! | `should_split`, `alloc_found_block` | malloc.rs | C.8, C.14 |
//! | `free`, `free_block`, `try_merge_blocks` | [`CachingAllocator::free`], free.rs | C.9 |
//! | `release_available_cached_blocks`, `release_cached_blocks`, `release_block` | release.rs | C.10 |
//! | `garbage_collect_cached_blocks` | gc.rs | C.11 |
//! | `set_per_process_memory_fraction` | [`CachingAllocator::set_memory_limit`] | C.12 |
//! | `find_expandable_block`, `map_block`, `unmap_block`, … | expandable.rs | C.13 |
//! | `memory_stats` | [`Stats`] | C.14 |
//! | `snapshot` | [`CachingAllocator::snapshot`] | A.3 |
//!
//! What is not modelled: CUDA-graph private pools and `MemPool`s (C.16), the free-memory
//! callbacks of malloc step 3 (no effect on traces), event *timing* — a block freed with
//! `record_stream` uses stays pending until the caller says its events completed
//! ([`CachingAllocator::complete_events`]) or a full synchronization (`empty_cache`, the OOM
//! flush) completes them all, in the order the blocks were freed.
//!
//! # Invariants
//!
//! Checked by [`CachingAllocator::check_invariants`] (after every operation in the property
//! tests): the blocks of a segment tile it exactly and are linked in address order; no two
//! neighbouring blocks are both available (free, no pending events) and equally mapped — free
//! space is always merged; every available mapped block is in its pool's free set under its
//! `(stream, size, address)` key and nothing else is; every unmapped block is in its pool's
//! unmapped set; `reserved_bytes` equals the bytes obtained from the device; the allocated,
//! active and segment counters equal the sums over blocks.
//!
//! # Speed
//!
//! Blocks live in an arena (`Vec` + free list, indices as links); each pool keeps, per stream, a
//! sorted vector of its free blocks keyed by `(size, address)` (a pool holds at most a few
//! hundred free blocks), and a best fit that is split is re-keyed in place; events go to a sink chosen at compile time. In steady state a malloc or
//! free allocates nothing on the heap. The replay of the 961,801-entry corpus trace runs at
//! about 17 million entries per second on one core (`cargo bench -p oomlens-engine --bench
//! replay`).

mod block;
mod config;
mod device;
mod event;
mod expandable;
mod free;
mod gc;
mod invariants;
mod malloc;
mod pool;
mod release;
mod restore;
mod rounding;
mod sim_device;
mod state;
mod stats;

use serde::Serialize;

pub use block::BlockId;
pub use config::{AllocatorConfig, Backend, ConfError, ConfParser, allowed_from_fraction};
pub use device::Device;
pub use event::{Event, EventSink, FnSink, NoEvents};
pub use expandable::expandable_reservation_size;
pub use invariants::InvariantViolation;
pub use restore::RestoredBlock;
pub use rounding::{
    LARGE_BUFFER, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ONE_EXA_BYTE, ROUND_LARGE, SMALL_BUFFER,
    SMALL_SIZE, alloc_size, is_small, round_size,
};
pub use sim_device::{
    AddressOracle, AddressOrder, OracleDivergence, OracleMiss, SimDevice, SimDeviceError,
};
pub use state::{BlockInfo, SegmentInfo};
pub use stats::{Stat, StatArray, Stats};

use block::{Arena, NIL};
use expandable::ExpandableSegment;
use pool::BlockPool;

use crate::snapshot::Action;
use crate::units::Bytes;

/// A block handed out by [`CachingAllocator::malloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// Handle for [`CachingAllocator::free`].
    pub id: BlockId,
    /// Address.
    pub addr: u64,
    /// Block size (≥ the rounded request: a block that was not split is handed out whole).
    pub size: u64,
}

/// What PyTorch reports when it raises `torch.OutOfMemoryError` (spec C.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OutOfMemory {
    /// The caller's request.
    pub requested: u64,
    /// `round_size(requested)` (what the `oom` trace entry records).
    pub rounded: u64,
    /// The segment size that could not be obtained ("Tried to allocate").
    pub alloc_size: u64,
    /// Stream of the request.
    pub stream: u64,
    /// Free device memory (`cudaMemGetInfo`) after the allocator released what it could.
    pub device_free: u64,
    /// Device memory in all (`totalGlobalMem`).
    pub device_total: u64,
    /// The per-process limit, if one is set.
    pub allowed: Option<u64>,
    /// `allocated_bytes.all.current`.
    pub allocated: u64,
    /// `reserved_bytes.all.current`.
    pub reserved: u64,
}

impl OutOfMemory {
    /// PyTorch 2.11's message for this OOM on GPU `device`, without the per-process lines that
    /// come from NVML.
    pub fn message(&self, device: u32) -> String {
        let allowed = self
            .allowed
            .map(|a| format!("{} allowed; ", Bytes(a)))
            .unwrap_or_default();
        format!(
            "CUDA out of memory. Tried to allocate {}. GPU {device} has a total capacity of {} of which {} is free. {allowed}Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            Bytes(self.alloc_size),
            Bytes(self.device_total),
            Bytes(self.device_free),
            Bytes(self.allocated),
            Bytes(self.reserved.saturating_sub(self.allocated)),
        )
    }
}

/// Why an allocator operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError<E> {
    /// PyTorch would raise `torch.OutOfMemoryError` here (an `oom` event was emitted).
    #[error("CUDA out of memory: {} requested, {} segment could not be obtained", Bytes(.0.rounded), Bytes(.0.alloc_size))]
    OutOfMemory(OutOfMemory),
    /// `allocate()` refuses 1 EB or more before anything else ("Tried to allocate more than 1EB
    /// memory"); no event.
    #[error("CUDA out of memory. Tried to allocate more than 1EB memory.")]
    MoreThanOneExabyte,
    /// The device failed (not an out-of-memory answer).
    #[error("device error: {0}")]
    Device(E),
    /// A [`BlockId`] that names no live block (freed already, or never handed out).
    #[error("unknown or stale block id")]
    UnknownBlock,
    /// The operation does not apply to the block in its state (freeing a free block…).
    #[error("block is in the wrong state: {0}")]
    WrongState(&'static str),
    /// The allocator's own state is inconsistent (a bug, reported instead of panicking).
    #[error("allocator state is inconsistent: {0}")]
    Internal(&'static str),
}

/// A block as the caller may see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockView {
    /// Address.
    pub addr: u64,
    /// Size.
    pub size: u64,
    /// Unrounded size of its last allocation.
    pub requested: u64,
    /// Stream.
    pub stream: u64,
    /// Handed out and not freed.
    pub allocated: bool,
    /// Freed, waiting for recorded-stream events.
    pub pending_free: bool,
    /// In the small pool.
    pub small: bool,
    /// Part of an expandable segment.
    pub expandable: bool,
}

/// PyTorch's caching allocator for one device, over a [`Device`], emitting [`Event`]s to `S`.
///
/// ```
/// use oomlens_engine::allocator::{AllocatorConfig, CachingAllocator, Event, SimDevice};
/// let device = SimDevice::new(80 << 30, None);
/// let mut a = CachingAllocator::with_sink(AllocatorConfig::default(), device, Vec::<Event>::new());
/// let x = a.malloc(1000, 0).unwrap();        // 1024-byte block in a new 2 MiB segment
/// assert_eq!((x.size, a.reserved()), (1024, 2 << 20));
/// a.free(x.id).unwrap();
/// a.empty_cache().unwrap();
/// assert_eq!(a.reserved(), 0);
/// assert_eq!(a.sink().len(), 5); // segment_alloc alloc free_requested free_completed segment_free
/// ```
#[derive(Debug, Clone)]
pub struct CachingAllocator<D: Device, S: EventSink = NoEvents> {
    config: AllocatorConfig,
    /// `max_split_size` in bytes (`u64::MAX` = unlimited, as PyTorch's `SIZE_MAX`).
    max_split: u64,
    /// `allowed_memory_maximum` when a fraction is set (`set_fraction`).
    allowed: Option<u64>,
    device: D,
    sink: S,
    blocks: Arena,
    small: BlockPool,
    large: BlockPool,
    segments: Vec<Option<ExpandableSegment>>,
    /// Blocks with outstanding recorded-stream events, in the order they were freed.
    outstanding: Vec<u32>,
    /// `total_allocated_memory`: bytes obtained from the device (= reserved).
    total_allocated_memory: u64,
    stats: Stats,
    scratch: Vec<u32>,
}

impl<D: Device> CachingAllocator<D, NoEvents> {
    /// An allocator that emits no events.
    pub fn new(config: AllocatorConfig, device: D) -> Self {
        Self::with_sink(config, device, NoEvents)
    }
}

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// An allocator with `config`, over `device`, emitting to `sink`. A
    /// `per_process_memory_fraction` in the config sets the memory limit.
    pub fn with_sink(config: AllocatorConfig, device: D, sink: S) -> Self {
        let allowed = config.fraction_limit(device.total_memory());
        let max_split = config.max_split_size.unwrap_or(u64::MAX);
        CachingAllocator {
            config,
            max_split,
            allowed,
            device,
            sink,
            blocks: Arena::new(),
            small: BlockPool::new(),
            large: BlockPool::new(),
            segments: Vec::new(),
            outstanding: Vec::new(),
            total_allocated_memory: 0,
            stats: Stats::default(),
            scratch: Vec::with_capacity(256),
        }
    }

    /// `set_per_process_memory_fraction` in bytes: reserved memory may not exceed `limit`
    /// (`None` removes the limit). Garbage collection runs only while a limit is set.
    pub fn set_memory_limit(&mut self, limit: Option<u64>) {
        self.allowed = limit;
    }

    /// `set_per_process_memory_fraction(fraction)`: limit = ⌊fraction × total memory⌋; a
    /// fraction of 1 or more removes the limit (PyTorch 2.9+).
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        self.allowed = allowed_from_fraction(fraction, self.device.total_memory());
    }

    /// The per-process limit, if set.
    pub fn memory_limit(&self) -> Option<u64> {
        self.allowed
    }

    /// The settings.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The statistics (`torch.cuda.memory_stats()`).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Bytes obtained from the device (`memory_reserved()`).
    pub fn reserved(&self) -> u64 {
        self.total_allocated_memory
    }

    /// Bytes of allocated blocks (`memory_allocated()`).
    pub fn allocated(&self) -> u64 {
        u64::try_from(self.stats.allocated_bytes.all.current).unwrap_or(0)
    }

    /// Bytes of allocated and pending-free blocks.
    pub fn active(&self) -> u64 {
        u64::try_from(self.stats.active_bytes.all.current).unwrap_or(0)
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The event sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The event sink, mutably (to drain it).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Device and sink, the allocator dropped.
    pub fn into_parts(self) -> (D, S) {
        (self.device, self.sink)
    }

    /// A live block.
    pub fn block(&self, id: BlockId) -> Option<BlockView> {
        let b = self.blocks.get(self.blocks.resolve(id)?);
        Some(BlockView {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            stream: b.stream,
            allocated: b.allocated,
            pending_free: !b.allocated && (b.event_count > 0 || b.stream_uses > 0),
            small: b.small,
            expandable: b.is_expandable(),
        })
    }

    /// Number of blocks alive (allocated, pending, free or unmapped).
    pub fn block_count(&self) -> usize {
        self.blocks.live_count()
    }

    /// `malloc(size, stream)` (spec C.4): a block for `size` bytes on `stream`, or the
    /// out-of-memory PyTorch would raise. Emits, in PyTorch's order, whatever the request
    /// causes: `segment_free`/`segment_unmap` of released cache, `free_completed` of pending
    /// blocks a flush completed, `segment_alloc`/`segment_map`, then `alloc` — or `oom`.
    pub fn malloc(&mut self, size: u64, stream: u64) -> Result<Allocation, AllocError<D::Error>> {
        self.malloc_impl(size, stream)
    }

    /// `free(block)` (spec C.9): emits `free_requested`; without recorded-stream uses the block
    /// returns to its pool at once (`free_completed`, merged with free neighbours), otherwise it
    /// stays pending until [`CachingAllocator::complete_events`] or a full synchronization.
    pub fn free(&mut self, id: BlockId) -> Result<(), AllocError<D::Error>> {
        let slot = self.blocks.resolve(id).ok_or(AllocError::UnknownBlock)?;
        self.free_impl(slot)
    }

    /// `recordStream(block, stream)`: the block is used on `stream` too, so its memory is reused
    /// only after that stream's work recorded at free time completes. A use on the block's own
    /// stream is ignored. Call it once per distinct stream (PyTorch keeps a set).
    pub fn record_stream(&mut self, id: BlockId, stream: u64) -> Result<(), AllocError<D::Error>> {
        let slot = self.blocks.resolve(id).ok_or(AllocError::UnknownBlock)?;
        let b = self.blocks.get_mut(slot);
        if !b.allocated {
            return Err(AllocError::WrongState(
                "record_stream on a block that is not allocated",
            ));
        }
        if stream != b.stream {
            b.stream_uses += 1;
        }
        Ok(())
    }

    /// The recorded-stream events of a pending block have completed (what `process_events`
    /// finds at the start of a malloc): the block returns to its pool (`free_completed`).
    /// Returns false when the block was not pending (already completed by a flush).
    pub fn complete_events(&mut self, id: BlockId) -> Result<bool, AllocError<D::Error>> {
        let Some(slot) = self.blocks.resolve(id) else {
            return Ok(false);
        };
        let b = self.blocks.get(slot);
        if b.allocated || b.event_count == 0 {
            return Ok(false);
        }
        self.blocks.get_mut(slot).event_count = 0;
        if let Some(p) = self.outstanding.iter().position(|&s| s == slot) {
            self.outstanding.remove(p);
        }
        self.free_block(slot)?;
        Ok(true)
    }

    /// `torch.cuda.empty_cache()` = `release_cached_blocks` (spec C.10): completes every
    /// pending free, then returns every unsplit free segment and every fully free page of an
    /// expandable segment to the device.
    pub fn empty_cache(&mut self) -> Result<(), AllocError<D::Error>> {
        self.release_cached_blocks()
    }

    /// Whether `malloc(size, stream)` would have to go past its first `alloc_block` — release
    /// cached memory (garbage collection, `release_available_cached_blocks`, the full flush) or
    /// fail — given whether the device has room for a segment of a given size
    /// (`device_fits`). Changes nothing. Used to tell a `segment_free` caused by a malloc from
    /// one caused by `empty_cache()` when replaying a trace.
    pub fn would_release(&self, size: u64, stream: u64, device_fits: impl Fn(u64) -> bool) -> bool {
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        let small = is_small(rounded);
        if self.find_free_block(small, stream, rounded).is_some() {
            return false;
        }
        let asize = alloc_size(rounded, self.config.large_segment_size);
        if self.gc_enabled() && self.gc_would_release() {
            return true;
        }
        if let Some(allowed) = self.allowed
            && self.total_allocated_memory.saturating_add(asize) > allowed
        {
            return true;
        }
        !device_fits(asize)
    }

    /// Whether `malloc(size, stream)` would end up in its full flush (`release_cached_blocks`,
    /// malloc step 4e): no cached block fits, garbage collection would release nothing, the
    /// limit or the device (`device_fits`) refuses a new segment, and
    /// `release_available_cached_blocks` would not free enough. Changes nothing. Used to tell
    /// completions of pending frees that the flush made from those made before the malloc.
    pub fn would_flush(&self, size: u64, stream: u64, device_fits: impl Fn(u64) -> bool) -> bool {
        let rounded = round_size(size, &self.config.roundup_power2_divisions);
        let small = is_small(rounded);
        if self.find_free_block(small, stream, rounded).is_some() {
            return false;
        }
        if self.gc_enabled() && self.gc_would_release() {
            return false;
        }
        let asize = alloc_size(rounded, self.config.large_segment_size);
        let refused = self
            .allowed
            .is_some_and(|a| self.total_allocated_memory.saturating_add(asize) > a)
            || !device_fits(asize);
        refused && !self.release_available_would_succeed(small, stream, rounded)
    }

    #[inline]
    fn pool(&self, small: bool) -> &BlockPool {
        if small { &self.small } else { &self.large }
    }

    #[inline]
    fn pool_mut(&mut self, small: bool) -> &mut BlockPool {
        if small {
            &mut self.small
        } else {
            &mut self.large
        }
    }

    /// `insert_into_blocks`: a free mapped block enters its pool; its GC age restarts.
    #[inline]
    fn pool_insert(&mut self, slot: u32) {
        let (small, stream, size, addr) = {
            let b = self.blocks.get(slot);
            (b.small, b.stream, b.size, b.addr)
        };
        let pool = if small {
            &mut self.small
        } else {
            &mut self.large
        };
        let base = pool.get_free_blocks_call_count;
        pool.insert_free(stream, size, addr, slot);
        self.blocks.get_mut(slot).gc_count_base = base;
    }

    /// Removes a free mapped block from its pool.
    #[inline]
    fn pool_remove(&mut self, slot: u32) -> Result<(), AllocError<D::Error>> {
        let b = self.blocks.get(slot);
        let (small, stream, size, addr) = (b.small, b.stream, b.size, b.addr);
        if self.pool_mut(small).remove_free(stream, size, addr) {
            Ok(())
        } else {
            Err(AllocError::Internal("free block missing from its pool"))
        }
    }

    #[inline]
    fn emit(&mut self, action: Action, addr: u64, size: u64, stream: u64) {
        self.sink.event(Event {
            action,
            addr,
            size,
            stream,
        });
    }

    /// Links `new` between `before` and `after` (PyTorch's `Block::splice`).
    #[inline]
    fn splice(&mut self, new: u32, before: u32, after: u32) {
        if before != NIL {
            self.blocks.get_mut(before).next = new;
        }
        if after != NIL {
            self.blocks.get_mut(after).prev = new;
        }
        let b = self.blocks.get_mut(new);
        b.prev = before;
        b.next = after;
    }

    /// Garbage collection is on: a limit is set and `garbage_collection_threshold` > 0.
    #[inline]
    fn gc_enabled(&self) -> bool {
        self.allowed.is_some()
            && self
                .config
                .garbage_collection_threshold
                .is_some_and(|t| t > 0.0)
    }
}
