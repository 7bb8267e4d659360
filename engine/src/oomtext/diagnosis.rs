//! Why an OOM happened, decided from the numbers its message carries, and what to do next.
//!
//! Names below: R requested, T total capacity, F free on the device, L allowed (per-process limit),
//! Al allocated by PyTorch, U reserved but unallocated, Res = reserved by PyTorch (Al + U; for
//! cudaMallocAsync, Al), P this process's memory in use (non-PyTorch included).
//!
//! **Which bound failed.** If a limit L is printed and the device still had room (F ≥ R, or F not
//! printed), the limit failed; what PyTorch could use was C = L, and the shortfall is
//! S = Res + R − L (≥ 0; the printed figures are rounded). Otherwise the device failed: C = Res + F
//! and S = R − F. A device that reports F ≥ R without a limit is treated as full when
//! F − R ≤ 64 MiB (`NEAR_FULL_SLACK`: `cudaMalloc` cannot hand out a card's last few MiB), with
//! S = R; with more free memory than that the numbers show no shortfall.
//!
//! **Precedence** (first rule that holds):
//!
//! 1. `fragmentation` — U ≥ S + C/100: the bytes PyTorch had reserved but not allocated (after the
//!    allocator released every segment it could) would have covered the shortfall with 1 % of C to
//!    spare; equivalently Al + R ≤ 0.99 C. They sit in partly used segments. Fix:
//!    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
//!    Why S and not R: the `tight` corpus runs (cap between peak allocated and peak reserved,
//!    cured by expandable segments) have U < R but U ≥ S, and so do `gpt__amp_*__cap10` (peak
//!    allocated 9.72 GiB, reserved 10.04 GiB, cap 10 GiB). Why the 1 % margin: the
//!    `resnet50__*__cap10` runs have U ≥ S (even U ≥ R) yet need 10.7 GiB allocated; there
//!    Al + R leaves < 0.5 % of the cap, and expandable segments do not save them. A run that
//!    close to its bound is at the bound whatever the packing, so it goes to rules 2–4. With this
//!    margin all 26 corpus OOMs get the kind their remedy runs confirm.
//! 2. `limit` — the limit failed, not the device. Fix:
//!    `torch.cuda.set_per_process_memory_fraction`.
//! 3. `other_processes` — the device failed, and the memory held outside PyTorch's cache,
//!    O = T − F − Res (this process's non-PyTorch memory and other processes, listed or not), is
//!    both ≥ S (without it the request would fit) and ≥ Res (it, not this work, dominates the
//!    card). The second condition keeps a CUDA context or a desktop's display memory from being
//!    blamed on a card that PyTorch fills; the `demand` explanation still mentions O when O ≥ S.
//! 4. `demand` — otherwise: PyTorch's own memory fills the device. If the device showed no
//!    shortfall at all (F ≥ R + 64 MiB, no limit), `unknown` instead.
//!
//! Messages with a request but no breakdown (XLA, TensorFlow, a cut-off PyTorch head) get `demand`,
//! and the explanation says it is assumed. A PyTorch message without its request (a partial paste)
//! is `limit` when F > L (the limit is checked before the device), else `unknown`. "More than 1EB"
//! and TPU compile-time OOMs are `demand`; 2.15's preemptive fraction-limit rejection is `limit`.
//! Messages without any size (`CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`) are
//! `unknown`.

use super::{Diagnosis, DiagnosisKind, Dialect, Framework, OomMessage};
use crate::units::Bytes;

/// How close to the request the device's free memory may be and still count as "full".
const NEAR_FULL_SLACK: u64 = 64 << 20;

/// What must remain of the usable memory C after allocated + request for the OOM to count as
/// fragmentation: C / `MARGIN_DIVISOR` (1 %).
const MARGIN_DIVISOR: u64 = 100;

/// Diagnoses one message from its numbers (see the module documentation for the rules).
pub(crate) fn diagnose(m: &OomMessage) -> Diagnosis {
    match m.dialect {
        Dialect::TorchMoreThan1Eb => return more_than_1eb(),
        Dialect::XlaTpuCompile => return tpu_compile(m),
        Dialect::TorchPreemptiveLimit => return preemptive_limit(m),
        _ => {}
    }
    let Some(req) = m.requested_bytes else {
        return match (m.allowed_bytes, m.free_bytes) {
            (Some(allowed), Some(free)) if free > allowed => {
                limit_without_request(m, allowed, free)
            }
            _ => no_numbers(m),
        };
    };
    let reserved = m.reserved_total_bytes.or(m.allocated_by_pytorch_bytes);
    match (m.allowed_bytes, m.free_bytes) {
        (Some(allowed), None) => limit_failed(m, req, allowed, reserved),
        (Some(allowed), Some(free)) if free >= req => limit_failed(m, req, allowed, reserved),
        (_, Some(free)) => device_failed(m, req, free, reserved),
        (None, None) => assumed_demand(m, req),
    }
}

