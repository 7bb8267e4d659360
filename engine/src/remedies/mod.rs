//! `engine::remedies`: what each fix for an OOM would do to the peak. A remedy is one file behind
//! the [`Remedy`] trait: either a change of the allocator settings ([`alloc`], exact: the recorded
//! trace replayed with other settings) or a transform of the trace ([`batch`], [`amp`],
//! [`checkpoint`], [`optimizer`]: a model) — the trace's allocations, classified by
//! [`crate::analysis::categories`] and placed in the step's structure ([`step`]), are resized,
//! dropped, freed earlier or added, and the changed trace is replayed through the caching
//! allocator, so fragmentation is simulated, not guessed.
//!
//! Specs: `alloc=<PYTORCH_CUDA_ALLOC_CONF>`, `batch=F` (0 < F ≤ 1), `amp=bf16|fp16`,
//! `checkpoint`, `optimizer=sgd`, combined with `+` (`amp=bf16+checkpoint`).
//!
//! From an OOM snapshot alone (post-mortem: the trace ends at the OOM) the replayed figures cover
//! the part of the step that ran: they are lower bounds, and say so ([`Prediction::lower_bound`]).
//! Beside them goes an estimate ([`Prediction::estimated_peak_allocated_bytes`]): the trace
//! extended from the step's structure ([`step`]: the rest of the backward, the optimizer step,
//! zero_grad, then the recorded part of the step again with the optimizer state live), the
//! remedy applied to it as to a full trace, and replayed; `fits` is then the estimate's. Where
//! the recording stops inside the forward, the forward's remainder is not known and the estimate
//! stays low by it.

pub mod alloc;
pub mod amp;
pub mod batch;
pub mod checkpoint;
pub mod optimizer;
mod step;

use serde::Serialize;

use crate::allocator::AllocatorConfig;
use crate::replay::{ReplayError, ReplayOptions, replay};
use crate::snapshot::Snapshot;
use crate::units::Bytes;
use step::{Plan, main_device};

/// How a figure was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The recorded trace replayed with other allocator settings: exact.
    Replay,
    /// A model: the trace transformed, then replayed.
    Transform,
}

impl Method {
    /// `replay` or `transform`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Replay => "replay",
            Method::Transform => "transform",
        }
    }
}

/// What a remedy costs, in kind and words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// `none`, `speedup`, `recompute`, `optimisation`.
    pub kind: CostKind,
    /// In words, with the figures.
    pub text: String,
}

/// The kind of a cost, in ranking order (cheapest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CostKind {
    /// Nothing (allocator settings).
    None,
    /// Little, usually a speed-up (AMP).
    Speedup,
    /// Extra compute (activation checkpointing: about one more forward pass).
    Recompute,
    /// Changes the optimisation (smaller batch without accumulation, another optimizer).
    Optimisation,
}

/// Why a remedy could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RemedyError {
    /// A part of the spec is not a remedy.
    #[error("remedy {spec:?}: part {part:?}: {what}")]
    Spec {
        /// The whole spec.
        spec: String,
        /// The part that is wrong.
        part: String,
        /// What is wrong with it.
        what: String,
    },
    /// The snapshot has no trace to transform.
    #[error("the snapshot holds no allocator trace (record with _record_memory_history)")]
    NoTrace,
    /// The replay failed.
    #[error("replay: {0}")]
    Replay(#[from] ReplayError),
}

/// Everything a remedy may change: the trace (a plan of its allocations) and the allocator
/// settings.
#[derive(Debug)]
pub struct Context<'s> {
    /// The recorded snapshot (stacks, annotations).
    pub(crate) snapshot: &'s Snapshot,
    /// The allocations, editable.
    pub(crate) plan: Plan,
    /// Whether the plan was changed (then the plan is replayed instead of the recording).
    pub(crate) transformed: bool,
    /// Allocator settings (`None`: the recorded ones).
    pub(crate) config: Option<AllocatorConfig>,
    /// Notes for the prediction.
    pub(crate) notes: Vec<String>,
    /// The block checkpointing found, in words.
    pub(crate) block: Option<String>,
}

