//! `optimizer=sgd`: SGD with momentum instead of Adam/AdamW. A model: of Adam's two moment
//! buffers per parameter (`exp_avg`, `exp_avg_sq`, allocated in pairs of equal size by
//! `_init_group`) one stays (the momentum buffer); the step's temporaries (foreach Adam's
//! parameter-sized intermediates) go, since foreach SGD updates in place.

use super::{Context, Cost, CostKind, Method, Remedy, RemedyError};
use crate::analysis::{Category, Phase};

/// Another optimizer.
#[derive(Debug, Clone, Copy)]
pub struct Optimizer;

impl Optimizer {
    /// Parses the value (only `sgd`).
    pub fn parse(value: Option<&str>) -> Result<Optimizer, String> {
        match value {
            Some(v) if v.eq_ignore_ascii_case("sgd") => Ok(Optimizer),
            Some(v) => Err(format!(
                "unknown optimizer {v:?}: only sgd (with momentum) is modelled"
            )),
            None => Err("optimizer= needs a value: optimizer=sgd".into()),
        }
    }
}

impl Remedy for Optimizer {
    fn spec(&self) -> String {
        "optimizer=sgd".into()
    }

    fn order(&self) -> u8 {
        1
    }

    fn method(&self) -> Method {
        Method::Transform
    }

    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError> {
        ctx.transformed = true;
        let allocs = &mut ctx.plan.allocs;
        let state: Vec<usize> = (0..allocs.len())
            .filter(|&k| {
                allocs
                    .get(k)
                    .is_some_and(|a| a.category == Category::OptimizerState && !a.dropped)
            })
            .collect();
        let mut dropped_state = 0u64;
        let mut pairs = 0usize;
        let mut i = 0;
        while i < state.len() {
            let (Some(&a), Some(&b)) = (state.get(i), state.get(i + 1)) else {
                break;
            };
            let same = match (allocs.get(a), allocs.get(b)) {
                (Some(x), Some(y)) => x.size == y.size && x.step == y.step,
                _ => false,
            };
            if same {
                if let Some(y) = allocs.get_mut(b) {
                    y.dropped = true;
                    dropped_state += y.size;
                }
                pairs += 1;
                i += 2;
            } else {
                i += 1;
            }
        }
        let mut dropped_temp = 0u64;
        for a in allocs.iter_mut() {
            if a.phase == Phase::Optimizer && a.category == Category::Temporary && !a.failed {
                a.dropped = true;
                dropped_temp += a.size;
            }
        }
        if pairs == 0 {
            ctx.notes.push("no pairs of equal-size optimizer-state buffers found (not Adam/AdamW, or the trace ends before the first optimizer step): state left as recorded".into());
        } else {
            ctx.notes.push(format!(
                "optimizer=sgd: {pairs} Adam moment pairs → one momentum buffer each ({} less state); the optimizer step's temporaries ({} in all, over the trace) dropped",
                crate::units::Bytes(dropped_state),
                crate::units::Bytes(dropped_temp)
            ));
        }
        Ok(())
    }

    fn cost(&self, _ctx: &Context<'_>) -> Cost {
        Cost {
            kind: CostKind::Optimisation,
            text: "changes the optimisation: SGD with momentum needs its own learning rate (often 10–100× Adam's) and schedule; convergence differs".into(),
        }
    }

    fn change(&self, _ctx: &Context<'_>) -> String {
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # instead of torch.optim.AdamW(...); retune lr".into()
    }
}
