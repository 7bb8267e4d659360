//! The training step as the remedies see it: every allocation of one device's trace with its
//! phase and category (from [`crate::analysis::categories::classify_trace`]), its lifetime as
//! positions in the trace, and the step it belongs to. Remedies edit this [`Plan`] (sizes,
//! lifetimes, dropped or added allocations); [`Plan::to_snapshot`] turns it back into a trace of
//! `alloc` / `free_requested` / `free_completed` entries that the allocator replay runs, so the
//! fragmentation of the changed trace is simulated, not guessed.

use rustc_hash::FxHashSet;

use crate::analysis::categories::classify_trace;
use crate::analysis::{Category, Phase};
use crate::snapshot::{Action, DeviceTrace, Frame, Snapshot, StackId, TraceEntry};

/// Position of an event in the planned trace: `entry index × SLOT + sub-position`; recorded
/// events sit at [`MID`] of their entry's slot, inserted ones before or after.
pub(crate) type Pos = u64;

/// Width of one trace entry's slot of positions.
pub(crate) const SLOT: u64 = 1 << 20;
/// Sub-position of the recorded events.
pub(crate) const MID: u64 = SLOT / 2;

/// The position of the recorded entry `index`.
pub(crate) fn pos_of(index: usize) -> Pos {
    (index as u64).saturating_mul(SLOT).saturating_add(MID)
}

/// The trace entry a position belongs to.
pub(crate) fn entry_of(pos: Pos) -> usize {
    usize::try_from(pos / SLOT).unwrap_or(usize::MAX)
}

/// One allocation of the plan.
#[derive(Debug, Clone)]
pub(crate) struct PlanAlloc {
    /// When it is allocated.
    pub(crate) at: Pos,
    /// When it is freed (`None`: never).
    pub(crate) free: Option<Pos>,
    /// Requested bytes.
    pub(crate) size: u64,
    /// Stream.
    pub(crate) stream: u64,
    /// Stack.
    pub(crate) frames: StackId,
    /// Phase of the program when it was made.
    pub(crate) phase: Phase,
    /// What it is for.
    pub(crate) category: Category,
    /// Training step (0-based; counts forward passes; setup is step 0 too).
    pub(crate) step: usize,
    /// Removed by a remedy.
    pub(crate) dropped: bool,
    /// Made by a remedy (not in the recording).
    pub(crate) added: bool,
    /// The allocation that failed with the recorded OOM (post-mortem traces).
    pub(crate) failed: bool,
}

/// Where each step's phases begin, as positions.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepBounds {
    /// First forward allocation.
    pub(crate) forward: Option<Pos>,
    /// First backward allocation.
    pub(crate) backward: Option<Pos>,
    /// First allocation after the backward (optimizer step, zero_grad, clipping).
    pub(crate) after: Option<Pos>,
    /// Time of the first forward allocation.
    pub(crate) forward_us: Option<i64>,
    /// Time of the first backward allocation.
    pub(crate) backward_us: Option<i64>,
    /// Time of the first allocation after the backward.
    pub(crate) after_us: Option<i64>,
}

/// The allocations of one device's trace, editable.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Device ordinal.
    pub(crate) device: u32,
    /// Allocations in order of `at` as recorded (added ones are appended).
    pub(crate) allocs: Vec<PlanAlloc>,
    /// Steps found.
    pub(crate) steps: Vec<StepBounds>,
    /// The trace ends at an uncaught OOM.
    pub(crate) post_mortem: bool,
    /// Phase at the end of the trace.
    pub(crate) last_phase: Phase,
    /// Requested sizes of the parameters.
    pub(crate) param_sizes: FxHashSet<u64>,
    /// Time stamps of the recorded entries.
    times: Vec<Option<i64>>,
}

/// The device whose trace the remedies work on: the one with the most entries.
pub(crate) fn main_device(snapshot: &Snapshot) -> Option<u32> {
    snapshot
        .traces
        .iter()
        .filter(|t| !t.entries.is_empty())
        .max_by_key(|t| t.entries.len())
        .map(|t| t.device)
}

/// Whether the trace ends with an `oom` entry after which nothing is allocated.
pub(crate) fn ends_in_oom(entries: &[TraceEntry]) -> Option<usize> {
    let last_oom = entries.iter().rposition(|e| e.action == Action::Oom)?;
    let alloc_after = entries
        .get(last_oom..)
        .unwrap_or(&[])
        .iter()
        .any(|e| e.action == Action::Alloc);
    (!alloc_after).then_some(last_oom)
}

