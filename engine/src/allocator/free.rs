//! The free path (spec C.9): `free` (the user gives a block back; with recorded-stream uses it
//! stays pending), `free_block` (it returns to its pool, merged with free neighbours) and
//! `try_merge_blocks`.

use super::block::NIL;
use super::{AllocError, CachingAllocator, Device, EventSink};
use crate::snapshot::Action;

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// `DeviceCachingAllocator::free`.
    pub(super) fn free_impl(&mut self, slot: u32) -> Result<(), AllocError<D::Error>> {
        let (addr, size, requested, stream, small, uses) = {
            let b = self.blocks.get_mut(slot);
            if !b.allocated {
                return Err(AllocError::WrongState(
                    "free of a block that is not allocated",
                ));
            }
            b.allocated = false;
            (
                b.addr,
                b.size,
                b.requested,
                b.stream,
                b.small,
                b.stream_uses,
            )
        };
        self.stats.allocation.decrease(small, 1);
        self.stats.allocated_bytes.decrease(small, size);
        self.emit(Action::FreeRequested, addr, requested, stream);
        if size >= self.max_split {
            self.stats.oversize_allocations.decrease(1);
        }
        if uses > 0 {
            // insert_events: one event per recorded stream; the block waits for them.
            let b = self.blocks.get_mut(slot);
            b.event_count = uses;
            b.stream_uses = 0;
            self.outstanding.push(slot);
            Ok(())
        } else {
            self.free_block(slot)
        }
    }

    /// `free_block`: emits `free_completed`, merges with the free neighbours (the merged block
    /// keeps the lower address), returns the block to its pool.
    pub(super) fn free_block(&mut self, slot: u32) -> Result<(), AllocError<D::Error>> {
        let (addr, original_size, requested, stream, small, prev, next) = {
            let b = self.blocks.get(slot);
            if !b.is_available() {
                return Err(AllocError::Internal("free_block of a block still in use"));
            }
            (
                b.addr,
                b.size,
                b.requested,
                b.stream,
                b.small,
                b.prev,
                b.next,
            )
        };
        self.emit(Action::FreeCompleted, addr, requested, stream);
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        for candidate in [prev, next] {
            let subsumed = self.try_merge_blocks(slot, candidate)?;
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= i64::try_from(subsumed).unwrap_or(i64::MAX);
            }
        }
        self.pool_insert(slot);
        let b = self.blocks.get(slot);
        let expandable = b.is_expandable();
        if b.is_split() {
            net_blocks += 1;
            net_bytes += i64::try_from(b.size).unwrap_or(i64::MAX);
        }
        let st = &mut self.stats;
        // Expandable segments are left out of inactive_split, as in PyTorch.
        if !expandable {
            if net_blocks > 0 {
                st.inactive_split.increase(small, net_blocks.unsigned_abs());
            } else if net_blocks < 0 {
                st.inactive_split.decrease(small, net_blocks.unsigned_abs());
            }
            if net_bytes > 0 {
                st.inactive_split_bytes
                    .increase(small, net_bytes.unsigned_abs());
            } else if net_bytes < 0 {
                st.inactive_split_bytes
                    .decrease(small, net_bytes.unsigned_abs());
            }
        }
        st.active.decrease(small, 1);
        st.active_bytes.decrease(small, original_size);
        st.requested_bytes.decrease(small, requested);
        Ok(())
    }

    /// `try_merge_blocks(dst, src)`: absorbs the neighbour `src` into `dst` if it is available
    /// and equally mapped; returns the bytes absorbed (0: no merge).
    pub(super) fn try_merge_blocks(
        &mut self,
        dst: u32,
        src: u32,
    ) -> Result<u64, AllocError<D::Error>> {
        if src == NIL {
            return Ok(0);
        }
        let s = {
            let b = self.blocks.get(src);
            if !b.is_available() || self.blocks.get(dst).mapped != b.mapped {
                return Ok(0);
            }
            Neighbour {
                addr: b.addr,
                size: b.size,
                stream: b.stream,
                prev: b.prev,
                next: b.next,
                small: b.small,
                mapped: b.mapped,
            }
        };
        let removed = if s.mapped {
            self.pool_mut(s.small).remove_free(s.stream, s.size, s.addr)
        } else {
            self.pool_mut(s.small).remove_unmapped(s.stream, s.addr)
        };
        if !removed {
            return Err(AllocError::Internal("free neighbour missing from its pool"));
        }
        if self.blocks.get(dst).prev == src {
            // [src dst]
            self.blocks.get_mut(dst).addr = s.addr;
            self.blocks.get_mut(dst).prev = s.prev;
            if s.prev != NIL {
                self.blocks.get_mut(s.prev).next = dst;
            }
        } else {
            // [dst src]
            self.blocks.get_mut(dst).next = s.next;
            if s.next != NIL {
                self.blocks.get_mut(s.next).prev = dst;
            }
        }
        let d = self.blocks.get_mut(dst);
        d.size = d.size.saturating_add(s.size);
        self.blocks.release(src);
        Ok(s.size)
    }

    /// Completes every outstanding event (`synchronize_and_free_events`, part of
    /// `release_cached_blocks`): pending blocks return to their pools in the order they were
    /// freed.
    pub(super) fn synchronize_and_free_events(&mut self) -> Result<(), AllocError<D::Error>> {
        self.stats.num_sync_all_streams += 1;
        let pending = std::mem::take(&mut self.outstanding);
        for &slot in &pending {
            let b = self.blocks.get_mut(slot);
            if b.live && b.event_count > 0 {
                b.event_count = 0;
                self.free_block(slot)?;
            }
        }
        self.outstanding = pending;
        self.outstanding.clear();
        Ok(())
    }
}

/// The fields of a neighbour that `try_merge_blocks` needs after it is unlinked.
struct Neighbour {
    addr: u64,
    size: u64,
    stream: u64,
    prev: u32,
    next: u32,
    small: bool,
    mapped: bool,
}