/// One remedy: a change of the allocator settings or a transform of the trace.
pub trait Remedy: std::fmt::Debug {
    /// The spec part, normalised (`amp=bf16`).
    fn spec(&self) -> String;
    /// Order of application in a combination (lower first): trace transforms that change what
    /// exists (optimizer, batch) before those that change precision (amp), before those that
    /// move lifetimes (checkpoint), before the allocator settings.
    fn order(&self) -> u8;
    /// Exact (a replay) or a model.
    fn method(&self) -> Method;
    /// Applies the remedy.
    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError>;
    /// What it costs, given the step's structure.
    fn cost(&self, ctx: &Context<'_>) -> Cost;
    /// Exactly what to change in the program.
    fn change(&self, ctx: &Context<'_>) -> String;
}

/// Parses one spec (`amp=bf16+checkpoint`) into its remedies, in order of application. Errors
/// name the part that is wrong.
pub fn parse_spec(spec: &str) -> Result<Vec<Box<dyn Remedy>>, RemedyError> {
    let err = |part: &str, what: String| RemedyError::Spec {
        spec: spec.to_string(),
        part: part.to_string(),
        what,
    };
    let mut out: Vec<Box<dyn Remedy>> = Vec::new();
    if spec.trim().is_empty() {
        return Err(err(
            spec,
            "empty: expected e.g. amp=bf16 or batch=0.5".into(),
        ));
    }
    // `alloc=` takes the rest of its part up to the next `+` that starts a known remedy, since
    // alloc values hold no `+` anyway.
    for part in spec.split('+') {
        let p = part.trim();
        let (key, value) = match p.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (p, None),
        };
        let r: Box<dyn Remedy> = match key {
            "alloc" => Box::new(alloc::Alloc::parse(value.unwrap_or("")).map_err(|w| err(p, w))?),
            "batch" => Box::new(batch::Batch::parse(value).map_err(|w| err(p, w))?),
            "amp" => Box::new(amp::Amp::parse(value).map_err(|w| err(p, w))?),
            "checkpoint" | "ckpt" => {
                if value.is_some() {
                    return Err(err(p, "checkpoint takes no value".into()));
                }
                Box::new(checkpoint::Checkpoint)
            }
            "optimizer" => Box::new(optimizer::Optimizer::parse(value).map_err(|w| err(p, w))?),
            _ => {
                return Err(err(
                    p,
                    "unknown remedy: expected alloc=…, batch=F, amp=bf16|fp16, checkpoint or optimizer=sgd"
                        .into(),
                ));
            }
        };
        if out.iter().any(|o| o.order() == r.order()) {
            return Err(err(p, "given twice".into()));
        }
        out.push(r);
    }
    out.sort_by_key(|r| r.order());
    Ok(out)
}

/// The standard set of remedies `whatif` evaluates when none are given.
pub fn standard_set() -> Vec<&'static str> {
    vec![
        "batch=0.5",
        "batch=0.25",
        "amp=bf16",
        "checkpoint",
        "amp=bf16+checkpoint",
        "optimizer=sgd",
        "alloc=expandable_segments:True",
        "alloc=max_split_size_mb:128",
        "alloc=garbage_collection_threshold:0.6",
    ]
}

/// The baseline: the snapshot itself replayed.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Peak allocated bytes (without a limit).
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes (without a limit).
    pub peak_reserved_bytes: u64,
    /// The replay under the capacity does not run out of memory (post-mortem: the replay of the
    /// extrapolated step).
    pub fits: bool,
    /// The trace was cut at an OOM: the peak is a lower bound.
    pub lower_bound: bool,
    /// Post-mortem: the peak allocated bytes of the step extrapolated from its structure (see
    /// [`whatif`]'s notes); `None` when the trace is complete.
    pub estimated_peak_allocated_bytes: Option<u64>,
    /// Post-mortem: the peak reserved bytes of the extrapolated step; `None` when the trace is
    /// complete.
    pub estimated_peak_reserved_bytes: Option<u64>,
}

