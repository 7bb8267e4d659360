//! `garbage_collection_threshold` (spec C.11, `garbage_collect_cached_blocks`): with a memory
//! limit set, when reserved memory is above `threshold × limit` and a malloc finds no cached
//! block, release unsplit free large-pool segments that have gone unused the longest, by rounds
//! of "at least the mean age", until reserved memory is back under the threshold or nothing
//! more can go. A block's age is the number of large-pool `get_free_block` calls since it was
//! last put in the pool.

use super::{AllocError, CachingAllocator, Device, EventSink};

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// The GC threshold in bytes (`⌊threshold × allowed⌋`), when GC is on.
    fn gc_threshold_bytes(&self) -> Option<u64> {
        let allowed = self.allowed?;
        let t = self.config.garbage_collection_threshold?;
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let v = (t * allowed as f64) as u64;
        Some(v)
    }

    /// Whether `garbage_collect_cached_blocks` would release something now: reserved memory is
    /// above the threshold and the large pool holds an unsplit, non-expandable free block.
    pub(super) fn gc_would_release(&self) -> bool {
        self.gc_threshold_bytes()
            .is_some_and(|t| self.total_allocated_memory > t)
            && self.large.streams.iter().any(|s| {
                s.free.slots().any(|slot| {
                    let b = self.blocks.get(slot);
                    !b.is_split() && !b.is_expandable()
                })
            })
    }

    /// Age of a free block: `get_free_blocks_call_count - gc_count_base` of its pool.
    fn gc_count(&self, slot: u32) -> u64 {
        let b = self.blocks.get(slot);
        let count = self.pool(b.small).get_free_blocks_call_count;
        u64::try_from(count.saturating_sub(b.gc_count_base)).unwrap_or(0)
    }

    /// `garbage_collect_cached_blocks`.
    pub(super) fn garbage_collect_cached_blocks(&mut self) -> Result<(), AllocError<D::Error>> {
        let Some(gc_threshold) = self.gc_threshold_bytes() else {
            return Ok(());
        };
        if self.total_allocated_memory <= gc_threshold {
            return Ok(());
        }
        let target = self.total_allocated_memory - gc_threshold;
        let mut reclaimed = 0u64;

        let mut list = std::mem::take(&mut self.scratch);
        self.large.collect_free(&mut list);
        let mut total_age = 0u64;
        let mut freeable = 0u64;
        for &slot in &list {
            if !self.blocks.get(slot).is_split() {
                total_age = total_age.saturating_add(self.gc_count(slot));
                freeable += 1;
            }
        }
        let mut result = Ok(());
        let mut block_freed = true;
        while freeable > 0 && reclaimed < target && block_freed {
            #[allow(clippy::cast_precision_loss)]
            let age_threshold = total_age as f64 / freeable as f64;
            block_freed = false;
            self.large.collect_free(&mut list);
            for &slot in &list {
                let b = self.blocks.get(slot);
                if !b.live || b.is_split() || b.is_expandable() {
                    continue;
                }
                let age = self.gc_count(slot);
                #[allow(clippy::cast_precision_loss)]
                let old_enough = age as f64 >= age_threshold;
                if old_enough {
                    block_freed = true;
                    reclaimed = reclaimed.saturating_add(b.size);
                    total_age = total_age.saturating_sub(age);
                    freeable = freeable.saturating_sub(1);
                    if let Err(e) = self.release_block(slot) {
                        result = Err(e);
                        break;
                    }
                }
            }
            if result.is_err() {
                break;
            }
        }
        self.scratch = list;
        result
    }
}