/// The per-process limit failed while the device had room.
fn limit_failed(m: &OomMessage, req: u64, allowed: u64, reserved: Option<u64>) -> Diagnosis {
    let device = match (m.free_bytes, m.total_capacity_bytes) {
        (Some(f), Some(t)) => format!(", while the GPU still had {} free of {}", b(f), b(t)),
        (Some(f), None) => format!(", while the GPU still had {} free", b(f)),
        _ => String::new(),
    };
    let Some(res) = reserved else {
        return diagnosis(
            DiagnosisKind::Limit,
            format!(
                "The request ({}) did not fit in the {} allowed for this process{device}: the \
                 per-process limit ran out, not the GPU. {}",
                b(req),
                b(allowed),
                limit_steps(m.framework)
            ),
        );
    };
    let needed = res.saturating_add(req);
    let excess = needed.saturating_sub(allowed);
    let margin = allowed / MARGIN_DIVISOR;
    let unalloc = m.reserved_unallocated_bytes.unwrap_or(0);
    let allocated = m
        .allocated_by_pytorch_bytes
        .unwrap_or(res.saturating_sub(unalloc));
    let packed = allocated.saturating_add(req);
    let overview = format!(
        "Reserved ({}) + the request ({}) = {} is over the {} allowed for this process by {}{device}",
        b(res),
        b(req),
        b(needed),
        b(allowed),
        b(excess)
    );
    if m.reserved_unallocated_bytes.is_some() && unalloc >= excess.saturating_add(margin) {
        return diagnosis(
            DiagnosisKind::Fragmentation,
            format!(
                "{overview}. But {} of the reservation was unallocated: free blocks in segments \
                 PyTorch could neither reuse for this request nor release. Packed without them, \
                 allocated ({}) + the request = {} fits the limit with {} to spare. {}",
                b(unalloc),
                b(allocated),
                b(packed),
                b(allowed.saturating_sub(packed)),
                fragmentation_steps(m.framework)
            ),
        );
    }
    let why = if m.reserved_unallocated_bytes.is_none() {
        String::new()
    } else if packed <= allowed {
        format!(
            "; the {} unallocated would cover the excess, but allocated ({}) + the request = {} \
             leaves less than 1% of the limit, so the work itself is at the limit",
            b(unalloc),
            b(allocated),
            b(packed)
        )
    } else {
        format!(
            "; only {} of the reservation was unallocated: even perfectly packed, allocated ({}) \
             + the request = {} does not fit",
            b(unalloc),
            b(allocated),
            b(packed)
        )
    };
    diagnosis(
        DiagnosisKind::Limit,
        format!(
            "{overview}{why}. The per-process limit ran out, not the GPU. {}",
            limit_steps(m.framework)
        ),
    )
}

