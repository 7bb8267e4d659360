//! `check_invariants`: the allocator's structural invariants (listed in the module docs of
//! `engine::allocator`), checked by walking every block. O(blocks): for tests and debugging, not
//! for every operation of a long replay.

use super::block::NIL;
use super::{CachingAllocator, Device, EventSink};

/// A broken invariant, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allocator invariant violated: {0}")]
pub struct InvariantViolation(pub String);

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// Checks every structural invariant; the first violation found is returned.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |s: String| Err(InvariantViolation(s));
        let mut mapped_bytes = 0u64;
        let mut allocated = 0u64;
        let mut active = 0u64;
        let mut segments = 0i64;
        let mut free_mapped = 0usize;
        for (slot, b) in self.blocks.iter_live() {
            // Links are symmetric and blocks are contiguous.
            if b.next != NIL {
                let n = self.blocks.get(b.next);
                if !n.live || n.prev != slot {
                    return fail(format!("block 0x{:x}: next does not link back", b.addr));
                }
                if b.addr.saturating_add(b.size) != n.addr {
                    return fail(format!(
                        "block 0x{:x}: not contiguous with its next",
                        b.addr
                    ));
                }
                if n.stream != b.stream || n.small != b.small || n.expandable != b.expandable {
                    return fail(format!(
                        "block 0x{:x}: neighbour of another segment",
                        b.addr
                    ));
                }
                if b.is_available() && n.is_available() && b.mapped == n.mapped {
                    return fail(format!(
                        "blocks 0x{:x} and 0x{:x}: free neighbours not merged",
                        b.addr, n.addr
                    ));
                }
            }
            if b.prev != NIL && self.blocks.get(b.prev).next != slot {
                return fail(format!("block 0x{:x}: prev does not link back", b.addr));
            }
            if b.size == 0 || !b.size.is_multiple_of(512) {
                return fail(format!(
                    "block 0x{:x}: size {} not a positive multiple of 512",
                    b.addr, b.size
                ));
            }
            if b.mapped {
                mapped_bytes += b.size;
            }
            if b.allocated {
                allocated += b.size;
            }
            if b.allocated || b.event_count > 0 || b.stream_uses > 0 {
                active += b.size;
            }
            if !b.is_expandable() && b.prev == NIL {
                segments += 1;
            }
            let pool = self.pool(b.small);
            let in_free = pool
                .stream(b.stream)
                .and_then(|s| s.free.get((b.size, b.addr)))
                .is_some_and(|s| s == slot);
            let in_unmapped = pool
                .stream(b.stream)
                .and_then(|s| s.unmapped.get(&b.addr))
                .is_some_and(|&s| s == slot);
            let should_be_free = b.is_available() && b.mapped;
            if should_be_free != in_free {
                return fail(format!(
                    "block 0x{:x} ({} bytes, allocated {}, events {}): in free set {in_free}, expected {should_be_free}",
                    b.addr, b.size, b.allocated, b.event_count
                ));
            }
            if should_be_free {
                free_mapped += 1;
            }
            if b.mapped == in_unmapped {
                return fail(format!(
                    "block 0x{:x}: unmapped-set membership wrong",
                    b.addr
                ));
            }
        }
        if free_mapped != self.small.free_len + self.large.free_len {
            return fail(format!(
                "pools hold {} free blocks, {} expected",
                self.small.free_len + self.large.free_len,
                free_mapped
            ));
        }
        if mapped_bytes != self.total_allocated_memory {
            return fail(format!(
                "reserved {} but blocks cover {mapped_bytes}",
                self.total_allocated_memory
            ));
        }
        let st = &self.stats;
        let eq = |name: &str, stat: i64, sum: u64| {
            if u64::try_from(stat).ok() == Some(sum) {
                Ok(())
            } else {
                Err(InvariantViolation(format!(
                    "{name} is {stat}, blocks sum to {sum}"
                )))
            }
        };
        eq("allocated_bytes", st.allocated_bytes.all.current, allocated)?;
        eq("active_bytes", st.active_bytes.all.current, active)?;
        eq(
            "reserved_bytes",
            st.reserved_bytes.all.current,
            self.total_allocated_memory,
        )?;
        if st.segment.all.current != segments {
            return fail(format!(
                "segment count {} but {segments} segments",
                st.segment.all.current
            ));
        }
        Ok(())
    }
}
