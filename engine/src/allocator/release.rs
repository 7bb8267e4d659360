//! Giving cached memory back to the device (spec C.10): `release_block` (one unsplit free
//! segment), `release_available_cached_blocks` (just enough oversize blocks for one request,
//! only with `max_split_size` set), `release_cached_blocks` (`empty_cache()` and the last
//! resort of malloc: every unsplit free segment and every fully free expandable page).

use super::{AllocError, CachingAllocator, Device, EventSink};
use crate::snapshot::Action;

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// `release_block`: cudaFree of a free, unsplit, non-expandable segment (`segment_free`).
    pub(super) fn release_block(&mut self, slot: u32) -> Result<(), AllocError<D::Error>> {
        let (addr, size, stream, small, expandable, split) = {
            let b = self.blocks.get(slot);
            (
                b.addr,
                b.size,
                b.stream,
                b.small,
                b.is_expandable(),
                b.is_split(),
            )
        };
        if expandable || split {
            return Err(AllocError::Internal(
                "release_block of a split or expandable block",
            ));
        }
        self.stats.num_device_free += 1;
        self.emit(Action::SegmentFree, addr, size, stream);
        self.device.free(addr, size).map_err(AllocError::Device)?;
        self.total_allocated_memory = self.total_allocated_memory.saturating_sub(size);
        self.stats.segment.decrease(small, 1);
        self.stats.reserved_bytes.decrease(small, size);
        if size >= self.max_split {
            self.stats.oversize_segments.decrease(1);
        }
        self.pool_remove(slot)?;
        self.blocks.release(slot);
        Ok(())
    }

    /// `release_available_cached_blocks` (PyTorch ≥ 2.6, spec C.10): with `max_split_size`
    /// set, frees the smallest non-expandable free block of the stream of at least
    /// max(request, max_split_size); if there is none, frees oversize blocks from the largest
    /// down until that much is released. True if enough was released.
    pub(super) fn release_available_cached_blocks(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<bool, AllocError<D::Error>> {
        if self.max_split == u64::MAX {
            return Ok(false);
        }
        let key = size.max(self.max_split);
        let max_split = self.max_split;
        let mut candidates = std::mem::take(&mut self.scratch);
        candidates.clear();
        let single = {
            let Some(s) = self.pool(small).stream(stream) else {
                self.scratch = candidates;
                return Ok(false);
            };
            let lb = s.free.lower_bound((key, 0));
            match s.free.at(lb) {
                Some((_, slot)) if !self.blocks.get(slot).is_expandable() => Some(slot),
                _ => {
                    // Walk down from just below the lower bound: the largest blocks first,
                    // while they are oversize.
                    for j in (0..lb).rev() {
                        let Some((k, slot)) = s.free.at(j) else { break };
                        if k.0 < max_split {
                            break;
                        }
                        candidates.push(slot);
                    }
                    None
                }
            }
        };
        if let Some(slot) = single {
            self.scratch = candidates;
            self.release_block(slot)?;
            return Ok(true);
        }
        let mut released = 0u64;
        let mut result = Ok(());
        for &slot in &candidates {
            if released >= key {
                break;
            }
            if !self.blocks.get(slot).is_expandable() {
                let sz = self.blocks.get(slot).size;
                if let Err(e) = self.release_block(slot) {
                    result = Err(e);
                    break;
                }
                released = released.saturating_add(sz);
            }
        }
        self.scratch = candidates;
        result?;
        Ok(released >= key)
    }

    /// Whether `release_available_cached_blocks` would release enough (read-only).
    pub(super) fn release_available_would_succeed(
        &self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> bool {
        if self.max_split == u64::MAX {
            return false;
        }
        let key = size.max(self.max_split);
        let Some(s) = self.pool(small).stream(stream) else {
            return false;
        };
        let lb = s.free.lower_bound((key, 0));
        if let Some((_, slot)) = s.free.at(lb)
            && !self.blocks.get(slot).is_expandable()
        {
            return true;
        }
        let mut released = 0u64;
        for j in (0..lb).rev() {
            let Some((k, slot)) = s.free.at(j) else { break };
            if k.0 < self.max_split || released >= key {
                break;
            }
            if !self.blocks.get(slot).is_expandable() {
                released = released.saturating_add(k.0);
            }
        }
        released >= key
    }

    /// `release_cached_blocks` (= `empty_cache()`; spec C.10): synchronizes every outstanding
    /// event, then releases the large pool, then the small pool.
    pub(super) fn release_cached_blocks(&mut self) -> Result<(), AllocError<D::Error>> {
        self.synchronize_and_free_events()?;
        self.release_blocks(false)?;
        self.release_blocks(true)
    }

    /// `release_blocks(pool)`: in `(stream, size, address)` order, releases every unsplit
    /// non-expandable free block; then unmaps the fully free pages of every expandable free
    /// block, releasing an expandable segment's address range once nothing of it is mapped.
    fn release_blocks(&mut self, small: bool) -> Result<(), AllocError<D::Error>> {
        let mut list = std::mem::take(&mut self.scratch);
        self.pool(small).collect_free(&mut list);
        let mut to_unmap = Vec::new();
        let mut result = Ok(());
        for &slot in &list {
            let b = self.blocks.get(slot);
            if b.is_expandable() {
                to_unmap.push(slot);
            } else if !b.is_split()
                && let Err(e) = self.release_block(slot)
            {
                result = Err(e);
                break;
            }
        }
        self.scratch = list;
        result?;
        for slot in to_unmap {
            self.unmap_block(slot)?;
            let b = self.blocks.get(slot);
            if b.live && !b.is_split() && !b.mapped {
                self.release_expandable_segment(slot)?;
            }
        }
        Ok(())
    }
}
