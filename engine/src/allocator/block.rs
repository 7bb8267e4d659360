//! Blocks and the arena that owns them. A block is a contiguous piece of a segment (spec C.1);
//! blocks of one segment form a doubly linked list by address (`prev`/`next` are arena indices).
//! The arena is a `Vec` with a free list of slots and a generation per slot, so a [`BlockId`]
//! held across a free is detected as stale instead of naming a new block: no `Rc`, no
//! `RefCell`, no allocation per block once the arena has grown to the working set.

use serde::Serialize;

/// "No block" in a `prev`/`next`/segment link.
pub(crate) const NIL: u32 = u32::MAX;

/// A handle to a block handed out by the allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct BlockId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl BlockId {
    /// The slot number (stable while the block lives; reused afterwards).
    pub fn index(self) -> u32 {
        self.index
    }
}

/// One block (PyTorch's `Block`, without the fields a simulation does not need).
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) addr: u64,
    pub(crate) size: u64,
    /// The caller's unrounded size of the last allocation of this block.
    pub(crate) requested: u64,
    pub(crate) stream: u64,
    /// `get_free_blocks_call_count` of its pool when it was last inserted (the GC age clock).
    pub(crate) gc_count_base: i64,
    pub(crate) prev: u32,
    pub(crate) next: u32,
    /// Index of its expandable segment, or [`NIL`].
    pub(crate) expandable: u32,
    /// Outstanding recorded-stream events (the block is pending free while > 0).
    pub(crate) event_count: u32,
    /// Streams recorded with `record_stream` since the block was handed out.
    pub(crate) stream_uses: u32,
    pub(crate) generation: u32,
    pub(crate) small: bool,
    pub(crate) allocated: bool,
    /// Backed by physical memory (always true outside expandable segments).
    pub(crate) mapped: bool,
    pub(crate) live: bool,
}

impl Block {
    #[inline]
    pub(crate) fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    #[inline]
    pub(crate) fn is_expandable(&self) -> bool {
        self.expandable != NIL
    }

    /// Not allocated and no outstanding events or uses: may be merged, reused or released.
    #[inline]
    pub(crate) fn is_available(&self) -> bool {
        !self.allocated && self.event_count == 0 && self.stream_uses == 0
    }
}

/// The arena of blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arena {
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    live: usize,
}

impl Arena {
    pub(crate) fn new() -> Arena {
        Arena {
            blocks: Vec::with_capacity(1024),
            free_slots: Vec::with_capacity(256),
            live: 0,
        }
    }

    /// A new free, unlinked, mapped block.
    pub(crate) fn alloc(&mut self, addr: u64, size: u64, stream: u64, small: bool) -> u32 {
        self.live += 1;
        let fresh = |generation| Block {
            addr,
            size,
            requested: 0,
            stream,
            gc_count_base: 0,
            prev: NIL,
            next: NIL,
            expandable: NIL,
            event_count: 0,
            stream_uses: 0,
            generation,
            small,
            allocated: false,
            mapped: true,
            live: true,
        };
        if let Some(i) = self.free_slots.pop() {
            let slot = &mut self.blocks[i as usize];
            *slot = fresh(slot.generation.wrapping_add(1));
            i
        } else {
            let i = u32::try_from(self.blocks.len()).unwrap_or(NIL);
            self.blocks.push(fresh(0));
            i
        }
    }

    pub(crate) fn release(&mut self, i: u32) {
        if let Some(b) = self.blocks.get_mut(i as usize)
            && b.live
        {
            b.live = false;
            self.live -= 1;
            self.free_slots.push(i);
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: u32) -> &Block {
        &self.blocks[i as usize]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Block {
        &mut self.blocks[i as usize]
    }

    /// The slot of a live block named by `id`, if `id` is not stale.
    #[inline]
    pub(crate) fn resolve(&self, id: BlockId) -> Option<u32> {
        let b = self.blocks.get(id.index as usize)?;
        (b.live && b.generation == id.generation).then_some(id.index)
    }

    #[inline]
    pub(crate) fn id(&self, i: u32) -> BlockId {
        BlockId {
            index: i,
            generation: self.blocks[i as usize].generation,
        }
    }

    /// Live blocks, by slot.
    pub(crate) fn iter_live(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.live)
            .map(|(i, b)| (i as u32, b))
    }

    pub(crate) fn live_count(&self) -> usize {
        self.live
    }
}