/// What one remedy does.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// The spec as given.
    pub remedy: String,
    /// Predicted peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Predicted peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// The replay of the (transformed) trace under the capacity does not run out of memory
    /// (post-mortem: of the extrapolated step, transformed).
    pub fits: bool,
    /// `replay` (exact) or `transform` (a model).
    pub method: Method,
    /// The peaks cover only the part of the step before the OOM.
    pub lower_bound: bool,
    /// Post-mortem: the peak allocated bytes of the extrapolated step, remedy applied; `None`
    /// when the trace is complete.
    pub estimated_peak_allocated_bytes: Option<u64>,
    /// Post-mortem: the peak reserved bytes of the extrapolated step; `None` when the trace is
    /// complete.
    pub estimated_peak_reserved_bytes: Option<u64>,
    /// What it costs.
    pub cost: Cost,
    /// Exactly what to change.
    pub change: String,
    /// How the figure was obtained, caveats.
    pub notes: Vec<String>,
}

/// The answer of [`whatif`].
#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    /// The per-process limit the remedies were checked against.
    pub capacity_bytes: u64,
    /// The snapshot as recorded.
    pub baseline: Baseline,
    /// Fitting remedies by cost (then peak), then the others by peak.
    pub remedies: Vec<Prediction>,
    /// The snapshot ends at an OOM: figures are lower bounds where the rest of the step is
    /// missing.
    pub post_mortem: bool,
    /// Notes on the whole evaluation.
    pub notes: Vec<String>,
}

/// How the post-mortem estimate extends a trace, in words (notes).
const EXTRAPOLATION: &str = "after the cut: the failed allocation made, the rest of the backward (a gradient for every parameter without one, later layers first; what the forward left live freed in reverse order, each behind a gradient of its size), the optimizer step (AdamW: two state buffers per parameter on the first step, kept; one parameter-sized temporary each), zero_grad (gradients freed), then the recorded part of the step once more, now with the optimizer state live, and its rest the same way";

fn options(device: u32, config: Option<AllocatorConfig>, capacity: Option<u64>) -> ReplayOptions {
    ReplayOptions {
        device,
        config,
        capacity,
        use_oracle: false,
        record_events: false,
        record_timeline: false,
        ..ReplayOptions::default()
    }
}

/// Builds the context of one spec: the remedies applied.
fn prepare<'s>(
    snapshot: &'s Snapshot,
    spec: &str,
    extend: bool,
) -> Result<(Context<'s>, Vec<Box<dyn Remedy>>), RemedyError> {
    let remedies = parse_spec(spec)?;
    let device = main_device(snapshot).ok_or(RemedyError::NoTrace)?;
    let mut plan = Plan::build(snapshot, device);
    let extended = extend && plan.extend_post_mortem().is_some();
    let mut ctx = Context {
        snapshot,
        plan,
        transformed: extended,
        config: None,
        notes: Vec::new(),
        block: None,
    };
    for r in &remedies {
        r.apply(&mut ctx)?;
    }
    Ok((ctx, remedies))
}

/// The snapshot a remedy turns `snapshot` into: the transformed trace replayed through the
/// allocator (with the remedy's settings), with segments, as `_dump_snapshot` would write it.
pub fn transformed_snapshot(snapshot: &Snapshot, spec: &str) -> Result<Snapshot, RemedyError> {
    let (ctx, _) = prepare(snapshot, spec, false)?;
    let device = ctx.plan.device;
    let mut o = options(device, ctx.config.clone(), None);
    o.record_events = true;
    if ctx.transformed {
        let raw = ctx.plan.to_snapshot(snapshot);
        let r = replay(&raw, &o)?;
        Ok(r.to_snapshot(&raw))
    } else {
        let r = replay(snapshot, &o)?;
        Ok(r.to_snapshot(snapshot))
    }
}

/// The trace a remedy is judged by, ready to replay elsewhere (on a GPU): the recorded one with
/// the remedy's settings, or the transformed one; for a post-mortem snapshot, the step
/// extrapolated past the OOM with the remedy applied — the trace whose replay under the capacity
/// decides [`Prediction::fits`].
#[derive(Debug, Clone)]
pub struct RemedyTrace<'s> {
    /// The trace (in a snapshot, as `_dump_snapshot` would write it before the replay).
    pub snapshot: std::borrow::Cow<'s, Snapshot>,
    /// CUDA device of the trace.
    pub device: u32,
    /// Allocator settings (`None`: the recorded ones).
    pub config: Option<AllocatorConfig>,
    /// Exact or a model.
    pub method: Method,
    /// Post-mortem: the trace is the extrapolated step.
    pub extrapolated: bool,
}