/// The device itself could not serve the request.
fn device_failed(m: &OomMessage, req: u64, free: u64, reserved: Option<u64>) -> Diagnosis {
    let of_total = m
        .total_capacity_bytes
        .map(|t| format!(" of {}", b(t)))
        .unwrap_or_default();
    let (short, situation) = if free < req {
        let short = req - free;
        let situation = format!(
            "The GPU had {}{of_total} free, {} short of the {} requested",
            b(free),
            b(short),
            b(req)
        );
        (short, situation)
    } else if free - req <= NEAR_FULL_SLACK {
        let situation = format!(
            "The GPU had {}{of_total} free, within {} of the {} requested (a nearly full card \
             cannot hand out its last few MiB)",
            b(free),
            b(NEAR_FULL_SLACK),
            b(req)
        );
        (req, situation)
    } else {
        let situation = format!(
            "The GPU reported {}{of_total} free, more than the {} requested",
            b(free),
            b(req)
        );
        (req, situation)
    };

    let usable = reserved.map(|r| r.saturating_add(free));
    let margin = usable.map_or(0, |c| c / MARGIN_DIVISOR);
    if let Some(u) = m.reserved_unallocated_bytes
        && u >= short.saturating_add(margin)
    {
        let allocated = m.allocated_by_pytorch_bytes.unwrap_or(0);
        let usable = usable.unwrap_or(0);
        return diagnosis(
            DiagnosisKind::Fragmentation,
            format!(
                "{situation}, but PyTorch held {} reserved but unallocated: free blocks in \
                 segments it could neither reuse for this request nor release. Packed without \
                 them, allocated ({}) + the request = {} fits in the {} PyTorch could use (its \
                 reservation + free). {}",
                b(u),
                b(allocated),
                b(allocated.saturating_add(req)),
                b(usable),
                fragmentation_steps(m.framework)
            ),
        );
    }
    if free >= req && free - req > NEAR_FULL_SLACK {
        return diagnosis(
            DiagnosisKind::Unknown,
            format!(
                "{situation}, and no per-process limit is printed: the numbers in this message \
                 show no shortfall. Memory may have been freed by another process in the \
                 meantime, or the device shown is not the one that failed. Next: check nvidia-smi \
                 while the job runs, and that the job uses the GPU you expect \
                 (CUDA_VISIBLE_DEVICES)."
            ),
        );
    }

    let Some(res) = reserved else {
        return assumed_demand(m, req);
    };
    let outside = m
        .total_capacity_bytes
        .map(|t| t.saturating_sub(free).saturating_sub(res));
    if let Some(outside) = outside
        && outside >= short
        && outside >= res
    {
        return diagnosis(
            DiagnosisKind::OtherProcesses,
            format!(
                "{situation}. PyTorch's cache held {}, while {} of the card was held outside it \
                 ({}): enough to have served the request, and more than PyTorch itself held. {}",
                b(res),
                b(outside),
                outside_breakdown(m, outside, res),
                other_processes_steps(m.framework)
            ),
        );
    }

    let mut why = format!("{situation}. PyTorch held {}", b(res));
    if let Some(al) = m.allocated_by_pytorch_bytes {
        why += &format!(" ({} allocated", b(al));
        match m.reserved_unallocated_bytes {
            Some(u) if u >= short => {
                why += &format!(
                    ", {} reserved but unallocated: enough for the shortfall, but packed without \
                     it the GPU would still be more than 99% full",
                    b(u)
                );
            }
            Some(u) => {
                why += &format!(
                    ", {} reserved but unallocated: less than the shortfall",
                    b(u)
                )
            }
            None => {}
        }
        why += ")";
    }
    if let Some(outside) = outside {
        if outside >= short {
            why += &format!(
                "; {} was held outside PyTorch's cache ({}), which would have made room, but \
                 PyTorch's own share is the larger",
                b(outside),
                outside_breakdown(m, outside, res)
            );
        } else {
            why += &format!(
                ", and the {} held outside PyTorch's cache could not have covered the shortfall",
                b(outside)
            );
        }
    }
    why += ": the work itself needs more memory than the GPU has.";
    if let Some(total) = m.total_capacity_bytes
        && req > total
    {
        why += &format!(
            " The request alone is larger than the whole GPU ({}): check the shape of the tensor \
             being allocated.",
            b(total)
        );
    }
    diagnosis(
        DiagnosisKind::Demand,
        format!("{why} {}", demand_steps(m.framework)),
    )
}

/// "1.00 GiB non-PyTorch memory in this process, 6.50 GiB in 1 other process (Process 7: …), …".
fn outside_breakdown(m: &OomMessage, outside: u64, res: u64) -> String {
    let mut parts = Vec::new();
    let listed: u64 = m.other_processes.iter().map(|p| p.in_use_bytes).sum();
    let non_pytorch = m.process_in_use_bytes.map(|p| p.saturating_sub(res));
    if let Some(n) = non_pytorch {
        parts.push(format!("{} non-PyTorch memory in this process", b(n)));
    }
    if !m.other_processes.is_empty() {
        let mut list: Vec<String> = m
            .other_processes
            .iter()
            .take(4)
            .map(|p| format!("Process {}: {}", p.pid, b(p.in_use_bytes)))
            .collect();
        if m.other_processes.len() > 4 {
            list.push("…".to_string());
        }
        parts.push(format!(
            "{} in {} other process{} ({})",
            b(listed),
            m.other_processes.len(),
            if m.other_processes.len() == 1 {
                ""
            } else {
                "es"
            },
            list.join(", ")
        ));
    }
    if let Some(n) = non_pytorch {
        let rest = outside.saturating_sub(n).saturating_sub(listed);
        if rest > 0 {
            parts.push(format!("{} not attributed to a listed process", b(rest)));
        }
    }
    if parts.is_empty() {
        "the message lists no processes".to_string()
    } else {
        parts.join(", ")
    }
}

