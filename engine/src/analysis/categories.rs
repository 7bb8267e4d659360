//! What each allocation is for: parameter, gradient, optimizer state, activation, temporary,
//! input or unknown. Owns the training-phase model (setup, data, forward, backward, optimizer
//! step) and the per-allocation rules; it reads allocation records and stacks, never the trace's
//! statistics.
//!
//! Three kinds of evidence, in this order:
//!
//! 1. **Stacks** (classified once per interned stack): `torch/optim/` frames → optimizer step;
//!    `zero_grad`; `torch/utils/checkpoint.py` `recompute_fn`/`unpack_hook` → recomputation in
//!    backward; `torch/autograd` `backward`/`_make_grads`, `Tensor.backward` or a C++
//!    `autograd::Engine` frame → backward; nn.Module `_apply`/`convert`/`to`, `reset_parameters`,
//!    `torch/nn/init.py`, HF `post_init`/`_init_weights` → model setup; `_call_impl`/`forward` →
//!    forward.
//! 2. **Annotations**: `Optimizer.step#…` and `Optimizer.zero_grad#…` START/END times from
//!    `external_annotations` mark the optimizer phase even without stacks.
//! 3. **Order**: allocations without Python frames (the autograd engine's thread records none
//!    with `stacks="python"`) belong to the backward when they follow one; user code after an
//!    optimizer step is data loading, user code during the forward (the loss) is forward.
//!
//! Then **lifetime** splits each phase: an allocation freed before its phase ends (the next
//! phase's first allocation, or the step's END annotation) is a temporary; one that outlives it
//! is what the phase produces — activations from the forward, gradients from the backward, state
//! from the optimizer step, an input batch from data loading.

use rustc_hash::FxHashSet;
use serde::Serialize;

use super::{AllocRecord, DeviceRun, NEVER};
use crate::snapshot::{AnnotationStage, Snapshot, StackId};

/// What an allocation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model parameters and buffers.
    Parameter,
    /// Parameter gradients.
    Gradient,
    /// Optimizer state (Adam moments, momentum buffers).
    OptimizerState,
    /// Forward outputs kept for the backward.
    Activation,
    /// Freed within the phase that made it.
    Temporary,
    /// Input batches.
    Input,
    /// No evidence either way.
    Unknown,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 7] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Temporary,
        Category::Input,
        Category::Unknown,
    ];

    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::Unknown => "unknown",
        }
    }

    /// Why allocations land here, in one line.
    pub fn rule(self) -> &'static str {
        match self {
            Category::Parameter => {
                "allocated while building the model: nn.Module _apply/to/cuda, reset_parameters, torch.nn.init or HF init/from_pretrained in the stack"
            }
            Category::Gradient => {
                "allocated by the autograd backward, of a parameter's size, and kept past the backward's end (until the optimizer step / zero_grad)"
            }
            Category::OptimizerState => {
                "allocated under torch/optim (or inside an Optimizer.step annotation) and kept past the end of that step"
            }
            Category::Activation => {
                "allocated in the forward (module forward or loss) and kept past its end, i.e. saved for backward; or recomputed by activation checkpointing"
            }
            Category::Temporary => {
                "freed before the phase that allocated it (data, forward, backward, optimizer step) ended"
            }
            Category::Input => {
                "allocated by user code between optimizer step and forward (data loading) and kept into the forward"
            }
            Category::Unknown => {
                "no Python frames and no phase to infer one from (e.g. blocks live before recording started), or made in forward/backward and kept past its phase without being an activation or a parameter-sized gradient (library workspaces such as cuBLAS's, caches)"
            }
        }
    }
}

/// The training phase an allocation was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Live before the trace's first entry.
    BeforeTrace,
    /// Building the model.
    Setup,
    /// User code between steps (data loading).
    Data,
    /// Forward pass and loss.
    Forward,
    /// Autograd backward.
    Backward,
    /// User code after the backward, before the optimizer step (e.g. gradient clipping).
    AfterBackward,
    /// Optimizer step.
    Optimizer,
    /// `Optimizer.zero_grad`.
    ZeroGrad,
    /// Unknown.
    Unknown,
}

