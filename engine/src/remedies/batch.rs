//! `batch=F`: the per-step batch multiplied by F (0 < F ≤ 1). A model: what scales with the batch
//! — the input, the forward's activations and temporaries, the backward's temporaries — is
//! scaled by F; what does not — parameters, gradients, optimizer state, and any allocation of a
//! parameter's size (weight gradients in flight, casts) — keeps its size.

use super::{Context, Cost, CostKind, Method, Remedy, RemedyError, step_times};
use crate::analysis::{Category, Phase};
use crate::units::Bytes;

/// A smaller batch.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    /// The factor F.
    pub factor: f64,
}

impl Batch {
    /// Parses F.
    pub fn parse(value: Option<&str>) -> Result<Batch, String> {
        let v = value.ok_or("batch= needs a factor F with 0 < F ≤ 1, e.g. batch=0.5")?;
        let factor: f64 = v
            .parse()
            .map_err(|_| format!("{v:?} is not a number (batch=F with 0 < F ≤ 1)"))?;
        if !(factor > 0.0 && factor <= 1.0) {
            return Err(format!("factor {v} outside 0 < F ≤ 1"));
        }
        Ok(Batch { factor })
    }

    /// Micro-batches to accumulate for the original batch.
    fn accumulation(&self) -> u64 {
        (1.0 / self.factor).round().max(1.0) as u64
    }
}

impl Remedy for Batch {
    fn spec(&self) -> String {
        format!("batch={}", self.factor)
    }

    fn order(&self) -> u8 {
        2
    }

    fn method(&self) -> Method {
        Method::Transform
    }

    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError> {
        ctx.transformed = true;
        let params = &ctx.plan.param_sizes;
        let mut before = 0u64;
        let mut after = 0u64;
        for a in ctx.plan.allocs.iter_mut() {
            let phase_scales = matches!(a.phase, Phase::Forward | Phase::Backward | Phase::Data);
            let cat_scales = matches!(
                a.category,
                Category::Activation | Category::Temporary | Category::Input
            );
            if phase_scales && cat_scales && !params.contains(&a.size) {
                let n = ((a.size as f64) * self.factor).ceil() as u64;
                before += a.size;
                after += n;
                a.size = n.max(1);
            }
        }
        let grads: u64 = ctx
            .plan
            .allocs
            .iter()
            .filter(|a| a.category == Category::Gradient && a.step == 0 && !a.dropped)
            .map(|a| a.size)
            .sum();
        ctx.notes.push(format!(
            "batch={}: input, activations and forward/backward temporaries scaled (Σ sizes {} → {}); parameters, gradients, optimizer state and parameter-sized buffers kept",
            self.factor,
            Bytes(before),
            Bytes(after)
        ));
        if self.accumulation() > 1 {
            ctx.notes.push(format!(
                "with gradient accumulation over {} micro-batches the gradients (about {}) stay allocated through the later forward passes: the peak can rise by up to that much",
                self.accumulation(),
                Bytes(grads)
            ));
        }
        Ok(())
    }

    fn cost(&self, ctx: &Context<'_>) -> Cost {
        let n = self.accumulation();
        let time = step_times(ctx).map_or(String::new(), |(f, b)| {
            format!(
                " (a step's forward+backward now {:.0} ms, each micro-batch about {:.0} ms)",
                (f + b) as f64 / 1000.0,
                (f + b) as f64 * self.factor / 1000.0
            )
        });
        Cost {
            kind: CostKind::Optimisation,
            text: format!(
                "changes the optimisation (batch ×{}) unless gradients are accumulated over {n} micro-batches, which keeps the effective batch at the cost of {n} smaller, less efficient passes per step{time}",
                self.factor
            ),
        }
    }

    fn change(&self, _ctx: &Context<'_>) -> String {
        let n = self.accumulation();
        format!(
            "# batch size × {f}: loader = DataLoader(..., batch_size=int(batch_size * {f}))\n\
             accum_steps = {n}  # keep the effective batch: accumulate gradients\n\
             for i, (x, y) in enumerate(loader):\n    \
                 loss = loss_fn(model(x), y) / accum_steps\n    \
                 loss.backward()\n    \
                 if (i + 1) % accum_steps == 0:\n        \
                     optimizer.step()\n        \
                     optimizer.zero_grad(set_to_none=True)",
            f = self.factor
        )
    }
}