/// A message with a limit but without its request size (a partial paste): if the GPU had more
/// free than the whole limit, the limit is what failed, whatever the request was (the allocator
/// checks the limit before it asks the device).
fn limit_without_request(m: &OomMessage, allowed: u64, free: u64) -> Diagnosis {
    let unalloc = m
        .reserved_unallocated_bytes
        .map(|u| format!(" ({} of PyTorch's reservation was unallocated)", b(u)))
        .unwrap_or_default();
    diagnosis(
        DiagnosisKind::Limit,
        format!(
            "The request size is not in the text, but the GPU still had {} free, more than the \
             whole {} allowed for this process: the per-process limit ran out, not the GPU. \
             Whether fragmentation played a part cannot be told without the request{unalloc}. {}",
            b(free),
            b(allowed),
            limit_steps(m.framework)
        ),
    )
}

fn assumed_demand(m: &OomMessage, req: u64) -> Diagnosis {
    let what = match (&m.tensor_shape, &m.dtype) {
        (Some(shape), Some(dtype)) => format!(" (a {dtype} tensor of shape {shape:?})"),
        _ => String::new(),
    };
    diagnosis(
        DiagnosisKind::Demand,
        format!(
            "The message gives the request ({}{what}) but no breakdown of the device's memory, so \
             demand is assumed: the work needed more memory than the device had free. {}",
            b(req),
            demand_steps(m.framework)
        ),
    )
}

fn no_numbers(m: &OomMessage) -> Diagnosis {
    let what = match m.dialect {
        Dialect::CudaError => {
            "A CUDA call failed with out-of-memory outside the caching allocator's own check \
             (caching disabled with PYTORCH_NO_CUDA_MEMORY_CACHING=1, a library's own cudaMalloc, \
             or a CUDA context starting on a full GPU); the message carries no sizes."
        }
        Dialect::CublasAllocFailed => {
            "cuBLAS could not allocate its handle or workspace (CUBLAS_STATUS_ALLOC_FAILED), \
             usually because the GPU was already full; the message carries no sizes."
        }
        _ => "Only the head of the message was found, without its sizes.",
    };
    diagnosis(
        DiagnosisKind::Unknown,
        format!(
            "{what} What ran out cannot be told from it. Next: look for a full \"out of memory\" \
             message with sizes earlier in the log, check nvidia-smi for other processes, and rerun \
             with CUDA_LAUNCH_BLOCKING=1 to find the call that failed."
        ),
    )
}

fn more_than_1eb() -> Diagnosis {
    diagnosis(
        DiagnosisKind::Demand,
        format!(
            "The request was more than 1EB ({} bytes or more): no device holds that, so the size \
             itself is wrong, usually an overflowed or negative dimension in a tensor's shape. \
             Next: find the op in the traceback and print the shapes that reach it.",
            1u64 << 60
        ),
    )
}

fn tpu_compile(m: &OomMessage) -> Diagnosis {
    let space = m
        .text
        .rsplit(' ')
        .next()
        .unwrap_or("")
        .trim_end_matches('.');
    diagnosis(
        DiagnosisKind::Demand,
        format!(
            "XLA could not fit the compiled program into the TPU's {space} memory space at \
             compile time: the program itself is too big (no other process is involved). Next: a \
             smaller per-device batch or block size, rematerialisation (jax.checkpoint), or more \
             sharding."
        ),
    )
}

fn preemptive_limit(m: &OomMessage) -> Diagnosis {
    let req = m
        .requested_bytes
        .map(|r| format!(" ({})", b(r)))
        .unwrap_or_default();
    diagnosis(
        DiagnosisKind::Limit,
        format!(
            "PyTorch rejected the request{req} before calling cudaMalloc because it would take \
             this process past its per_process_memory_fraction limit (throw_on_cudamalloc_oom:True). \
             {}",
            limit_steps(m.framework)
        ),
    )
}

fn alloc_conf_env(f: Framework) -> &'static str {
    if f == Framework::PytorchHip {
        "PYTORCH_HIP_ALLOC_CONF"
    } else {
        "PYTORCH_CUDA_ALLOC_CONF"
    }
}

