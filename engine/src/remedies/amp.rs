//! `amp=bf16` / `amp=fp16`: `torch.autocast` around the forward and the loss (fp16 with a
//! `GradScaler`). A model, from the frames of each forward allocation:
//!
//! * ops on autocast's lower-precision list — recognised as allocations made inside PyTorch
//!   (`linear`, `conv*`, `matmul`, attention, and with them the norms and activations whose
//!   output feeds them, which autocast casts) — make half-size outputs;
//! * ops on its fp32 list — `softmax`, losses, `log_softmax`, `cross_entropy`, `nll_loss` — keep
//!   fp32, and so does the output just before a loss (the logits are upcast for it);
//! * an allocation of the user's own code (an elementwise op on tensors, which has no frame of its
//!   own) is half when it follows a half-size output made at the same line (`gelu(fc(x))`), else
//!   fp32 (a residual stream `x + f(x)` stays fp32, as type promotion makes it);
//! * the weights of the half ops are cast once per forward (autocast's cache) and kept until the
//!   backward: one half-size copy of every parameter of at least 64 KiB, from the forward's start
//!   to the backward's end;
//! * an allocation of model code in a library (not PyTorch's own functions) that follows one made
//!   at the same line is a later op of one expression (`0.5 * x * (1 + tanh(c * (x + a * pow(x,
//!   3))))`): fp32, as such lines commonly hold an op of autocast's fp32 list (`pow`) and type
//!   promotion keeps the rest fp32; the first op of the line is half;
//! * in the backward, activation gradients and kernel workspaces (≥ 1 MiB) are half-size too,
//!   except those of the size of an output kept fp32 or of a parameter (the loss's fp32
//!   gradients, the weight gradients).

use super::step::{PlanAlloc, first_user_frame, is_library, py_frames};
use super::{Context, Cost, CostKind, Method, Remedy, RemedyError};
use crate::analysis::{Category, Phase};
use crate::snapshot::{Frame, Sym};
use crate::units::Bytes;

/// Lower precision for the forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amp {
    /// bfloat16.
    Bf16,
    /// float16 with a GradScaler.
    Fp16,
}

impl Amp {
    /// Parses `bf16` / `fp16`.
    pub fn parse(value: Option<&str>) -> Result<Amp, String> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            Some("bf16" | "bfloat16") => Ok(Amp::Bf16),
            Some("fp16" | "float16" | "half") => Ok(Amp::Fp16),
            Some(v) => Err(format!("unknown precision {v:?}: amp=bf16 or amp=fp16")),
            None => Err("amp= needs a precision: amp=bf16 or amp=fp16".into()),
        }
    }
}

/// An op autocast runs in fp32 (and whose result stays fp32).
fn fp32_op(name: &str) -> bool {
    name.contains("loss")
        || name.contains("cross_entropy")
        || name.contains("nll")
        || name == "log_softmax"
}

/// A file of PyTorch itself (the package `torch`, not a folder that happens to be named so).
fn is_torch(file: &str) -> bool {
    let file = file.replace('\\', "/");
    match file.rsplit_once("-packages/") {
        Some((_, rest)) => rest.starts_with("torch/"),
        None => file.contains("/torch/"),
    }
}

fn halve(a: &mut PlanAlloc) -> u64 {
    let old = a.size;
    a.size = a.size.div_ceil(2).max(1);
    old - a.size
}

impl Remedy for Amp {
    fn spec(&self) -> String {
        match self {
            Amp::Bf16 => "amp=bf16".into(),
            Amp::Fp16 => "amp=fp16".into(),
        }
    }

    fn order(&self) -> u8 {
        3
    }