/// Bytes and count of one category.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryTotal {
    /// Σ block sizes (what `allocated_bytes` counts, unsplit remainders included).
    pub bytes: u64,
    /// Σ requested sizes (what the tensors asked for).
    pub requested_bytes: u64,
    /// Allocations.
    pub count: u64,
    /// Why allocations land here.
    pub rule: &'static str,
}

/// Allocations by category. The sum of `bytes` is the allocated bytes at that moment.
#[derive(Debug, Clone, Serialize)]
pub struct Categories {
    /// Model parameters and buffers.
    pub parameter: CategoryTotal,
    /// Parameter gradients.
    pub gradient: CategoryTotal,
    /// Optimizer state.
    pub optimizer_state: CategoryTotal,
    /// Saved activations.
    pub activation: CategoryTotal,
    /// Short-lived buffers.
    pub temporary: CategoryTotal,
    /// Input batches.
    pub input: CategoryTotal,
    /// Unclassified.
    pub unknown: CategoryTotal,
}

impl Default for Categories {
    fn default() -> Self {
        let t = |c: Category| CategoryTotal {
            bytes: 0,
            requested_bytes: 0,
            count: 0,
            rule: c.rule(),
        };
        Categories {
            parameter: t(Category::Parameter),
            gradient: t(Category::Gradient),
            optimizer_state: t(Category::OptimizerState),
            activation: t(Category::Activation),
            temporary: t(Category::Temporary),
            input: t(Category::Input),
            unknown: t(Category::Unknown),
        }
    }
}

impl Categories {
    /// The total of one category.
    pub fn get(&self, c: Category) -> &CategoryTotal {
        match c {
            Category::Parameter => &self.parameter,
            Category::Gradient => &self.gradient,
            Category::OptimizerState => &self.optimizer_state,
            Category::Activation => &self.activation,
            Category::Temporary => &self.temporary,
            Category::Input => &self.input,
            Category::Unknown => &self.unknown,
        }
    }

    fn get_mut(&mut self, c: Category) -> &mut CategoryTotal {
        match c {
            Category::Parameter => &mut self.parameter,
            Category::Gradient => &mut self.gradient,
            Category::OptimizerState => &mut self.optimizer_state,
            Category::Activation => &mut self.activation,
            Category::Temporary => &mut self.temporary,
            Category::Input => &mut self.input,
            Category::Unknown => &mut self.unknown,
        }
    }

    /// Σ bytes over all categories.
    pub fn total_bytes(&self) -> u64 {
        Category::ALL
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(self.get(*c).bytes))
    }
}

// Stack flags.
const COMPUTED: u16 = 1;
const PY: u16 = 1 << 1;
const OPTIM: u16 = 1 << 2;
const OPT_INIT: u16 = 1 << 3;
const BACKWARD: u16 = 1 << 4;
const RECOMPUTE: u16 = 1 << 5;
const FORWARD: u16 = 1 << 6;
const PARAM_INIT: u16 = 1 << 7;
const ZERO_GRAD: u16 = 1 << 8;

/// `file` contains `pat` (written with `/`), on POSIX or Windows paths.
fn path_has(file: &str, pat: &str) -> bool {
    file.contains(pat) || (file.contains('\\') && file.replace('\\', "/").contains(pat))
}

