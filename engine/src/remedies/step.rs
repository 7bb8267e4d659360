//! The training step as the remedies see it: every allocation of one device's trace with its
//! phase and category (from [`crate::analysis::categories::classify_trace`]), its lifetime as
//! positions in the trace, and the step it belongs to. Remedies edit this [`Plan`] (sizes,
//! lifetimes, dropped or added allocations); [`Plan::to_snapshot`] turns it back into a trace of
//! `alloc` / `free_requested` / `free_completed` entries that the allocator replay runs, so the
//! fragmentation of the changed trace is simulated, not guessed.
//!
//! A post-mortem plan (the trace cut at the OOM) can be extended from the step's structure
//! ([`Plan::extend_post_mortem`]): the failed allocation made, the rest of the backward
//! (gradients for the parameters that have none, the forward's live allocations freed in
//! reverse order behind a gradient of each one's size), the optimizer step (AdamW's state on the
//! first step, parameter-sized temporaries), zero_grad, then the recorded part of the step once
//! more with the state live (where a full run peaks) and its rest likewise.

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

/// What [`Plan::extend_post_mortem`] added, for the notes.
#[derive(Debug, Clone)]
pub(crate) struct Extension {
    /// Phase the recording stopped in.
    pub(crate) cut_phase: Phase,
    /// Gradients added to the cut step's backward (parameters without one at the cut).
    pub(crate) gradients: usize,
    /// Allocations of the recorded step repeated as the next step.
    pub(crate) repeated: usize,
    /// Optimizer state added (bytes).
    pub(crate) state_bytes: u64,
}

impl Plan {
    /// Extends a post-mortem plan (cut at the OOM) with the rest of the step and the next one,
    /// from the step's structure: the failed allocation is made; the rest of the backward
    /// (the backward's live temporaries freed first: the failed op is done; every parameter
    /// without a gradient gets one, the later layers first, spread over the walk; what the
    /// forward left live is freed in reverse order of allocation, each after a gradient of its
    /// size is made and the previous such gradient freed); the optimizer step (Adam/AdamW: two state buffers per parameter
    /// if none exist yet, kept; one parameter-sized temporary per parameter, freed at the step's
    /// end); zero_grad (gradients freed, `set_to_none`); then the recorded part of the step once
    /// more (the optimizer state now live) up to the cut, and its rest as above. `None` when the
    /// plan is not post-mortem.
    pub(crate) fn extend_post_mortem(&mut self) -> Option<Extension> {
        if !self.post_mortem {
            return None;
        }
        let mut ext = Extension {
            cut_phase: self.last_phase,
            gradients: 0,
            repeated: 0,
            state_bytes: 0,
        };
        let cut_step = self.allocs.iter().map(|a| a.step).max().unwrap_or(0);
        let end = self.allocs.iter().map(|a| a.at).max().unwrap_or(0);
        let mut slot = slots_after(end);
        let step_start = self
            .allocs
            .iter()
            .filter(|a| a.step == cut_step && matches!(a.phase, Phase::Data | Phase::Forward))
            .map(|a| a.at)
            .min()
            .unwrap_or(end);
        // The recorded step as a template (before any change), to repeat.
        let template: Vec<PlanAlloc> = self
            .allocs
            .iter()
            .filter(|a| {
                a.step == cut_step && a.at >= step_start && a.category != Category::Parameter
            })
            .cloned()
            .collect();
        for a in self.allocs.iter_mut().filter(|a| a.failed) {
            a.failed = false;
        }
        self.finish_step(cut_step, &mut slot, &mut ext);
        let gradients = ext.gradients;
        // The next step: the recorded part again, shifted.
        let base = slot();
        let shift = base.saturating_sub(step_start);
        let step = cut_step + 1;
        let mut bounds = StepBounds::default();
        for t in &template {
            let at = t.at.saturating_add(shift);
            match t.phase {
                Phase::Forward if bounds.forward.is_none() => bounds.forward = Some(at),
                Phase::Backward if bounds.backward.is_none() => bounds.backward = Some(at),
                _ => {}
            }
            self.allocs.push(PlanAlloc {
                at,
                free: t.free.map(|f| f.saturating_add(shift)),
                step,
                failed: false,
                ..t.clone()
            });
            ext.repeated += 1;
        }
        self.steps.push(bounds);
        let last = self.allocs.iter().map(|a| a.at).max().unwrap_or(base);
        let mut slot = slots_after(last);
        self.finish_step(step, &mut slot, &mut ext);
        ext.gradients = gradients;
        Some(ext)
    }

    /// The rest of step `step` from where its allocations stop: the backward, the optimizer
    /// step, zero_grad.
    /// Adds a backward gradient for each of `grads` (size, stream, stack), one slot each;
    /// returns how many.
    fn push_gradients(
        &mut self,
        grads: Option<&[(u64, u64, StackId)]>,
        slot: &mut impl FnMut() -> Pos,
        step: usize,
    ) -> usize {
        let grads = grads.unwrap_or_default();
        for &(size, stream, frames) in grads {
            self.allocs.push(added(
                slot(),
                size,
                stream,
                frames,
                Phase::Backward,
                Category::Gradient,
                step,
            ));
        }
        grads.len()
    }

