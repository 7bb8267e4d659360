//! `checkpoint`: non-reentrant activation checkpointing (`torch.utils.checkpoint`,
//! `use_reentrant=False`) of every repeated block. A model:
//!
//! * **the blocks** are found from the frames: of the chain of `forward` functions in each
//!   forward allocation's stack, the outermost call (caller line → callee function) that runs
//!   several times in one forward pass (a transformer layer called from the model's loop, a
//!   ResNet bottleneck called from `Sequential`); a new instance starts where the callee's line
//!   goes back;
//! * **forward**: what a block allocates and keeps past its end (its saved activations) is freed
//!   at the block's end, except its output (the last such allocation that is not a small
//!   by-product such as a norm's saved statistics, under 1/64 of the block's largest), which the
//!   next block takes as input;
//! * **backward**: just before the first of a block's saved activations was freed in the
//!   recording (its backward begins), the block's forward runs again — the same allocations in
//!   the same order (its output too: a last op such as ReLU saves it), temporaries freed as
//!   before, saved activations kept until their recorded free.

use rustc_hash::FxHashMap;

use super::step::{MID, PlanAlloc, Pos, SLOT};
use super::{Context, Cost, CostKind, Method, Remedy, RemedyError, step_times};
use crate::analysis::Phase;
use crate::snapshot::{Snapshot, StackId, Sym};
use crate::units::Bytes;

/// Checkpoint every repeated block.
#[derive(Debug, Clone, Copy)]
pub struct Checkpoint;

/// (caller file, caller line, callee file, callee function).
type Key = (Sym, u32, Sym, Sym);

/// The chain of `forward` frames of a stack, outermost first.
fn forward_chain(snapshot: &Snapshot, id: StackId) -> Vec<(Sym, u32, Sym)> {
    let mut v: Vec<(Sym, u32, Sym)> = snapshot
        .stacks
        .frames(id)
        .iter()
        .filter(|f| {
            let n = snapshot.stacks.str(f.name);
            n == "forward" || n.starts_with("_forward")
        })
        .map(|f| (f.filename, f.line, f.name))
        .collect();
    v.reverse();
    v
}

/// The key at depth `d` and the callee's line.
fn key_at(chain: &[(Sym, u32, Sym)], d: usize) -> Option<(Key, u32)> {
    let (cf, cl, _) = *chain.get(d)?;
    let (ef, el, en) = *chain.get(d + 1)?;
    Some(((cf, cl, ef, en), el))
}

/// The block key: outermost call that repeats within the first forward pass.
fn find_key(snapshot: &Snapshot, allocs: &[PlanAlloc]) -> Option<(Key, usize)> {
    let first_step = allocs.iter().find(|a| a.phase == Phase::Forward)?.step;
    // key → (depth, instances, last line)
    let mut seen: FxHashMap<Key, (usize, usize, u32)> = FxHashMap::default();
    for a in allocs
        .iter()
        .filter(|a| a.phase == Phase::Forward && a.step == first_step && !a.added)
    {
        let chain = forward_chain(snapshot, a.frames);
        for d in 0..chain.len().saturating_sub(1) {
            if let Some((k, line)) = key_at(&chain, d) {
                let e = seen.entry(k).or_insert((d, 1, line));
                if line < e.2 {
                    e.1 += 1;
                }
                e.2 = line;
            }
        }
    }
    seen.into_iter()
        .filter(|(_, (_, n, _))| *n >= 2)
        .min_by_key(|(_, (d, n, _))| (*d, std::cmp::Reverse(*n)))
        .map(|(k, (d, _, _))| (k, d))
}

impl Remedy for Checkpoint {
    fn spec(&self) -> String {
        "checkpoint".into()
    }

    fn order(&self) -> u8 {
        4
    }