/// The evidence one stack carries.
fn classify_stack(snapshot: &Snapshot, id: StackId) -> u16 {
    let mut f = COMPUTED;
    for fr in snapshot.stacks.frames(id) {
        let file = snapshot.stacks.str(fr.filename);
        let name = snapshot.stacks.str(fr.name);
        if !file.ends_with(".py") {
            if name.contains("autograd::Engine") {
                f |= BACKWARD;
            }
            continue;
        }
        f |= PY;
        if name == "zero_grad" {
            f |= ZERO_GRAD;
        }
        if path_has(file, "torch/optim/") {
            f |= OPTIM;
            if matches!(name, "_init_group" | "_init_state") {
                f |= OPT_INIT;
            }
        }
        if path_has(file, "torch/amp/grad_scaler.py")
            && matches!(
                name,
                "unscale_" | "_unscale_grads_" | "step" | "update" | "_maybe_opt_step"
            )
        {
            f |= OPTIM;
        }
        if path_has(file, "torch/utils/checkpoint.py")
            && matches!(name, "recompute_fn" | "unpack_hook" | "backward")
        {
            f |= RECOMPUTE;
        }
        if (path_has(file, "torch/autograd/")
            && matches!(
                name,
                "backward" | "grad" | "_engine_run_backward" | "_make_grads"
            ))
            || (path_has(file, "torch/_tensor.py") && name == "backward")
        {
            f |= BACKWARD;
        }
        let module_py = path_has(file, "torch/nn/modules/module.py");
        if (module_py && matches!(name, "_call_impl" | "_wrapped_call_impl"))
            || name == "forward"
            || name.starts_with("_forward")
        {
            f |= FORWARD;
        }
        if (module_py
            && matches!(
                name,
                "_apply"
                    | "convert"
                    | "to"
                    | "cuda"
                    | "to_empty"
                    | "half"
                    | "float"
                    | "double"
                    | "bfloat16"
                    | "type"
                    | "load_state_dict"
                    | "_load_from_state_dict"
                    | "register_parameter"
                    | "register_buffer"
            ))
            || path_has(file, "torch/nn/init.py")
            || path_has(file, "torch/nn/parameter.py")
            || matches!(
                name,
                "reset_parameters"
                    | "_init_weights"
                    | "init_weights"
                    | "initialize_weights"
                    | "_initialize_weights"
                    | "post_init"
                    | "from_pretrained"
                    | "_load_pretrained_model"
                    | "tie_weights"
            )
            || (file.ends_with("modeling_utils.py") && name == "to")
        {
            f |= PARAM_INIT;
        }
    }
    f
}

/// Stack flags, computed once per interned stack.
struct StackClasses {
    flags: Vec<u16>,
}

impl StackClasses {
    fn new(snapshot: &Snapshot) -> StackClasses {
        StackClasses {
            flags: vec![0; snapshot.stacks.stack_count()],
        }
    }

    fn get(&mut self, snapshot: &Snapshot, id: StackId) -> u16 {
        let k = id.0 as usize;
        match self.flags.get(k) {
            Some(&f) if f & COMPUTED != 0 => f,
            Some(_) => {
                let f = classify_stack(snapshot, id);
                if let Some(slot) = self.flags.get_mut(k) {
                    *slot = f;
                }
                f
            }
            None => classify_stack(snapshot, id),
        }
    }
}

/// `Optimizer.step` / `zero_grad` regions of one device, as (start, end) microseconds.
#[derive(Debug, Default)]
struct Regions {
    steps: Vec<(i64, i64)>,
    zero_grads: Vec<(i64, i64)>,
}

fn regions(snapshot: &Snapshot, device: u32) -> Regions {
    let mut open: Vec<(&str, i64)> = Vec::new();
    let mut out = Regions::default();
    for a in snapshot
        .external_annotations
        .iter()
        .filter(|a| a.device == device)
    {
        let Some(t) = a.time_us else { continue };
        match a.stage {
            AnnotationStage::Start => open.push((a.name.as_str(), t)),
            AnnotationStage::End => {
                if let Some(k) = open.iter().rposition(|(n, _)| *n == a.name) {
                    let (name, start) = open.remove(k);
                    if name.starts_with("Optimizer.step") {
                        out.steps.push((start, t));
                    } else if name.starts_with("Optimizer.zero_grad") {
                        out.zero_grads.push((start, t));
                    }
                }
            }
        }
    }
    out.steps.sort_unstable();
    out.zero_grads.sort_unstable();
    out
}

/// The region holding `t`, if any.
fn region_at(regions: &[(i64, i64)], t: i64) -> Option<(i64, i64)> {
    let k = regions.partition_point(|(s, _)| *s <= t);
    let r = *regions.get(k.checked_sub(1)?)?;
    (t <= r.1).then_some(r)
}

/// [`region_at`] for times that mostly increase: walks forward from the last answer.
#[derive(Debug)]
struct RegionCursor<'r> {
    regions: &'r [(i64, i64)],
    /// Index of the first region whose start is after the last time asked.
    next: usize,
    last: i64,
}