    fn method(&self) -> Method {
        Method::Transform
    }

    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError> {
        ctx.transformed = true;
        let snapshot = ctx.snapshot;
        let stacks = &snapshot.stacks;
        let mut saved = 0u64;
        // Index of the last halved allocation made inside a library, and its first user frame.
        let mut prev: Option<(usize, bool, Option<Frame>)> = None;
        let mut last_half_lib: Option<usize> = None;
        // Line of the previous forward allocation (a multi-op line of model code repeats it).
        let mut prev_line: Option<(Sym, u32)> = None;
        let mut step = usize::MAX;
        // Sizes of the forward's outputs that stay fp32 (and of the parameters): gradients of
        // that size stay fp32 in the backward.
        let mut kept: rustc_hash::FxHashSet<u64> = ctx
            .plan
            .allocs
            .iter()
            .filter(|a| a.category == Category::Parameter)
            .map(|a| a.size)
            .collect();
        let n = ctx.plan.allocs.len();
        for k in 0..n {
            let Some(a) = ctx.plan.allocs.get(k).cloned() else {
                continue;
            };
            if a.phase != Phase::Forward || a.dropped || a.added {
                continue;
            }
            if a.step != step {
                step = a.step;
                prev = None;
                last_half_lib = None;
                prev_line = None;
            }
            let scalable = matches!(a.category, Category::Activation | Category::Temporary);
            let inner = py_frames(snapshot, a.frames).next().copied();
            let (lib, name) = inner.map_or((false, ""), |f| {
                (is_library(stacks.str(f.filename)), stacks.str(f.name))
            });
            let half = if name == "softmax" {
                // fp32 list: its output stays fp32 (and softmax's backward keeps it).
                false
            } else if fp32_op(name) {
                // The logits before the loss are upcast for it: keep them fp32.
                if let Some(j) = last_half_lib.take()
                    && let Some(b) = ctx.plan.allocs.get_mut(j)
                {
                    b.size = b.size.saturating_mul(2);
                    saved = saved.saturating_sub(b.size / 2);
                    kept.insert(b.size);
                }
                false
            } else if lib {
                // A later op of one expression in a library's model code (not torch's own
                // functions): fp32-list ops such as `pow` are common there, and type promotion
                // keeps the rest of the expression fp32.
                let torch = inner.is_some_and(|f| is_torch(stacks.str(f.filename)));
                torch || prev_line != inner.map(|f| (f.filename, f.line))
            } else {
                match (&prev, inner) {
                    (Some((_, true, Some(u))), Some(f)) => {
                        u.filename == f.filename && u.line == f.line && u.name == f.name
                    }
                    _ => false,
                }
            };
            let user = first_user_frame(snapshot, a.frames);
            let did = half && scalable;
            if scalable && !did {
                kept.insert(a.size);
            }
            if did && let Some(b) = ctx.plan.allocs.get_mut(k) {
                saved += halve(b);
                if lib {
                    last_half_lib = Some(k);
                }
            }
            prev = Some((k, did, user));
            prev_line = inner.map(|f| (f.filename, f.line));
        }
        // Backward: activation gradients and the kernels' workspaces follow the forward's lower
        // precision, except where their size is that of an fp32 output or a parameter.
        let mut saved_back = 0u64;
        for a in ctx.plan.allocs.iter_mut() {
            if a.phase == Phase::Backward
                && !a.dropped
                && !a.added
                && matches!(a.category, Category::Activation | Category::Temporary)
                && a.size >= 1 << 20
                && !kept.contains(&a.size)
            {
                saved_back += halve(a);
            }
        }
        // Weight casts: one half-size copy of each parameter ≥ 64 KiB per forward.
        let weights: Vec<u64> = ctx
            .plan
            .allocs
            .iter()
            .filter(|a| a.category == Category::Parameter && a.size >= 64 << 10 && !a.dropped)
            .map(|a| a.size.div_ceil(2))
            .collect();
        let mut cast_bytes = 0u64;
        let steps = ctx.plan.steps.clone();
        for (s, b) in steps.iter().enumerate() {
            let Some(start) = b.forward else { continue };
            let end = b.after;
            for (j, &w) in weights.iter().enumerate() {
                ctx.plan.allocs.push(PlanAlloc {
                    at: start.saturating_sub(1 + (weights.len() - j) as u64),
                    free: end.map(|e| e.saturating_sub(1)),
                    size: w,
                    stream: 0,
                    frames: Default::default(),
                    phase: Phase::Forward,
                    category: Category::Temporary,
                    step: s,
                    dropped: false,
                    added: true,
                    failed: false,
                });
                if s == 0 {
                    cast_bytes += w;
                }
            }
        }
        ctx.notes.push(format!(
            "{}: forward outputs of autocast's lower-precision ops halved ({} less over the trace), fp32 kept for losses, the residual stream and multi-op expressions after their first op; backward activation gradients and workspaces halved ({} less); {} of weight casts added per forward",
            self.spec(),
            Bytes(saved),
            Bytes(saved_back),
            Bytes(cast_bytes)
        ));
        if *self == Amp::Fp16 {
            ctx.notes.push("fp16: GradScaler's scale and inf-check tensors are a few bytes; on overflow it skips the optimizer step (modelled as bf16)".into());
        }
        Ok(())
    }

    fn cost(&self, _ctx: &Context<'_>) -> Cost {
        Cost {
            kind: CostKind::Speedup,
            text: match self {
                Amp::Bf16 => "little: usually a speed-up (tensor cores); bf16 keeps fp32's range, rarely affects convergence".into(),
                Amp::Fp16 => "little: usually a speed-up; fp16 needs loss scaling (GradScaler) against underflow".into(),
            },
        }
    }

    fn change(&self, _ctx: &Context<'_>) -> String {
        match self {
            Amp::Bf16 => "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n    \
                          loss = loss_fn(model(x), y)\n\
                          loss.backward()\n\
                          optimizer.step()"
                .into(),
            Amp::Fp16 => "scaler = torch.amp.GradScaler(\"cuda\")\n\
                          with torch.autocast(device_type=\"cuda\", dtype=torch.float16):\n    \
                          loss = loss_fn(model(x), y)\n\
                          scaler.scale(loss).backward()\n\
                          scaler.step(optimizer)\n\
                          scaler.update()"
                .into(),
        }
    }
}