/// The trace `spec` turns `snapshot` into (see [`RemedyTrace`]).
pub fn remedy_trace<'s>(
    snapshot: &'s Snapshot,
    spec: &str,
) -> Result<RemedyTrace<'s>, RemedyError> {
    let (ctx, _) = prepare(snapshot, spec, false)?;
    let method = if ctx.transformed {
        Method::Transform
    } else {
        Method::Replay
    };
    let device = ctx.plan.device;
    if ctx.plan.post_mortem {
        let (ext, _) = prepare(snapshot, spec, true)?;
        return Ok(RemedyTrace {
            snapshot: std::borrow::Cow::Owned(ext.plan.to_snapshot(snapshot)),
            device,
            config: ext.config,
            method,
            extrapolated: true,
        });
    }
    let trace = if ctx.transformed {
        std::borrow::Cow::Owned(ctx.plan.to_snapshot(snapshot))
    } else {
        std::borrow::Cow::Borrowed(snapshot)
    };
    Ok(RemedyTrace {
        snapshot: trace,
        device,
        config: ctx.config,
        method,
        extrapolated: false,
    })
}

/// Evaluates one spec.
fn evaluate(snapshot: &Snapshot, capacity: u64, spec: &str) -> Result<Prediction, RemedyError> {
    let (mut ctx, remedies) = prepare(snapshot, spec, false)?;
    let device = ctx.plan.device;
    let method = if ctx.transformed {
        Method::Transform
    } else {
        Method::Replay
    };
    let raw;
    let target = if ctx.transformed {
        raw = ctx.plan.to_snapshot(snapshot);
        &raw
    } else {
        snapshot
    };
    let free = replay(target, &options(device, ctx.config.clone(), None))?;
    let capped = replay(target, &options(device, ctx.config.clone(), Some(capacity)))?;
    let lower_bound = ctx.plan.post_mortem;
    let estimate = if lower_bound {
        let (ext, _) = prepare(snapshot, spec, true)?;
        let raw = ext.plan.to_snapshot(snapshot);
        let f = replay(&raw, &options(device, ext.config.clone(), None))?;
        let c = replay(&raw, &options(device, ext.config.clone(), Some(capacity)))?;
        Some((f.peak_allocated_bytes, f.peak_reserved_bytes, !c.oom))
    } else {
        None
    };
    if let Some((a, r, _)) = estimate {
        ctx.notes.push(format!(
            "post-mortem estimate: {} allocated, {} reserved — the step extrapolated from its structure and replayed ({EXTRAPOLATION}); `fits` is the estimate's",
            Bytes(a),
            Bytes(r)
        ));
    }
    if lower_bound {
        ctx.notes.push(format!(
            "post-mortem: the trace ends at the OOM (in the {:?} phase of step {}); the rest of the step is missing, so the peak is a lower bound{}",
            ctx.plan.last_phase,
            ctx.plan.steps.len(),
            if capped.oom { "" } else { " and `fits` covers only what ran" }
        ));
    }
    if method == Method::Transform {
        ctx.notes.push(
            "transform: a model — the trace's allocations resized / freed earlier / added per the remedy, then replayed through the caching allocator".into(),
        );
    } else {
        ctx.notes.push(
            "replay: the recorded trace replayed with these allocator settings (exact)".into(),
        );
    }
    let cost = combined_cost(&remedies, &ctx);
    let change = remedies
        .iter()
        .map(|r| r.change(&ctx))
        .collect::<Vec<_>>()
        .join("\n\n");
    Ok(Prediction {
        remedy: spec.to_string(),
        peak_allocated_bytes: free.peak_allocated_bytes,
        peak_reserved_bytes: free.peak_reserved_bytes,
        fits: estimate.map_or(!capped.oom, |e| e.2),
        method,
        lower_bound,
        estimated_peak_allocated_bytes: estimate.map(|e| e.0),
        estimated_peak_reserved_bytes: estimate.map(|e| e.1),
        cost,
        change,
        notes: ctx.notes,
    })
}

