//! The allocator's state as `torch.cuda.memory._snapshot()` lists it (spec A.3): segments in
//! address order — for an expandable segment, one per contiguous mapped range — each with its
//! blocks.

use serde::Serialize;

use super::block::NIL;
use super::{CachingAllocator, Device, EventSink};
use crate::snapshot::{BlockState, PoolKind};

/// One segment (or one mapped range of an expandable segment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentInfo {
    /// Base address.
    pub address: u64,
    /// Bytes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in allocated or pending-free blocks.
    pub active_size: u64,
    /// Requested bytes of active blocks.
    pub requested_size: u64,
    /// Stream.
    pub stream: u64,
    /// Small or large pool.
    pub segment_type: PoolKind,
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// Blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockInfo {
    /// Address.
    pub address: u64,
    /// Size.
    pub size: u64,
    /// Unrounded size of its last allocation (stale for free blocks).
    pub requested_size: u64,
    /// Allocated, pending free or free.
    pub state: BlockState,
}

impl<D: Device, S: EventSink> CachingAllocator<D, S> {
    /// The segments and blocks now, as PyTorch's `snapshot()` reports them.
    pub fn snapshot(&self) -> Vec<SegmentInfo> {
        let mut out = Vec::new();
        for (_, head) in self.blocks.iter_live() {
            if !head.mapped || (head.prev != NIL && self.blocks.get(head.prev).mapped) {
                continue;
            }
            let mut seg = SegmentInfo {
                address: head.addr,
                total_size: 0,
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                stream: head.stream,
                segment_type: if head.small {
                    PoolKind::Small
                } else {
                    PoolKind::Large
                },
                is_expandable: head.is_expandable(),
                blocks: Vec::new(),
            };
            let mut b = head;
            loop {
                let active = b.allocated || b.event_count > 0 || b.stream_uses > 0;
                seg.total_size += b.size;
                if b.allocated {
                    seg.allocated_size += b.size;
                }
                if active {
                    seg.active_size += b.size;
                    seg.requested_size += b.requested;
                }
                seg.blocks.push(BlockInfo {
                    address: b.addr,
                    size: b.size,
                    requested_size: b.requested,
                    state: if b.allocated {
                        BlockState::ActiveAllocated
                    } else if active {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    },
                });
                if b.next == NIL || !self.blocks.get(b.next).mapped {
                    break;
                }
                b = self.blocks.get(b.next);
            }
            out.push(seg);
        }
        out.sort_unstable_by_key(|s| s.address);
        out
    }
}