impl<'r> RegionCursor<'r> {
    fn new(regions: &'r [(i64, i64)]) -> RegionCursor<'r> {
        RegionCursor {
            regions,
            next: 0,
            last: i64::MIN,
        }
    }

    fn at(&mut self, t: i64) -> Option<(i64, i64)> {
        if self.regions.is_empty() {
            return None;
        }
        if t < self.last {
            return region_at(self.regions, t);
        }
        self.last = t;
        while self.regions.get(self.next).is_some_and(|(s, _)| *s <= t) {
            self.next += 1;
        }
        let r = *self.regions.get(self.next.checked_sub(1)?)?;
        (t <= r.1).then_some(r)
    }
}

/// A run of consecutive allocations of one phase.
#[derive(Debug, Clone, Copy)]
struct Instance {
    phase: Phase,
    /// State at which the phase ends: the next phase's first allocation, or the END annotation.
    end: u32,
}

const NO_INSTANCE: u32 = u32::MAX;

/// Phase and category of every allocation record of a device.
#[derive(Debug)]
pub(crate) struct Classified {
    pub(crate) categories: Vec<Category>,
    /// The phase the program was in after each record (unknown-phase records inherit it).
    contexts: Vec<Phase>,
    start: Phase,
}

/// Classifies every allocation of a device run.
pub(crate) fn classify(snapshot: &Snapshot, run: &DeviceRun<'_>) -> Classified {
    let records = &run.records;
    let regions = regions(snapshot, run.device);
    let mut classes = StackClasses::new(snapshot);
    let state_after = |t: i64| -> u32 {
        let k = run
            .entries
            .partition_point(|e| e.time_us.is_some_and(|x| x <= t));
        u32::try_from(k).unwrap_or(NEVER - 1)
    };

    let start = if run.initial.starts_mid_run {
        Phase::Unknown
    } else {
        Phase::Setup
    };
    let mut machine = start;
    let mut steps = RegionCursor::new(&regions.steps);
    let mut zero_grads = RegionCursor::new(&regions.zero_grads);
    let mut instances: Vec<Instance> = Vec::new();
    let mut instance_starts: Vec<u32> = Vec::new();
    let mut current: Option<usize> = None;
    let mut phases = Vec::with_capacity(records.len());
    let mut contexts = Vec::with_capacity(records.len());
    let mut instance_of = Vec::with_capacity(records.len());
    let mut flags_of = Vec::with_capacity(records.len());
    let mut recomputed = Vec::with_capacity(records.len());

    for r in records {
        let f = classes.get(snapshot, r.frames);
        flags_of.push(f);
        if r.is_initial() {
            phases.push(Phase::BeforeTrace);
            contexts.push(machine);
            instance_of.push(NO_INSTANCE);
            recomputed.push(false);
            continue;
        }
        let time_us = r.time_us(run.entries);
        let step = time_us.and_then(|t| steps.at(t));
        let zero = time_us.and_then(|t| zero_grads.at(t));
        let mut recompute = false;
        let phase = if zero.is_some() || f & ZERO_GRAD != 0 {
            Phase::ZeroGrad
        } else if step.is_some() || f & OPTIM != 0 {
            Phase::Optimizer
        } else if f & RECOMPUTE != 0 {
            recompute = true;
            Phase::Backward
        } else if f & BACKWARD != 0 {
            Phase::Backward
        } else if f & PY == 0 {
            if machine == Phase::Backward {
                Phase::Backward
            } else {
                Phase::Unknown
            }
        } else if f & PARAM_INIT != 0 {
            Phase::Setup
        } else if f & FORWARD != 0 {
            Phase::Forward
        } else {
            match machine {
                Phase::Setup | Phase::Data | Phase::Optimizer | Phase::ZeroGrad => Phase::Data,
                Phase::Forward => Phase::Forward,
                Phase::Backward | Phase::AfterBackward => Phase::AfterBackward,
                Phase::BeforeTrace | Phase::Unknown => Phase::Unknown,
            }
        };
        if phase != Phase::Unknown {
            machine = phase;
            let same = current
                .and_then(|c| instances.get(c))
                .is_some_and(|i| i.phase == phase);
            if !same {
                if let Some(i) = current.and_then(|c| instances.get_mut(c)) {
                    i.end = i.end.min(r.born);
                }
                let end = match (phase, step) {
                    (Phase::Optimizer, Some((_, end_t))) => state_after(end_t).max(r.born),
                    _ => NEVER,
                };
                instances.push(Instance { phase, end });
                instance_starts.push(r.born);
                current = Some(instances.len() - 1);
            }
        }
        phases.push(phase);
        contexts.push(machine);
        instance_of.push(current.map_or(NO_INSTANCE, |c| u32::try_from(c).unwrap_or(NO_INSTANCE)));
        recomputed.push(recompute);
    }

    // Requested sizes of parameters: a backward cut short by the end of the trace keeps only
    // buffers of those sizes as gradients.
    let mut param_sizes: FxHashSet<u64> = FxHashSet::default();
    for (k, r) in records.iter().enumerate() {
        let is_param = match phases.get(k) {
            Some(Phase::Setup) => true,
            Some(Phase::BeforeTrace) => flags_of.get(k).is_some_and(|f| f & PARAM_INIT != 0),
            _ => false,
        };
        if is_param {
            param_sizes.insert(r.requested);
        }
    }

    // Starts of forward phases: what forward/backward makes and still holds when the forward after
    // next begins is no activation or gradient of its step but a persistent buffer.
    let forward_starts: Vec<u32> = instance_starts
        .iter()
        .zip(&instances)
        .filter(|(_, i)| i.phase == Phase::Forward)
        .map(|(s, _)| *s)
        .collect();
    let persistent = |r: &AllocRecord| -> bool {
        let k = forward_starts.partition_point(|s| *s <= r.born);
        forward_starts
            .get(k + 1)
            .is_some_and(|&after_next| r.freed > after_next)
    };

    let mut categories = Vec::with_capacity(records.len());
    for (k, r) in records.iter().enumerate() {
        let phase = phases.get(k).copied().unwrap_or(Phase::Unknown);
        let f = flags_of.get(k).copied().unwrap_or(0);
        let inst = instance_of
            .get(k)
            .and_then(|&i| instances.get(i as usize))
            .copied();
        let end = inst.map_or(NEVER, |i| i.end);
        let freed_within = r.freed != NEVER && r.freed <= end;
        let open = end == NEVER;
        let c = match phase {
            Phase::BeforeTrace => before_trace(f),
            Phase::Setup => Category::Parameter,
            Phase::Data => {
                if freed_within {
                    Category::Temporary
                } else {
                    Category::Input
                }
            }
            Phase::Forward => {
                if freed_within {
                    Category::Temporary
                } else if persistent(r) {
                    Category::Unknown
                } else {
                    Category::Activation
                }
            }
            Phase::Backward => {
                let param_sized = param_sizes.contains(&r.requested);
                if recomputed.get(k).copied().unwrap_or(false) {
                    Category::Activation
                } else if freed_within {
                    Category::Temporary
                } else if param_sized {
                    Category::Gradient
                } else if open {
                    // Still in this backward when the trace ended: a gradient in flight.
                    Category::Temporary
                } else if param_sizes.is_empty() && !persistent(r) {
                    // No parameter sizes to compare with: lifetime alone.
                    Category::Gradient
                } else {
                    // Outlived the backward but has no parameter's size: a workspace or cache.
                    Category::Unknown
                }
            }
            Phase::AfterBackward => {
                if freed_within {
                    Category::Temporary
                } else {
                    Category::Unknown
                }
            }
            Phase::Optimizer => {
                if freed_within {
                    Category::Temporary
                } else if !open || f & OPT_INIT != 0 {
                    Category::OptimizerState
                } else {
                    Category::Temporary
                }
            }
            Phase::ZeroGrad => {
                if freed_within {
                    Category::Temporary
                } else {
                    Category::Gradient
                }
            }
            Phase::Unknown => Category::Unknown,
        };
        categories.push(c);
    }

    Classified {
        categories,
        contexts,
        start,
    }
}

/// One allocation of a device's trace, as [`classify_trace`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClassifiedAlloc {
    /// Index of its `alloc` entry in the device's trace (`None`: live before the trace).
    pub alloc_index: Option<usize>,
    /// Index of the entry that freed it (`free_requested`, or `free_completed` without one);
    /// `None` if it is never freed in the trace.
    pub free_index: Option<usize>,
    /// Requested bytes.
    pub requested: u64,
    /// Block bytes.
    pub size: u64,
    /// Allocation stack.
    pub frames: StackId,
    /// The phase the program was in after it was made.
    pub phase: Phase,
    /// What it is for.
    pub category: Category,
}