fn fragmentation_steps(f: Framework) -> String {
    format!(
        "Next: set {}=expandable_segments:True (or max_split_size_mb:<MB> so that large cached \
         blocks are not split), and see the segments with torch.cuda.memory_summary().",
        alloc_conf_env(f)
    )
}

fn limit_steps(f: Framework) -> String {
    format!(
        "Next: raise or remove the limit (torch.cuda.set_per_process_memory_fraction, or \
         per_process_memory_fraction in {}); if the limit is meant to stay, reduce the work: a \
         smaller batch, torch.autocast, activation checkpointing (torch.utils.checkpoint).",
        alloc_conf_env(f)
    )
}

fn other_processes_steps(f: Framework) -> &'static str {
    if f == Framework::PytorchHip {
        "Next: see which processes hold the GPU (rocm-smi), stop them or run on a free GPU \
         (HIP_VISIBLE_DEVICES); non-PyTorch memory inside this process comes from other libraries \
         (RCCL, MIOpen/hipBLAS workspaces, another framework)."
    } else {
        "Next: see which processes hold the GPU (nvidia-smi), stop them or run on a free GPU \
         (CUDA_VISIBLE_DEVICES); non-PyTorch memory inside this process comes from other libraries \
         (NCCL, cuDNN/cuBLAS workspaces, CuPy, another framework)."
    }
}

fn demand_steps(f: Framework) -> &'static str {
    match f {
        Framework::Jax => {
            "Next: reduce the work: a smaller batch, bfloat16, rematerialisation (jax.checkpoint), \
             or sharding across devices; if other processes share the GPU, lower \
             XLA_PYTHON_CLIENT_MEM_FRACTION or set XLA_PYTHON_CLIENT_PREALLOCATE=false; if the BFC \
             allocator's log mentions fragmentation, try TF_GPU_ALLOCATOR=cuda_malloc_async."
        }
        Framework::Tensorflow => {
            "Next: reduce the work: a smaller batch, mixed precision \
             (tf.keras.mixed_precision.set_global_policy('mixed_float16')), gradient \
             checkpointing; tf.config.experimental.set_memory_growth if other processes share the \
             GPU; RunOptions(report_tensor_allocations_upon_oom=True) lists the live tensors."
        }
        _ => {
            "Next: reduce the work: a smaller batch size, torch.autocast (bf16/fp16), activation \
             checkpointing (torch.utils.checkpoint), or an optimizer with less state (SGD instead \
             of AdamW); a snapshot (torch.cuda.memory._record_memory_history, then \
             torch.cuda.memory._dump_snapshot) shows what holds the memory."
        }
    }
}

fn diagnosis(kind: DiagnosisKind, explanation: String) -> Diagnosis {
    Diagnosis { kind, explanation }
}