impl Plan {
    /// Builds the plan of `device`'s trace.
    pub(crate) fn build(snapshot: &Snapshot, device: u32) -> Plan {
        let entries: &[TraceEntry] = snapshot
            .traces
            .iter()
            .find(|t| t.device == device)
            .map_or(&[], |t| t.entries.as_slice());
        let classified = classify_trace(snapshot, device);
        let mut allocs = Vec::with_capacity(classified.len() + 1);
        let mut param_sizes = FxHashSet::default();
        let mut step = 0usize;
        let mut prev_phase = Phase::Setup;
        let mut steps: Vec<StepBounds> = vec![StepBounds::default()];
        let mut last_phase = Phase::Unknown;
        for c in &classified {
            let entry = c.alloc_index.and_then(|i| entries.get(i));
            let at = c.alloc_index.map_or(0, pos_of);
            let time = entry.and_then(|e| e.time_us);
            if c.category == Category::Parameter {
                param_sizes.insert(c.requested);
            }
            if c.phase == Phase::Forward && prev_phase != Phase::Forward {
                let started = steps.last().is_some_and(|s| s.forward.is_some());
                if started {
                    step += 1;
                    steps.push(StepBounds::default());
                }
            }
            if let Some(b) = steps.last_mut() {
                match c.phase {
                    Phase::Forward if b.forward.is_none() => {
                        b.forward = Some(at);
                        b.forward_us = time;
                    }
                    Phase::Backward if b.backward.is_none() && b.forward.is_some() => {
                        b.backward = Some(at);
                        b.backward_us = time;
                    }
                    Phase::AfterBackward | Phase::Optimizer | Phase::ZeroGrad
                        if b.after.is_none() && b.backward.is_some() =>
                    {
                        b.after = Some(at);
                        b.after_us = time;
                    }
                    _ => {}
                }
            }
            if c.phase != Phase::Unknown {
                prev_phase = c.phase;
                last_phase = c.phase;
            }
            allocs.push(PlanAlloc {
                at,
                free: c.free_index.map(pos_of),
                size: c.requested,
                stream: entry.map_or(0, |e| e.stream),
                frames: c.frames,
                phase: c.phase,
                category: c.category,
                step,
                dropped: false,
                added: false,
                failed: false,
            });
        }
        let oom = ends_in_oom(entries);
        if let Some(i) = oom
            && let Some(e) = entries.get(i)
        {
            allocs.push(PlanAlloc {
                at: pos_of(i),
                free: None,
                size: e.size,
                stream: e.stream,
                frames: e.frames,
                phase: last_phase,
                category: Category::Temporary,
                step,
                dropped: false,
                added: false,
                failed: true,
            });
        }
        Plan {
            device,
            allocs,
            steps,
            post_mortem: oom.is_some(),
            last_phase,
            param_sizes,
            times: entries.iter().map(|e| e.time_us).collect(),
        }
    }

    /// Time stamp for a position.
    fn time_at(&self, pos: Pos) -> Option<i64> {
        let i = entry_of(pos).min(self.times.len().saturating_sub(1));
        self.times.get(i).copied().flatten()
    }

    /// The plan as a snapshot whose single trace holds `alloc`, `free_requested` and
    /// `free_completed` entries only (the replay makes the segments), with `snapshot`'s stacks.
    pub(crate) fn to_snapshot(&self, snapshot: &Snapshot) -> Snapshot {
        // (position, order at equal position: frees first, id, is_alloc)
        let mut events: Vec<(Pos, u8, usize)> = Vec::with_capacity(self.allocs.len() * 2);
        for (k, a) in self.allocs.iter().enumerate() {
            if a.dropped {
                continue;
            }
            events.push((a.at, 1, k));
            if let Some(f) = a.free {
                events.push((f.max(a.at.saturating_add(1)), 0, k));
            }
        }
        events.sort_unstable();
        let mut entries = Vec::with_capacity(events.len() * 3 / 2);
        for (pos, kind, k) in events {
            let Some(a) = self.allocs.get(k) else {
                continue;
            };
            let addr = ((k as u64) + 1) << 12;
            let base = TraceEntry {
                action: Action::Alloc,
                addr,
                size: a.size.max(1),
                stream: a.stream,
                time_us: self.time_at(pos),
                frames: StackId::EMPTY,
                compile_context: Default::default(),
                user_metadata: Default::default(),
            };
            if kind == 1 {
                entries.push(TraceEntry {
                    frames: a.frames,
                    ..base
                });
            } else {
                entries.push(TraceEntry {
                    action: Action::FreeRequested,
                    ..base
                });
                entries.push(TraceEntry {
                    action: Action::FreeCompleted,
                    ..base
                });
            }
        }
        Snapshot {
            segments: Vec::new(),
            traces: vec![DeviceTrace {
                device: self.device,
                entries,
            }],
            allocator_settings: snapshot.allocator_settings.clone(),
            external_annotations: snapshot.external_annotations.clone(),
            stacks: snapshot.stacks.clone(),
            source: snapshot.source.clone(),
            unknown_keys: Vec::new(),
        }
    }
}

/// Files of libraries (PyTorch, site-packages) rather than the user's code.
pub(crate) fn is_library(file: &str) -> bool {
    file.contains("/torch/")
        || file.contains("site-packages")
        || file.contains("dist-packages")
        || file.contains("\\torch\\")
        || !file.ends_with(".py")
}

/// The Python frames of a stack, innermost first.
pub(crate) fn py_frames(snapshot: &Snapshot, id: StackId) -> impl Iterator<Item = &Frame> {
    snapshot
        .stacks
        .frames(id)
        .iter()
        .filter(|f| snapshot.stacks.str(f.filename).ends_with(".py"))
}

/// The first frame of the user's code (outside libraries), innermost first.
pub(crate) fn first_user_frame(snapshot: &Snapshot, id: StackId) -> Option<Frame> {
    py_frames(snapshot, id)
        .find(|f| !is_library(snapshot.stacks.str(f.filename)))
        .copied()
}
