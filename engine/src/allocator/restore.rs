//! Restoring state the allocator did not build itself: a segment that already existed, with its
//! live blocks, when a trace starts mid-run (the ring buffer wrapped or history was enabled
//! late). The segment is laid out as PyTorch would hold it — the live blocks where they were,
//! the space between them as merged free blocks in the pool — and the statistics count it as if
//! the allocator had made it (peaks start at these values).

use serde::Serialize;

use super::block::NIL;
use super::rounding::SMALL_BUFFER;
use super::{AllocError, BlockId, CachingAllocator, Device, EventSink, MIN_BLOCK_SIZE};

/// A live block to put back in a restored segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoredBlock {
    /// Address (inside the segment).
    pub addr: u64,
    /// Size (a multiple of 512).
    pub size: u64,
    /// The caller's unrounded size.
    pub requested: u64,
    /// Freed by the user but waiting for recorded-stream events.
    pub pending_free: bool,
}

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// Puts back a non-expandable segment of `size` bytes at `addr` on `stream` that the device
    /// already holds (the caller accounts for it there), with its live `blocks` (any order,
    /// non-overlapping, inside the segment). The pool is the small one for a 2 MiB segment, the
    /// large one otherwise (PyTorch's segment sizes make that exact). Emits no events. Returns the
    /// ids of `blocks`, in the order given.
    pub fn restore_segment(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        blocks: &[RestoredBlock],
    ) -> Result<Vec<BlockId>, AllocError<D::Error>> {
        if size == 0 || !size.is_multiple_of(MIN_BLOCK_SIZE) {
            return Err(AllocError::WrongState(
                "restored segment size not a multiple of 512",
            ));
        }
        let small = size <= SMALL_BUFFER;
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| blocks[i].addr);
        let end = addr.saturating_add(size);
        // (addr, size, Some(index into blocks) | None for free space)
        let mut pieces: Vec<(u64, u64, Option<usize>)> = Vec::with_capacity(blocks.len() * 2 + 1);
        let mut cur = addr;
        for &i in &order {
            let b = blocks[i];
            if b.addr < cur || b.size == 0 || b.addr.saturating_add(b.size) > end {
                return Err(AllocError::WrongState(
                    "restored block outside its segment or overlapping another",
                ));
            }
            if b.addr > cur {
                pieces.push((cur, b.addr - cur, None));
            }
            pieces.push((b.addr, b.size, Some(i)));
            cur = b.addr + b.size;
        }
        if cur < end {
            pieces.push((cur, end - cur, None));
        }
        self.total_allocated_memory = self.total_allocated_memory.saturating_add(size);
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, size);
        if size >= self.max_split {
            self.stats.oversize_segments.increase(1);
        }
        let split = pieces.len() > 1;
        let mut ids = vec![None; blocks.len()];
        let mut prev = NIL;
        for &(a, s, which) in &pieces {
            let slot = self.blocks.alloc(a, s, stream, small);
            self.splice(slot, prev, NIL);
            prev = slot;
            match which {
                None => {
                    self.pool_insert(slot);
                    if split {
                        self.stats.inactive_split.increase(small, 1);
                        self.stats.inactive_split_bytes.increase(small, s);
                    }
                }
                Some(i) => {
                    let rb = blocks[i];
                    let b = self.blocks.get_mut(slot);
                    b.requested = rb.requested;
                    let st = &mut self.stats;
                    st.active.increase(small, 1);
                    st.active_bytes.increase(small, s);
                    st.requested_bytes.increase(small, rb.requested);
                    if rb.pending_free {
                        b.event_count = 1;
                        self.outstanding.push(slot);
                    } else {
                        b.allocated = true;
                        st.allocation.increase(small, 1);
                        st.allocated_bytes.increase(small, s);
                        if s >= self.max_split {
                            st.oversize_allocations.increase(1);
                        }
                    }
                    ids[i] = Some(self.blocks.id(slot));
                }
            }
        }
        ids.into_iter()
            .map(|id| id.ok_or(AllocError::Internal("restored block without a slot")))
            .collect()
    }
}
