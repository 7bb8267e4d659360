//! The malloc path (spec C.4–C.8): `malloc` itself, best fit (`get_free_block`), getting a new
//! segment (`alloc_block`), the split rule (`should_split`) and handing the block out
//! (`alloc_found_block`), with the statistics PyTorch keeps at each step.

use super::block::NIL;
use super::rounding::{ONE_EXA_BYTE, SMALL_SIZE, alloc_size, is_small, round_size};
use super::{
    AllocError, Allocation, CachingAllocator, Device, EventSink, MIN_BLOCK_SIZE, OutOfMemory,
};
use crate::snapshot::Action;

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// `DeviceCachingAllocator::malloc` (spec C.4). `process_events` is the caller's business
    /// ([`CachingAllocator::complete_events`]); the free-memory callbacks of step 3 never free
    /// anything in a simulation.
    pub(super) fn malloc_impl(
        &mut self,
        orig_size: u64,
        stream: u64,
    ) -> Result<Allocation, AllocError<D::Error>> {
        if orig_size >= ONE_EXA_BYTE {
            return Err(AllocError::MoreThanOneExabyte);
        }
        let size = round_size(orig_size, &self.config.roundup_power2_divisions);
        let small = is_small(size);
        let asize = alloc_size(size, self.config.large_segment_size);

        // get_free_block (spec C.5); the best fit stays in the pool until the split decision,
        // so that a split can re-key it in place.
        if self.gc_enabled() {
            self.pool_mut(small).get_free_blocks_call_count += 1;
        }
        let best = self.find_free_block(small, stream, size);
        let mut found = best.map(|(slot, _)| slot);
        if found.is_none() {
            if self.gc_enabled() {
                self.garbage_collect_cached_blocks()?;
            }
            found = self.alloc_block(small, stream, size, asize, false)?;
            if found.is_none() && self.release_available_cached_blocks(small, stream, size)? {
                found = self.alloc_block(small, stream, size, asize, false)?;
            }
            if found.is_none() {
                self.release_cached_blocks()?;
                found = self.alloc_block(small, stream, size, asize, true)?;
            }
        }
        let Some(slot) = found else {
            let device_free = self.device.free_memory().map_err(AllocError::Device)?;
            self.emit(Action::Oom, device_free, size, stream);
            self.stats.num_ooms += 1;
            return Err(AllocError::OutOfMemory(OutOfMemory {
                requested: orig_size,
                rounded: size,
                alloc_size: asize,
                stream,
                device_free,
                device_total: self.device.total_memory(),
                allowed: self.allowed,
                allocated: self.allocated(),
                reserved: self.total_allocated_memory,
            }));
        };
        let split = self.should_split(slot, size);
        let pool_pos = best.map(|(_, pos)| pos);
        if let Some(pos) = pool_pos
            && !split
            && !self.pool_mut(small).remove_at(stream, pos)
        {
            return Err(AllocError::Internal("best fit missing from its pool"));
        }
        let slot = self.alloc_found_block(slot, small, stream, size, orig_size, split, pool_pos)?;
        let b = self.blocks.get(slot);
        Ok(Allocation {
            id: self.blocks.id(slot),
            addr: b.addr,
            size: b.size,
        })
    }

    /// The block `get_free_block` would pick, without taking it (spec C.5): the first free block
    /// of `stream` with `(size, addr) ≥ (size, 0)`; for expandable segments the walk to a block
    /// that can grow less (`esize`); `None` where the oversize rules refuse it.
    pub(super) fn find_free_block(
        &self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Option<(u32, usize)> {
        let pool = self.pool(small);
        let s = pool.stream(stream)?;
        let mut pos = s.free.lower_bound((size, 0));
        let (mut key, mut slot) = s.free.at(pos)?;
        if self.blocks.get(slot).is_expandable() {
            if self.config.expandable_segments {
                // Prefer a block that is not the growable tail: compare the size each could
                // reach by mapping the unmapped block after it.
                let mut cur = self.expandable_size(slot);
                while let Some((k, next)) = s.free.at(pos + 1) {
                    if !self.blocks.get(slot).is_expandable() {
                        break;
                    }
                    let e = self.expandable_size(next);
                    if e >= cur {
                        break;
                    }
                    pos += 1;
                    slot = next;
                    key = k;
                    cur = e;
                }
            } else {
                // Expandable segments were switched off: only non-expandable blocks qualify.
                loop {
                    pos += 1;
                    let (k, next) = s.free.at(pos)?;
                    if !self.blocks.get(next).is_expandable() {
                        key = k;
                        slot = next;
                        break;
                    }
                }
            }
        }
        let block_size = key.0;
        // Do not return an oversize block for a request below max_split_size.
        if size < self.max_split && block_size >= self.max_split {
            return None;
        }
        // An oversize request may take an oversize block only within max_non_split_rounding.
        if size >= self.max_split
            && block_size >= size.saturating_add(self.config.max_non_split_rounding)
        {
            return None;
        }
        Some((slot, pos))
    }

    /// `b.size` plus the unmapped block after it, if any (`expandable_size` in PyTorch).
    fn expandable_size(&self, slot: u32) -> u64 {
        let b = self.blocks.get(slot);
        let tail = if b.next != NIL && !self.blocks.get(b.next).mapped {
            self.blocks.get(b.next).size
        } else {
            0
        };
        b.size.saturating_add(tail)
    }

    /// `alloc_block` (spec C.6): a new segment of `asize` bytes, or with expandable segments
    /// `size` bytes mapped. `None` when the limit or the device refuses.
    pub(super) fn alloc_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
        asize: u64,
        is_retry: bool,
    ) -> Result<Option<u32>, AllocError<D::Error>> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if let Some(allowed) = self.allowed
            && self.total_allocated_memory.saturating_add(asize) > allowed
        {
            return Ok(None);
        }
        if self.config.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        let Some(addr) = self.device.allocate(asize).map_err(AllocError::Device)? else {
            return Ok(None);
        };
        self.total_allocated_memory = self.total_allocated_memory.saturating_add(asize);
        let slot = self.blocks.alloc(addr, asize, stream, small);
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, asize);
        if asize >= self.max_split {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.emit(Action::SegmentAlloc, addr, asize, stream);
        Ok(Some(slot))
    }

    /// `should_split` (spec C.8): small pool or expandable segments on → the remainder must be
    /// at least 512 bytes; large pool → the request must be below `max_split_size` and the
    /// remainder more than 1 MiB.
    pub(super) fn should_split(&self, slot: u32, size: u64) -> bool {
        let b = self.blocks.get(slot);
        let remaining = b.size.saturating_sub(size);
        if b.small || self.config.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.max_split && remaining > SMALL_SIZE
        }
    }

    /// `alloc_found_block`: splits off the front `size` bytes if `split` (the remainder goes
    /// back to the pool), marks the block allocated, emits `alloc`, updates the statistics.
    #[allow(clippy::too_many_arguments)]
    fn alloc_found_block(
        &mut self,
        slot: u32,
        small: bool,
        stream: u64,
        size: u64,
        orig_size: u64,
        split: bool,
        pool_pos: Option<usize>,
    ) -> Result<u32, AllocError<D::Error>> {
        let already_split = self.blocks.get(slot).is_split();
        let expandable = self.blocks.get(slot).is_expandable();
        let mut block = slot;
        if split {
            let remaining = slot;
            let (addr, prev, seg) = {
                let r = self.blocks.get(remaining);
                (r.addr, r.prev, r.expandable)
            };
            let nb = self.blocks.alloc(addr, size, stream, small);
            self.blocks.get_mut(nb).expandable = seg;
            self.splice(nb, prev, remaining);
            {
                let r = self.blocks.get_mut(remaining);
                r.addr = r.addr.saturating_add(size);
                r.size = r.size.saturating_sub(size);
            }
            match pool_pos {
                // Still in the pool under its old key: re-key it in place.
                Some(pos) => {
                    let (rsize, raddr) = {
                        let r = self.blocks.get(remaining);
                        (r.size, r.addr)
                    };
                    let pool = self.pool_mut(small);
                    let base = pool.get_free_blocks_call_count;
                    if !pool.shrink_at(stream, pos, (rsize, raddr)) {
                        return Err(AllocError::Internal("best fit missing from its pool"));
                    }
                    self.blocks.get_mut(remaining).gc_count_base = base;
                }
                None => self.pool_insert(remaining),
            }
            if !expandable {
                if already_split {
                    // An already split free block shrinks by `size`.
                    self.stats.inactive_split_bytes.decrease(small, size);
                } else {
                    // A new split free block appears.
                    let rsize = self.blocks.get(remaining).size;
                    self.stats.inactive_split_bytes.increase(small, rsize);
                    self.stats.inactive_split.increase(small, 1);
                }
            }
            block = nb;
        } else if already_split && !expandable {
            let bsize = self.blocks.get(block).size;
            self.stats.inactive_split_bytes.decrease(small, bsize);
            self.stats.inactive_split.decrease(small, 1);
        }
        let (addr, bsize) = {
            let b = self.blocks.get_mut(block);
            b.allocated = true;
            b.requested = orig_size;
            (b.addr, b.size)
        };
        self.emit(Action::Alloc, addr, orig_size, stream);
        let st = &mut self.stats;
        st.allocation.increase(small, 1);
        st.allocated_bytes.increase(small, bsize);
        st.active.increase(small, 1);
        st.active_bytes.increase(small, bsize);
        st.requested_bytes.increase(small, orig_size);
        if bsize >= self.max_split {
            st.oversize_allocations.increase(1);
        }
        Ok(block)
    }
}
