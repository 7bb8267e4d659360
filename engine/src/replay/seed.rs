//! Seeding the allocator with the state before a mid-run trace's first entry, rebuilt by
//! [`crate::trace::initial_state`]: each non-expandable segment with its live and pending blocks
//! (see [`CachingAllocator::restore_segment`]).

use rustc_hash::FxHashMap;

use super::device::ReplayDevice;
use super::driver::Alloc;
use super::{InitialHandling, ReplayError};
use crate::allocator::{BlockId, RestoredBlock};
use crate::snapshot::{Action, Snapshot, TraceEntry};

pub(super) struct Seeded {
    pub(super) handling: InitialHandling,
    pub(super) notes: Vec<String>,
}

pub(super) fn seed<D: ReplayDevice>(
    alloc: &mut Alloc<D>,
    snapshot: &Snapshot,
    device: u32,
    entries: &[TraceEntry],
    live: &mut FxHashMap<u64, BlockId>,
    pending: &mut FxHashMap<u64, BlockId>,
) -> Result<Seeded, ReplayError> {
    let init = crate::trace::initial_state(snapshot, device);
    if init.segments.iter().any(|s| s.is_expandable) {
        return Err(ReplayError::MidRunExpandable { device });
    }
    let mut handling = InitialHandling {
        starts_mid_run: true,
        estimated_sizes: init.estimated_sizes,
        reserved_bytes: init.reserved_bytes,
        allocated_bytes: init.allocated_bytes,
        ..InitialHandling::default()
    };
    let mut notes = init.notes.clone();
    let mut placed = vec![false; init.blocks.len()];
    for seg in &init.segments {
        let end = seg.addr.saturating_add(seg.size);
        // Blocks inside, in address order (initial_state lists them so).
        let inside: Vec<usize> = (0..init.blocks.len())
            .filter(|&i| init.blocks[i].addr >= seg.addr && init.blocks[i].addr < end)
            .collect();
        let mut restored = Vec::with_capacity(inside.len());
        for (k, &i) in inside.iter().enumerate() {
            let b = &init.blocks[i];
            let limit = inside
                .get(k + 1)
                .map_or(end, |&j| init.blocks[j].addr)
                .min(end);
            restored.push(RestoredBlock {
                addr: b.addr,
                size: b.size.min(limit.saturating_sub(b.addr)),
                requested: b.requested,
                pending_free: b.pending_free,
            });
        }
        let stream = inside
            .first()
            .map(|&i| init.blocks[i].stream)
            .or_else(|| {
                snapshot
                    .segments
                    .iter()
                    .find(|s| s.device == device && s.address == seg.addr)
                    .map(|s| s.stream)
            })
            .or_else(|| {
                entries
                    .iter()
                    .find(|e| e.action == Action::SegmentFree && e.addr == seg.addr)
                    .map(|e| e.stream)
            })
            .unwrap_or(0);
        // Where the segment lives on this device (a GPU puts it elsewhere): blocks keep their
        // offsets, the maps below keep the recorded addresses.
        let base = alloc
            .device_mut()
            .adopt_segment(seg.addr, seg.size)
            .map_err(|e| ReplayError::Seed {
                device,
                what: format!("segment 0x{:x} ({} bytes): {e}", seg.addr, seg.size),
            })?
            .ok_or_else(|| ReplayError::Seed {
                device,
                what: format!(
                    "segment 0x{:x} ({} bytes): the device is out of memory",
                    seg.addr, seg.size
                ),
            })?;
        for b in &mut restored {
            b.addr = b.addr.saturating_sub(seg.addr).saturating_add(base);
        }
        let ids = alloc
            .restore_segment(base, seg.size, stream, &restored)
            .map_err(|e| ReplayError::Seed {
                device,
                what: format!("segment 0x{:x} ({} bytes): {e}", seg.addr, seg.size),
            })?;
        for (&i, id) in inside.iter().zip(ids) {
            let b = &init.blocks[i];
            placed[i] = true;
            if b.pending_free {
                pending.insert(b.addr, id);
            } else {
                live.insert(b.addr, id);
            }
        }
        handling.seeded_segments += 1;
        handling.seeded_blocks += inside.len();
    }
    let lost = placed.iter().filter(|p| !**p).count();
    if lost > 0 {
        notes.push(format!(
            "{lost} blocks live before the trace lie in no known segment and were left out"
        ));
    }
    Ok(Seeded { handling, notes })
}