/// Every allocation of `device`'s trace with its phase and category, in order of allocation (the
/// rules of [`Category`]; the walk of `analyze`).
pub fn classify_trace(snapshot: &Snapshot, device: u32) -> Vec<ClassifiedAlloc> {
    let run = super::run_device(snapshot, device, None, false);
    let classified = classify(snapshot, &run);
    let index = |s: u32| -> Option<usize> { (s != NEVER && s > 0).then(|| s as usize - 1) };
    run.records
        .iter()
        .enumerate()
        .map(|(k, r)| ClassifiedAlloc {
            alloc_index: if r.is_initial() { None } else { index(r.born) },
            free_index: index(r.freed),
            requested: r.requested,
            size: r.size,
            frames: r.frames,
            phase: classified
                .contexts
                .get(k)
                .copied()
                .unwrap_or(Phase::Unknown),
            category: classified.category(k),
        })
        .collect()
}

/// Category of a block live before the trace: only its stack can tell.
fn before_trace(f: u16) -> Category {
    if f & PARAM_INIT != 0 {
        Category::Parameter
    } else if f & OPTIM != 0 {
        Category::OptimizerState
    } else {
        Category::Unknown
    }
}

impl Classified {
    /// The category of record `k`.
    pub(crate) fn category(&self, k: usize) -> Category {
        self.categories.get(k).copied().unwrap_or(Category::Unknown)
    }