fn combined_cost(remedies: &[Box<dyn Remedy>], ctx: &Context<'_>) -> Cost {
    let costs: Vec<Cost> = remedies.iter().map(|r| r.cost(ctx)).collect();
    let kind = costs.iter().map(|c| c.kind).max().unwrap_or(CostKind::None);
    Cost {
        kind,
        text: costs
            .iter()
            .map(|c| c.text.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// Evaluates `specs` (the [`standard_set`] when empty) against `snapshot` under the per-process
/// limit `capacity`, and ranks them: those that fit by cost (then peak), then the rest by peak.
pub fn whatif(snapshot: &Snapshot, capacity: u64, specs: &[String]) -> Result<WhatIf, RemedyError> {
    let device = main_device(snapshot).ok_or(RemedyError::NoTrace)?;
    let specs: Vec<String> = if specs.is_empty() {
        standard_set().into_iter().map(String::from).collect()
    } else {
        specs.to_vec()
    };
    // Parse all first, so a bad spec fails before any work.
    for s in &specs {
        parse_spec(s)?;
    }
    let base_free = replay(snapshot, &options(device, None, None))?;
    let base_capped = replay(snapshot, &options(device, None, Some(capacity)))?;
    let entries = snapshot
        .traces
        .iter()
        .find(|t| t.device == device)
        .map_or(&[][..], |t| t.entries.as_slice());
    let post_mortem = step::ends_in_oom(entries).is_some();
    let mut notes = Vec::new();
    let mut estimate = None;
    if post_mortem {
        let mut plan = Plan::build(snapshot, device);
        let ext = plan.extend_post_mortem();
        let raw = plan.to_snapshot(snapshot);
        let f = replay(&raw, &options(device, None, None))?;
        let c = replay(&raw, &options(device, None, Some(capacity)))?;
        estimate = Some((f.peak_allocated_bytes, f.peak_reserved_bytes, !c.oom));
        notes.push(format!(
            "post-mortem: the snapshot ends at an OOM; every peak is a lower bound for the part of the step that ran (baseline at least {})",
            Bytes(base_free.peak_allocated_bytes)
        ));
        if let Some(e) = ext {
            notes.push(format!(
                "post-mortem estimate (extrapolated, a model): baseline about {} allocated, {} reserved; the recording stops in the {:?} phase; {EXTRAPOLATION} ({} gradients in the cut step, {} of optimizer state and {} recorded allocations of the step repeated were added); the estimates and `fits` come from it, the lower bounds stay beside them{}",
                Bytes(f.peak_allocated_bytes),
                Bytes(f.peak_reserved_bytes),
                e.cut_phase,
                e.gradients,
                Bytes(e.state_bytes),
                e.repeated,
                if e.cut_phase == crate::analysis::Phase::Forward {
                    "; the forward's remainder is not known, so the estimate is still low by what it would have added"
                } else {
                    ""
                }
            ));
        }
    }
    let mut remedies = Vec::with_capacity(specs.len());
    for s in &specs {
        remedies.push(evaluate(snapshot, capacity, s)?);
    }
    remedies.sort_by(|a, b| {
        b.fits
            .cmp(&a.fits)
            .then_with(|| {
                if a.fits {
                    a.cost.kind.cmp(&b.cost.kind)
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .then_with(|| {
                let pa = a
                    .estimated_peak_allocated_bytes
                    .unwrap_or(a.peak_allocated_bytes);
                let pb = b
                    .estimated_peak_allocated_bytes
                    .unwrap_or(b.peak_allocated_bytes);
                pa.cmp(&pb)
            })
    });
    Ok(WhatIf {
        capacity_bytes: capacity,
        baseline: Baseline {
            peak_allocated_bytes: base_free.peak_allocated_bytes,
            peak_reserved_bytes: base_free.peak_reserved_bytes,
            fits: estimate.map_or(!base_capped.oom, |e| e.2),
            lower_bound: post_mortem,
            estimated_peak_allocated_bytes: estimate.map(|e| e.0),
            estimated_peak_reserved_bytes: estimate.map(|e| e.1),
        },
        remedies,
        post_mortem,
        notes,
    })
}

/// The step's forward and backward durations in microseconds (the last complete step's), from
/// the trace's own time stamps.
pub(crate) fn step_times(ctx: &Context<'_>) -> Option<(i64, i64)> {
    ctx.plan.steps.iter().rev().find_map(|s| {
        let f = s.backward_us? - s.forward_us?;
        let b = s.after_us? - s.backward_us?;
        (f > 0 && b > 0).then_some((f, b))
    })
}