    fn finish_step(&mut self, step: usize, slot: &mut impl FnMut() -> Pos, ext: &mut Extension) {
        let params: Vec<(u64, u64, StackId)> = self
            .allocs
            .iter()
            .filter(|a| a.category == Category::Parameter && !a.added)
            .map(|a| (a.size, a.stream, a.frames))
            .collect();
        // Gradients made in this step so far, matched to parameters by size (latest first).
        let mut have: Vec<u64> = self
            .allocs
            .iter()
            .filter(|a| a.category == Category::Gradient && a.step == step)
            .map(|a| a.size)
            .collect();
        let mut missing: Vec<(u64, u64, StackId)> = Vec::new();
        for p in params.iter().rev() {
            if let Some(i) = have.iter().position(|&s| s == p.0) {
                have.swap_remove(i);
            } else {
                missing.push(*p);
            }
        }
        // Live at the cut: forward-side allocations (saved for the backward) and the
        // backward's temporaries.
        let live: Vec<usize> = (0..self.allocs.len())
            .filter(|&k| {
                self.allocs.get(k).is_some_and(|a| {
                    a.step == step
                        && a.free.is_none()
                        && a.category != Category::Parameter
                        && a.category != Category::Gradient
                        && a.category != Category::OptimizerState
                })
            })
            .collect();
        let (mut saved, backward): (Vec<usize>, Vec<usize>) = live.into_iter().partition(|&k| {
            self.allocs
                .get(k)
                .is_some_and(|a| matches!(a.phase, Phase::Data | Phase::Forward | Phase::Setup))
        });
        saved.sort_by_key(|&k| std::cmp::Reverse(self.allocs.get(k).map_or(0, |a| a.at)));
        let stream = params.first().map_or(0, |p| p.1);
        let n_saved = saved.len().max(1);
        let mut gi = 0usize;
        // The backward's live temporaries: the recorded op is done, its inputs' gradients go.
        let p = slot();
        if let Some(b) = self.steps.get_mut(step)
            && b.backward.is_none()
        {
            b.backward = Some(p);
        }
        for &b in &backward {
            if let Some(a) = self.allocs.get_mut(b) {
                a.free = Some(p);
            }
        }
        // The gradient flowing back: for each saved allocation (latest first) the gradient of
        // that tensor is made, the previous one freed, then the saved one.
        let mut flow: Option<usize> = None;
        for (j, &k) in saved.iter().enumerate() {
            // Gradients spread over the backward in proportion.
            let upto = missing.len() * (j + 1) / n_saved;
            ext.gradients += self.push_gradients(missing.get(gi..upto), slot, step);
            gi = gi.max(upto);
            let Some(&PlanAlloc { size, frames, .. }) = self.allocs.get(k) else {
                continue;
            };
            let g = self.allocs.len();
            self.allocs.push(added(
                slot(),
                size,
                stream,
                frames,
                Phase::Backward,
                Category::Temporary,
                step,
            ));
            let p = slot();
            if let Some(prev) = flow.and_then(|f| self.allocs.get_mut(f)) {
                prev.free = Some(p);
            }
            flow = Some(g);
            if let Some(a) = self.allocs.get_mut(k) {
                a.free = Some(p);
            }
        }
        let p = slot();
        if let Some(prev) = flow.and_then(|f| self.allocs.get_mut(f)) {
            prev.free = Some(p);
        }
        ext.gradients += self.push_gradients(missing.get(gi..), slot, step);
        // Optimizer step.
        let has_state = self
            .allocs
            .iter()
            .any(|a| a.category == Category::OptimizerState);
        let mut temps: Vec<usize> = Vec::new();
        let first = slot();
        if let Some(b) = self.steps.get_mut(step)
            && b.after.is_none()
        {
            b.after = Some(first);
        }
        for &(size, _, frames) in &params {
            if !has_state {
                for _ in 0..2 {
                    self.allocs.push(added(
                        slot(),
                        size,
                        stream,
                        frames,
                        Phase::Optimizer,
                        Category::OptimizerState,
                        step,
                    ));
                    ext.state_bytes += size;
                }
            }
        }
        for &(size, _, frames) in &params {
            temps.push(self.allocs.len());
            self.allocs.push(added(
                slot(),
                size,
                stream,
                frames,
                Phase::Optimizer,
                Category::Temporary,
                step,
            ));
        }
        let p = slot();
        for k in temps {
            if let Some(a) = self.allocs.get_mut(k) {
                a.free = Some(p);
            }
        }
        // zero_grad(set_to_none=True).
        let p = slot();
        for a in self.allocs.iter_mut() {
            if a.category == Category::Gradient && a.step == step && a.free.is_none() {
                a.free = Some(p);
            }
        }
    }
}

/// An allocation of the extrapolated continuation, live until freed.
/// Positions for inserted events after position `end`: one entry slot each, in order.
fn slots_after(end: Pos) -> impl FnMut() -> Pos {
    let mut next: Pos = (end / SLOT + 1).saturating_mul(SLOT).saturating_add(MID);
    move || {
        let p = next;
        next = next.saturating_add(SLOT);
        p
    }
}

fn added(
    at: Pos,
    size: u64,
    stream: u64,
    frames: StackId,
    phase: Phase,
    category: Category,
    step: usize,
) -> PlanAlloc {
    PlanAlloc {
        at,
        free: None,
        size,
        stream,
        frames,
        phase,
        category,
        step,
        dropped: false,
        added: true,
        failed: false,
    }
}