    /// The phase the program was in at state `s`: that of the last allocation made by then.
    pub(crate) fn phase_at(&self, run: &DeviceRun<'_>, s: u32) -> Phase {
        let k = run.records.partition_point(|r| r.born <= s);
        match k
            .checked_sub(1)
            .and_then(|k| run.records.get(k).map(|r| (k, r)))
        {
            Some((k, r)) if !r.is_initial() => {
                self.contexts.get(k).copied().unwrap_or(Phase::Unknown)
            }
            _ => self.start,
        }
    }

    /// Allocations allocated at state `s`, by category.
    pub(crate) fn totals_at(&self, run: &DeviceRun<'_>, s: u32) -> Categories {
        let mut out = Categories::default();
        for (k, r) in live_at(&run.records, s) {
            let t = out.get_mut(self.category(k));
            t.bytes = t.bytes.saturating_add(r.size);
            t.requested_bytes = t.requested_bytes.saturating_add(r.requested);
            t.count += 1;
        }
        out
    }
}

/// Records allocated at state `s`, with their indices.
pub(crate) fn live_at(
    records: &[AllocRecord],
    s: u32,
) -> impl Iterator<Item = (usize, &AllocRecord)> {
    // Records are in order of `born`: stop at the first one born after `s`.
    let end = records.partition_point(|r| r.born <= s);
    records
        .get(..end)
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .filter(move |(_, r)| r.allocated_at(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_lookup() {
        let r = [(10, 20), (30, 40)];
        assert_eq!(region_at(&r, 5), None);
        assert_eq!(region_at(&r, 10), Some((10, 20)));
        assert_eq!(region_at(&r, 25), None);
        assert_eq!(region_at(&r, 40), Some((30, 40)));
        assert_eq!(region_at(&[], 40), None);
        let mut c = RegionCursor::new(&r);
        assert_eq!(c.at(5), None);
        assert_eq!(c.at(15), Some((10, 20)));
        assert_eq!(c.at(35), Some((30, 40)));
        assert_eq!(c.at(12), Some((10, 20)));
        assert_eq!(c.at(45), None);
    }

    #[test]
    fn windows_paths() {
        assert!(path_has(
            r"C:\py\Lib\site-packages\torch\optim\adam.py",
            "torch/optim/"
        ));
        assert!(!path_has("/opt/job/train.py", "torch/optim/"));
    }
}