    fn method(&self) -> Method {
        Method::Transform
    }

    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError> {
        ctx.transformed = true;
        let snapshot = ctx.snapshot;
        let Some((key, depth)) = find_key(snapshot, &ctx.plan.allocs) else {
            ctx.notes.push("checkpoint: no repeated block found in the forward's frames (a module called several times from one line): trace left as recorded".into());
            return Ok(());
        };
        // Instances: runs of forward allocations carrying the key, split where the line goes back.
        let mut instances: Vec<Vec<usize>> = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        let mut last_line = 0u32;
        let mut last_step = usize::MAX;
        let mut order: Vec<usize> = (0..ctx.plan.allocs.len()).collect();
        order.sort_by_key(|&k| ctx.plan.allocs.get(k).map_or(0, |a| a.at));
        for &k in &order {
            let Some(a) = ctx.plan.allocs.get(k) else {
                continue;
            };
            if a.dropped || a.failed {
                continue;
            }
            let in_block = a.phase == Phase::Forward
                && !a.added
                && key_at(&forward_chain(snapshot, a.frames), depth)
                    .is_some_and(|(k2, _)| k2 == key);
            let line = if in_block {
                key_at(&forward_chain(snapshot, a.frames), depth).map_or(0, |(_, l)| l)
            } else {
                0
            };
            if !in_block {
                if a.phase == Phase::Forward && !cur.is_empty() && !a.added {
                    instances.push(std::mem::take(&mut cur));
                }
                if a.phase != Phase::Forward && !cur.is_empty() {
                    instances.push(std::mem::take(&mut cur));
                }
                continue;
            }
            if (line < last_line || a.step != last_step) && !cur.is_empty() {
                instances.push(std::mem::take(&mut cur));
            }
            last_line = line;
            last_step = a.step;
            cur.push(k);
        }
        if !cur.is_empty() {
            instances.push(cur);
        }
        let mut freed_early = 0u64;
        let mut recomputed = 0u64;
        let mut new_allocs: Vec<PlanAlloc> = Vec::new();
        let mut blocks = 0usize;
        for inst in &instances {
            let end: Pos = inst
                .iter()
                .filter_map(|&k| ctx.plan.allocs.get(k).map(|a| a.at))
                .max()
                .unwrap_or(0);
            // Saved: kept into the step's backward (or to the end of a trace cut short).
            let backward: Option<Pos> = inst
                .first()
                .and_then(|&k| ctx.plan.allocs.get(k))
                .and_then(|a| ctx.plan.steps.get(a.step))
                .and_then(|s| s.backward);
            let saved: Vec<usize> = inst
                .iter()
                .copied()
                .filter(|&k| {
                    ctx.plan
                        .allocs
                        .get(k)
                        .is_some_and(|a| match (a.free, backward) {
                            (None, _) => true,
                            (Some(f), Some(b)) => f >= b,
                            (Some(_), None) => false,
                        })
                })
                .collect();
            // The output: the last saved allocation that is not a small by-product of an op (a
            // norm's saved mean and inverse deviation, made after its output).
            let size_of = |k: usize| ctx.plan.allocs.get(k).map_or(0, |a| a.size);
            let largest = saved.iter().map(|&k| size_of(k)).max().unwrap_or(0);
            let Some(&output) = saved
                .iter()
                .rev()
                .find(|&&k| size_of(k).saturating_mul(64) >= largest)
            else {
                continue;
            };
            blocks += 1;
            let inner: Vec<usize> = saved.iter().copied().filter(|&k| k != output).collect();
            let Some(first_free) = inner
                .iter()
                .filter_map(|&k| ctx.plan.allocs.get(k).and_then(|a| a.free))
                .min()
            else {
                // Nothing freed in the trace (cut at an OOM): only the forward changes.
                for &k in &inner {
                    if let Some(a) = ctx.plan.allocs.get_mut(k) {
                        a.free = Some(end + 1);
                        freed_early += a.size;
                    }
                }
                continue;
            };
            // Recompute: the block's events again, just before its backward.
            let base = (first_free / SLOT) * SLOT;
            let mut events: Vec<(Pos, bool, usize)> = Vec::new();
            for &k in inst {
                if let Some(a) = ctx.plan.allocs.get(k) {
                    events.push((a.at, true, k));
                    if let Some(f) = a.free
                        && f <= end
                    {
                        events.push((f, false, k));
                    }
                }
            }
            events.sort_unstable();
            let n = events.len() as u64;
            let start = base + MID.saturating_sub(n + 2);
            let mut copy_of: FxHashMap<usize, usize> = FxHashMap::default();
            for (j, (_, is_alloc, k)) in events.iter().enumerate() {
                let p = start + j as u64;
                if *is_alloc {
                    if let Some(a) = ctx.plan.allocs.get(*k) {
                        let mut c = a.clone();
                        c.at = p;
                        c.added = true;
                        c.phase = Phase::Backward;
                        // Saved ones keep their recorded free; temporaries get theirs below.
                        c.free = a.free.filter(|&f| f > end);
                        recomputed += c.size;
                        copy_of.insert(*k, new_allocs.len());
                        new_allocs.push(c);
                    }
                } else if let Some(&c) = copy_of.get(k)
                    && let Some(x) = new_allocs.get_mut(c)
                {
                    x.free = Some(p);
                }
            }
            for &k in &inner {
                if let Some(a) = ctx.plan.allocs.get_mut(k) {
                    a.free = Some(end + 1);
                    freed_early += a.size;
                }
            }
        }
        ctx.plan.allocs.extend(new_allocs);
        let name = |s: Sym| snapshot.stacks.str(s).to_string();
        let file = |s: Sym| {
            let f = name(s);
            f.rsplit('/').next().unwrap_or(&f).to_string()
        };
        ctx.notes.push(format!(
            "checkpoint: block = {}:{} called from {}:{}; {blocks} block instances over the trace; {} of saved activations freed at their block's end, {} reallocated by recomputation in the backward",
            file(key.2),
            name(key.3),
            file(key.0),
            key.1,
            Bytes(freed_early),
            Bytes(recomputed)
        ));
        ctx.block = Some(format!(
            "{} ({}), called at {}:{}",
            name(key.3),
            file(key.2),
            file(key.0),
            key.1
        ));
        Ok(())
    }

    fn cost(&self, ctx: &Context<'_>) -> Cost {
        let text = match step_times(ctx) {
            Some((f, b)) => format!(
                "about one extra forward pass of the checkpointed blocks: forward {:.1} ms + backward {:.1} ms per step in the trace → about +{:.0} % step time",
                f as f64 / 1000.0,
                b as f64 / 1000.0,
                100.0 * f as f64 / (f + b) as f64
            ),
            None => "about one extra forward pass (typically +20–35 % step time)".into(),
        };
        Cost {
            kind: CostKind::Recompute,
            text,
        }
    }

    fn change(&self, ctx: &Context<'_>) -> String {
        let block = ctx
            .block
            .clone()
            .unwrap_or_else(|| "each repeated block".into());
        format!(
            "from torch.utils.checkpoint import checkpoint\n\
             # wrap every repeated block — here {block}:\n\
             for block in self.blocks:\n    \
                 x = checkpoint(block, x, use_reentrant=False)\n\
             # Hugging Face models: model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}})"
        )
    }
}
