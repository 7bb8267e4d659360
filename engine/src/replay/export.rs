//! A replay as a snapshot: the simulated trace and final segments in the snapshot model, so they
//! can be written as the pickle `_dump_snapshot()` writes (and opened in memory_viz) or analysed
//! like a recording.
//!
//! Each simulated event takes the time stamp of the input entry being replayed when it happened;
//! an `alloc` also takes that entry's stack, `compile_context` and `user_metadata`. A block of the
//! final segments takes the stack of the `alloc` that handed it out, a segment the stack of the
//! `alloc` that made it. The recording's stacks are shared, not copied.

use rustc_hash::FxHashMap;

use super::Replay;
use crate::snapshot::{
    Action, AllocatorSettings, Block, DeviceTrace, Segment, Snapshot, StackId, TraceEntry,
};

impl Replay {
    /// This replay as a snapshot of device [`Replay::device`], with `recorded`'s stacks. Needs
    /// the events (`ReplayOptions::record_events`); without them the trace is empty.
    pub fn to_snapshot(&self, recorded: &Snapshot) -> Snapshot {
        let input = recorded
            .traces
            .iter()
            .find(|t| t.device == self.device)
            .map_or(&[][..], |t| t.entries.as_slice());
        let origin = |at: u32| input.get(at as usize);
        let mut entries = Vec::with_capacity(self.events.len());
        // Address → stack of the alloc that last handed out a block there.
        let mut alloc_stack: FxHashMap<u64, StackId> = FxHashMap::default();
        let mut segment_stack: FxHashMap<u64, StackId> = FxHashMap::default();
        let mut last_alloc_stack = StackId::EMPTY;
        for ev in &self.events {
            let from = origin(ev.at);
            let mut e = TraceEntry {
                action: ev.action,
                addr: ev.addr,
                size: ev.size,
                stream: ev.stream,
                time_us: from.and_then(|f| f.time_us),
                frames: StackId::EMPTY,
                compile_context: Default::default(),
                user_metadata: Default::default(),
            };
            if let Some(f) = from
                && f.action == Action::Alloc
            {
                last_alloc_stack = f.frames;
                if matches!(ev.action, Action::Alloc | Action::SegmentAlloc) {
                    e.frames = f.frames;
                    e.compile_context = f.compile_context;
                    e.user_metadata = f.user_metadata;
                }
            }
            match ev.action {
                Action::Alloc => {
                    alloc_stack.insert(ev.addr, e.frames);
                }
                Action::SegmentAlloc | Action::SegmentMap => {
                    segment_stack.insert(ev.addr, last_alloc_stack);
                }
                _ => {}
            }
            entries.push(e);
        }
        let segments = self
            .final_segments
            .iter()
            .map(|s| Segment {
                device: self.device,
                address: s.address,
                total_size: s.total_size,
                allocated_size: s.allocated_size,
                active_size: s.active_size,
                requested_size: s.requested_size,
                stream: s.stream,
                segment_type: s.segment_type,
                segment_pool_id: (0, 0),
                is_expandable: s.is_expandable,
                frames: segment_stack
                    .get(&s.address)
                    .copied()
                    .unwrap_or(StackId::EMPTY),
                blocks: s
                    .blocks
                    .iter()
                    .map(|b| Block {
                        address: b.address,
                        size: b.size,
                        requested_size: b.requested_size,
                        state: b.state,
                        frames: match b.state {
                            crate::snapshot::BlockState::Inactive => StackId::EMPTY,
                            _ => alloc_stack
                                .get(&b.address)
                                .copied()
                                .unwrap_or(StackId::EMPTY),
                        },
                    })
                    .collect(),
            })
            .collect();
        let c = &self.config;
        let settings = AllocatorSettings {
            alloc_conf: c.to_string(),
            max_split_size: c.max_split_size,
            garbage_collection_threshold: c.garbage_collection_threshold.unwrap_or(0.0),
            expandable_segments: c.expandable_segments,
            roundup_power2_divisions: c.roundup_power2_divisions,
            other: Vec::new(),
        };
        Snapshot {
            segments,
            traces: vec![DeviceTrace {
                device: self.device,
                entries,
            }],
            allocator_settings: Some(settings),
            external_annotations: recorded
                .external_annotations
                .iter()
                .filter(|a| a.device == self.device)
                .cloned()
                .collect(),
            stacks: recorded.stacks.clone(),
            source: Default::default(),
            unknown_keys: Vec::new(),
        }
    }
}
