//! Comparing the simulated events with the recorded trace, as they are emitted: one cursor over
//! the recorded entries an allocator emits (everything but `snapshot` and annotations) for the
//! whole trace, one over the recorded segment entries for the segment-only check. The first
//! difference of each kind is kept; after it the full comparison stops (the two sequences can
//! no longer be aligned), the segment comparison goes on with its own cursor.

use super::{Divergence, DivergenceKind, ReplayEvent};
use crate::snapshot::{Action, TraceEntry};

fn comparable(a: Action) -> bool {
    !matches!(a, Action::Snapshot | Action::UserDefined | Action::Unknown)
}

fn is_segment(a: Action) -> bool {
    matches!(
        a,
        Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap
    )
}

fn recorded(index: usize, e: &TraceEntry) -> ReplayEvent {
    ReplayEvent {
        at: u32::try_from(index).unwrap_or(u32::MAX),
        action: e.action,
        addr: e.addr,
        size: e.size,
        stream: e.stream,
    }
}

pub(super) struct Comparator<'a> {
    entries: &'a [TraceEntry],
    /// Indices of the recorded segment entries.
    segment_entries: &'a [u32],
    /// Next recorded entry to compare (full comparison).
    pos: usize,
    /// Next recorded segment entry (position in `segment_entries`).
    seg_pos: usize,
    pub(super) trace_ok: bool,
    pub(super) segments_ok: bool,
    pub(super) first: Option<Divergence>,
}

impl<'a> Comparator<'a> {
    pub(super) fn new(entries: &'a [TraceEntry], segment_entries: &'a [u32]) -> Comparator<'a> {
        Comparator {
            entries,
            segment_entries,
            pos: 0,
            seg_pos: 0,
            trace_ok: true,
            segments_ok: true,
            first: None,
        }
    }

    /// Records a divergence if it is the first.
    pub(super) fn diverge(&mut self, d: Divergence) {
        self.trace_ok = false;
        if self.first.is_none() {
            self.first = Some(d);
        }
    }

    /// One simulated event.
    #[inline]
    pub(super) fn feed(&mut self, e: &ReplayEvent) {
        if self.trace_ok {
            while self.pos < self.entries.len() && !comparable(self.entries[self.pos].action) {
                self.pos += 1;
            }
            match self.entries.get(self.pos) {
                Some(r) => {
                    let same = r.action == e.action
                        && r.size == e.size
                        && (e.action == Action::Oom || r.addr == e.addr);
                    if !same {
                        let what = format!(
                            "recorded {} 0x{:x} {} bytes, simulated {} 0x{:x} {} bytes",
                            r.action.as_str(),
                            r.addr,
                            r.size,
                            e.action.as_str(),
                            e.addr,
                            e.size
                        );
                        self.diverge(Divergence {
                            event_index: self.pos,
                            kind: DivergenceKind::Event,
                            expected: Some(recorded(self.pos, r)),
                            got: Some(*e),
                            what,
                        });
                    }
                    self.pos += 1;
                }
                None => {
                    let what = format!(
                        "simulated {} 0x{:x} {} bytes after the recorded trace ended",
                        e.action.as_str(),
                        e.addr,
                        e.size
                    );
                    self.diverge(Divergence {
                        event_index: self.entries.len(),
                        kind: DivergenceKind::ExtraEvent,
                        expected: None,
                        got: Some(*e),
                        what,
                    });
                }
            }
        }
        if self.segments_ok && is_segment(e.action) {
            let r = self
                .segment_entries
                .get(self.seg_pos)
                .and_then(|&i| self.entries.get(i as usize));
            match r {
                Some(r) if r.action == e.action && r.size == e.size => self.seg_pos += 1,
                _ => self.segments_ok = false,
            }
        }
    }

    /// The replay processed entries up to `last` (inclusive): recorded events up to there that
    /// were never matched are missing.
    pub(super) fn finish(&mut self, last: usize) {
        let end = (last + 1).min(self.entries.len());
        if self.trace_ok {
            while self.pos < end {
                let r = &self.entries[self.pos];
                if comparable(r.action) {
                    let what = format!(
                        "recorded {} 0x{:x} {} bytes was not simulated",
                        r.action.as_str(),
                        r.addr,
                        r.size
                    );
                    let d = Divergence {
                        event_index: self.pos,
                        kind: DivergenceKind::MissingEvent,
                        expected: Some(recorded(self.pos, r)),
                        got: None,
                        what,
                    };
                    self.diverge(d);
                    break;
                }
                self.pos += 1;
            }
        }
        if self
            .segment_entries
            .get(self.seg_pos)
            .is_some_and(|&i| (i as usize) < end)
        {
            self.segments_ok = false;
        }
    }
}
