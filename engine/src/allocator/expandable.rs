//! Expandable segments (`expandable_segments:True`, spec C.13): one large virtual address range
//! per stream and pool, backed by physical pages on demand — 2 MiB pages in the small pool,
//! `large_segment_size` (20 MiB) pages in the large pool. Initially the whole range is one
//! unmapped block; mapping carves a free mapped block out of it (`segment_map`), and
//! `empty_cache` unmaps every page that lies entirely inside a free block (`segment_unmap`).

use super::block::NIL;
use super::rounding::SMALL_BUFFER;
use super::{AllocError, CachingAllocator, Device, EventSink};
use crate::snapshot::Action;

/// One expandable segment: a reserved address range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpandableSegment {
    pub(crate) base: u64,
    /// Bytes of address space (a whole number of pages).
    pub(crate) size: u64,
    pub(crate) page: u64,
}

/// The address space one expandable segment reserves on a device of `total` bytes with pages of
/// `page` bytes: `page × ⌈(total + total/8) / page⌉` (PyTorch reserves 1⅛ of the device).
pub fn expandable_reservation_size(total: u64, page: u64) -> u64 {
    let page = page.max(1);
    total
        .saturating_add(total / 8)
        .div_ceil(page)
        .saturating_mul(page)
}

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    fn segment(&self, slot: u32) -> Result<ExpandableSegment, AllocError<D::Error>> {
        let seg = self.blocks.get(slot).expandable;
        self.segments
            .get(seg as usize)
            .copied()
            .flatten()
            .ok_or(AllocError::Internal(
                "block of an unknown expandable segment",
            ))
    }

    /// `has_available_address_space`: free or unmapped blocks from `slot` on add up to `size`.
    fn has_available_address_space(&self, mut slot: u32, size: u64) -> bool {
        let mut bytes = 0u64;
        while bytes < size && slot != NIL && self.blocks.get(slot).is_available() {
            bytes = bytes.saturating_add(self.blocks.get(slot).size);
            slot = self.blocks.get(slot).next;
        }
        bytes >= size
    }

    /// `find_expandable_block`: the lowest-addressed unmapped block of this stream and pool
    /// (or the free block just before it) from which `size` bytes of free-or-unmapped space
    /// run; else a new expandable segment's single unmapped block.
    fn find_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<u32, AllocError<D::Error>> {
        if let Some(s) = self.pool(small).stream(stream) {
            for &c in s.unmapped.values() {
                let prev = self.blocks.get(c).prev;
                let start = if prev != NIL && self.blocks.get(prev).is_available() {
                    prev
                } else {
                    c
                };
                if self.has_available_address_space(start, size) {
                    return Ok(start);
                }
            }
        }
        let page = if small {
            SMALL_BUFFER
        } else {
            self.config.large_segment_size
        };
        let va = expandable_reservation_size(self.device.total_memory(), page);
        let base = self.device.reserve(va).map_err(AllocError::Device)?;
        let seg = match self.segments.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.segments.push(None);
                self.segments.len() - 1
            }
        };
        self.segments[seg] = Some(ExpandableSegment {
            base,
            size: va,
            page,
        });
        let slot = self.blocks.alloc(base, va, stream, small);
        let b = self.blocks.get_mut(slot);
        b.mapped = false;
        b.expandable = u32::try_from(seg).unwrap_or(NIL);
        self.pool_mut(small).insert_unmapped(stream, base, slot);
        Ok(slot)
    }

    /// `map_block`: maps the pages covering the first `size` bytes of the unmapped block
    /// `slot`; the rest stays unmapped; the mapped part merges with free mapped neighbours and
    /// enters the pool (`segment_map`). False when the device is out of memory.
    fn map_block(&mut self, slot: u32, size: u64) -> Result<bool, AllocError<D::Error>> {
        let es = self.segment(slot)?;
        let (addr, bsize, stream, small, mapped) = {
            let b = self.blocks.get(slot);
            (b.addr, b.size, b.stream, b.small, b.mapped)
        };
        if mapped || size == 0 || size > bsize {
            return Err(AllocError::Internal(
                "map_block of a mapped block or a bad size",
            ));
        }
        let off = addr - es.base;
        if off % es.page != 0 {
            return Err(AllocError::Internal("unmapped block not page-aligned"));
        }
        let end = (off + size).div_ceil(es.page) * es.page;
        let msize = end - off;
        if msize > bsize {
            return Err(AllocError::Internal(
                "unmapped block not a whole number of pages",
            ));
        }
        if !self
            .device
            .map(addr, msize, es.page)
            .map_err(AllocError::Device)?
        {
            return Ok(false);
        }
        if !self.pool_mut(small).remove_unmapped(stream, addr) {
            return Err(AllocError::Internal("unmapped block missing from its pool"));
        }
        self.blocks.get_mut(slot).mapped = true;
        if msize < bsize {
            let (seg, next) = {
                let b = self.blocks.get(slot);
                (b.expandable, b.next)
            };
            let rest = self
                .blocks
                .alloc(addr + msize, bsize - msize, stream, small);
            let r = self.blocks.get_mut(rest);
            r.mapped = false;
            r.expandable = seg;
            self.splice(rest, slot, next);
            self.pool_mut(small)
                .insert_unmapped(stream, addr + msize, rest);
            self.blocks.get_mut(slot).size = msize;
        }
        let (prev, next) = {
            let b = self.blocks.get(slot);
            (b.prev, b.next)
        };
        self.try_merge_blocks(slot, prev)?;
        self.try_merge_blocks(slot, next)?;
        self.pool_insert(slot);
        self.total_allocated_memory = self.total_allocated_memory.saturating_add(msize);
        self.stats.reserved_bytes.increase(small, msize);
        self.stats.num_device_alloc += 1;
        self.emit(Action::SegmentMap, addr, msize, stream);
        Ok(true)
    }

    /// `try_allocate_expandable_block`: finds room (`find_expandable_block`), maps as much as
    /// `size` needs, and takes the resulting free block out of the pool.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<Option<u32>, AllocError<D::Error>> {
        let mut c = self.find_expandable_block(small, stream, size)?;
        if !self.blocks.get(c).mapped {
            let take = self.blocks.get(c).size.min(size);
            if !self.map_block(c, take)? {
                return Ok(None);
            }
        }
        while self.blocks.get(c).size < size {
            let remaining = size - self.blocks.get(c).size;
            let next = self.blocks.get(c).next;
            if next == NIL || self.blocks.get(next).mapped {
                return Err(AllocError::Internal(
                    "expandable candidate not followed by unmapped space",
                ));
            }
            let take = remaining.min(self.blocks.get(next).size);
            if !self.map_block(next, take)? {
                return Ok(None);
            }
            // map_block merged the candidate into `next`.
            c = next;
        }
        self.pool_remove(c)?;
        Ok(Some(c))
    }

    /// `unmap_block`: unmaps every page lying entirely inside the free block `slot`, which
    /// becomes [free head][unmapped middle][free tail]; the unmapped part merges with unmapped
    /// neighbours (`segment_unmap`).
    pub(super) fn unmap_block(&mut self, slot: u32) -> Result<(), AllocError<D::Error>> {
        let es = self.segment(slot)?;
        let (addr, size, stream, small, prev, next) = {
            let b = self.blocks.get(slot);
            (b.addr, b.size, b.stream, b.small, b.prev, b.next)
        };
        let off = addr - es.base;
        let begin = off.div_ceil(es.page);
        let end = (off + size) / es.page;
        if begin >= end {
            return Ok(());
        }
        let uptr = es.base + begin * es.page;
        let len = (end - begin) * es.page;
        self.device
            .unmap(uptr, len, es.page)
            .map_err(AllocError::Device)?;
        self.pool_remove(slot)?;
        let seg = self.blocks.get(slot).expandable;
        let before = uptr - addr;
        if before > 0 {
            let bf = self.blocks.alloc(addr, before, stream, small);
            self.blocks.get_mut(bf).expandable = seg;
            self.splice(bf, prev, slot);
            self.pool_insert(bf);
        }
        let after = size - before - len;
        if after > 0 {
            let af = self.blocks.alloc(uptr + len, after, stream, small);
            self.blocks.get_mut(af).expandable = seg;
            self.splice(af, slot, next);
            self.pool_insert(af);
        }
        {
            let b = self.blocks.get_mut(slot);
            b.addr = uptr;
            b.size = len;
            b.mapped = false;
        }
        let (prev, next) = {
            let b = self.blocks.get(slot);
            (b.prev, b.next)
        };
        self.try_merge_blocks(slot, prev)?;
        self.try_merge_blocks(slot, next)?;
        let new_addr = self.blocks.get(slot).addr;
        self.pool_mut(small).insert_unmapped(stream, new_addr, slot);
        self.total_allocated_memory = self.total_allocated_memory.saturating_sub(len);
        self.stats.reserved_bytes.decrease(small, len);
        self.stats.num_device_free += 1;
        self.emit(Action::SegmentUnmap, uptr, len, stream);
        Ok(())
    }

    /// `release_expandable_segment`: a segment with nothing mapped gives its address range back.
    pub(super) fn release_expandable_segment(
        &mut self,
        slot: u32,
    ) -> Result<(), AllocError<D::Error>> {
        let es = self.segment(slot)?;
        let (addr, size, stream, small) = {
            let b = self.blocks.get(slot);
            (b.addr, b.size, b.stream, b.small)
        };
        if size != es.size || addr != es.base {
            return Err(AllocError::Internal(
                "expandable block disagrees with its segment",
            ));
        }
        self.pool_mut(small).remove_unmapped(stream, addr);
        self.device
            .release(es.base, es.size)
            .map_err(AllocError::Device)?;
        let seg = self.blocks.get(slot).expandable as usize;
        if let Some(s) = self.segments.get_mut(seg) {
            *s = None;
        }
        self.blocks.release(slot);
        Ok(())
    }
}