fn b(n: u64) -> Bytes {
    Bytes(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A PyTorch ≥ 2.1 message with these numbers.
    fn msg(
        req: u64,
        total: u64,
        free: u64,
        this: Option<u64>,
        allowed: Option<u64>,
        al: u64,
        u: u64,
    ) -> OomMessage {
        let mut m = OomMessage::new(Framework::Pytorch, Dialect::Torch21);
        m.requested_bytes = Some(req);
        m.total_capacity_bytes = Some(total);
        m.free_bytes = Some(free);
        m.process_in_use_bytes = this;
        m.allowed_bytes = allowed;
        m.allocated_by_pytorch_bytes = Some(al);
        m.reserved_unallocated_bytes = Some(u);
        m.reserved_total_bytes = Some(al + u);
        m
    }

    #[test]
    fn precedence_table() {
        use DiagnosisKind::*;
        // (name, message, expected kind)
        let cases = [
            // The cache's free bytes cover the whole request, with room to spare.
            (
                "frag: U >= R",
                msg(100 * MIB, 24 * GIB, 10 * MIB, None, None, 20 * GIB, 2 * GIB),
                Fragmentation,
            ),
            // U covers the shortfall, but packed the card would still be > 99 % full.
            (
                "frag at the edge",
                msg(
                    100 * MIB,
                    24 * GIB,
                    10 * MIB,
                    None,
                    None,
                    23 * GIB,
                    200 * MIB,
                ),
                Demand,
            ),
            // Limit: Res + R = 10.5 GiB over 10 GiB by 0.5 GiB; U = 0.6 GiB covers it.
            (
                "frag under a limit",
                msg(
                    GIB,
                    80 * GIB,
                    70 * GIB,
                    None,
                    Some(10 * GIB),
                    8 * GIB + 900 * MIB,
                    600 * MIB,
                ),
                Fragmentation,
            ),
            (
                "limit",
                msg(
                    GIB,
                    80 * GIB,
                    70 * GIB,
                    None,
                    Some(10 * GIB),
                    9 * GIB + 900 * MIB,
                    10 * MIB,
                ),
                Limit,
            ),
            // A limit is printed but the card is full too: judged on the card.
            (
                "limit printed, card full",
                msg(GIB, 24 * GIB, 10 * MIB, None, Some(30 * GIB), 23 * GIB, 0),
                Demand,
            ),
            // Another process holds 40 GiB of 80 GiB; PyTorch 39 GiB.
            (
                "others",
                msg(
                    2 * GIB,
                    80 * GIB,
                    GIB,
                    Some(39 * GIB + 500 * MIB),
                    None,
                    39 * GIB,
                    0,
                ),
                OtherProcesses,
            ),
            // Only a CUDA context and a display outside PyTorch.
            (
                "demand",
                msg(
                    2 * GIB,
                    24 * GIB,
                    100 * MIB,
                    Some(23 * GIB + 400 * MIB),
                    None,
                    23 * GIB,
                    0,
                ),
                Demand,
            ),
            // 16 GiB PyTorch, 8 GiB others: the others would make room, but PyTorch is the larger
            // share.
            (
                "demand, others smaller",
                msg(
                    2 * GIB,
                    24 * GIB,
                    10 * MIB,
                    Some(16 * GIB),
                    None,
                    16 * GIB,
                    0,
                ),
                Demand,
            ),
            // Nearly full card: 41.56 MiB free for 32 MiB.
            (
                "near full",
                msg(
                    32 * MIB,
                    4 * GIB,
                    42 * MIB,
                    Some(3 * GIB),
                    None,
                    2 * GIB,
                    2 * MIB,
                ),
                Demand,
            ),
            // Plenty free, no limit: the numbers show no shortfall.
            (
                "no shortfall",
                msg(12 * MIB, 10 * GIB, 9 * GIB, None, None, 8 * MIB, 0),
                Unknown,
            ),
        ];
        for (name, m, kind) in cases {
            let d = diagnose(&m);
            assert_eq!(d.kind, kind, "{name}: {}", d.explanation);
            assert!(d.explanation.contains("Next:"), "{name}: {}", d.explanation);
        }
    }

    #[test]
    fn explanations_carry_the_numbers() {
        let d = diagnose(&msg(
            GIB,
            80 * GIB,
            70 * GIB,
            None,
            Some(10 * GIB),
            9 * GIB + 900 * MIB,
            10 * MIB,
        ));
        assert!(
            d.explanation.contains("10.00 GiB allowed"),
            "{}",
            d.explanation
        );
        assert!(d.explanation.contains("1024.00 MiB"), "{}", d.explanation);
        assert!(
            d.explanation.contains("set_per_process_memory_fraction"),
            "{}",
            d.explanation
        );
        let d = diagnose(&msg(
            100 * MIB,
            24 * GIB,
            10 * MIB,
            None,
            None,
            20 * GIB,
            2 * GIB,
        ));
        assert!(
            d.explanation.contains("2.00 GiB reserved but unallocated"),
            "{}",
            d.explanation
        );
        assert!(
            d.explanation
                .contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
            "{}",
            d.explanation
        );
        let mut hip = msg(100 * MIB, 24 * GIB, 10 * MIB, None, None, 20 * GIB, 2 * GIB);
        hip.framework = Framework::PytorchHip;
        assert!(
            diagnose(&hip)
                .explanation
                .contains("PYTORCH_HIP_ALLOC_CONF")
        );
    }

    #[test]
    fn messages_with_few_numbers() {
        let mut xla = OomMessage::new(Framework::Jax, Dialect::XlaAllocating);
        xla.requested_bytes = Some(GIB);
        let d = diagnose(&xla);
        assert_eq!(d.kind, DiagnosisKind::Demand);
        assert!(d.explanation.contains("assumed") && d.explanation.contains("jax.checkpoint"));
        let plain = OomMessage::new(Framework::PytorchCudaError, Dialect::CudaError);
        assert_eq!(diagnose(&plain).kind, DiagnosisKind::Unknown);
        let eb = OomMessage::new(Framework::Pytorch, Dialect::TorchMoreThan1Eb);
        assert_eq!(diagnose(&eb).kind, DiagnosisKind::Demand);
    }
}
