//! PyTorch's native caching allocator, 2.1 and later: the sentence form
//! (`Tried to allocate A. GPU N has a total capacity of T of which F is free. <processes>[L
//! allowed; ]Of the allocated memory Al is allocated by PyTorch, [with P allocated in private pools
//! (e.g., CUDA Graphs), ]and U is reserved by PyTorch but unallocated.`), CUDA and HIP, 2.1's
//! "capacty" typo included; plus the allocator's other texts: "Tried to allocate more than 1EB
//! memory", 2.15's preemptive fraction-limit rejection, and a bare "CUDA out of memory." head when
//! the rest is missing. Spec: `reference/pytorch-allocator-spec.md` C.15 and D.1.
//!
//! Everything before "Of the allocated memory … is allocated by PyTorch" is optional in the
//! sentence form, so a paste that starts mid-message ("GPU 0 has a total capacity …", "…this
//! process has …") is still read, with the numbers it has.

use std::sync::LazyLock;

use regex::Regex;

use super::{Dialect, Found, Framework, OomMessage, ProcessUse, TORCH_HINT, number, regex, size};

static SENTENCE: LazyLock<Regex> = LazyLock::new(|| {
    regex(&[
        r"(?:(?:(?P<api>CUDA|HIP) out of memory\. )?",
        r"(?:Tried to allocate (?P<req>{SIZE})\. )?",
        r"GPU (?P<gpu>[0-9]{1,4}) has a total capaci?ty of (?P<total>{SIZE}) of which (?P<free>{SIZE}) is free\. )?",
        r"(?P<procs>(?:(?:Process [0-9]{1,10}|(?:Including non-PyTorch memory, )?this process) has {SIZE} memory in use\. )*)",
        r"(?:(?P<allowed>{SIZE}) allowed; )?",
        r"Of the allocated memory (?P<alloc>{SIZE}) is allocated by PyTorch, ",
        r"(?:with (?P<private>{SIZE}) allocated in private pools \(e\.g\., (?P<graphs>CUDA|HIP) Graphs\), )?",
        r"and (?P<unalloc>{SIZE}) is reserved by PyTorch but unallocated\.",
        TORCH_HINT,
    ]
    .concat())
});

static OTHER_PROCESS: LazyLock<Regex> =
    LazyLock::new(|| regex(r"Process (?P<pid>[0-9]{1,10}) has (?P<size>{SIZE}) memory in use"));

static THIS_PROCESS: LazyLock<Regex> =
    LazyLock::new(|| regex(r"this process has (?P<size>{SIZE}) memory in use"));

static MORE_THAN_1EB: LazyLock<Regex> = LazyLock::new(|| {
    regex(r"(?P<api>CUDA|HIP) out of memory\. Tried to allocate more than 1EB memory\.")
});

static PREEMPTIVE: LazyLock<Regex> = LazyLock::new(|| {
    regex(concat!(
        r"(?P<api>CUDA|HIP) out of memory\. Allocation was preemptively rejected because it would ",
        r"exceed per_process_memory_fraction limit\.(?: Requested size: (?P<req>{SIZE})\.?)?",
    ))
});

/// The head alone; every full native-allocator message also matches it, and loses to the fuller
/// match when overlaps are resolved.
static HEAD: LazyLock<Regex> = LazyLock::new(|| {
    regex(r"(?P<api>CUDA|HIP) out of memory\.(?: Tried to allocate (?P<req>{SIZE})\.?)?")
});

/// Appends every native-allocator message of these forms found in `flat`.
pub(crate) fn find(flat: &str, out: &mut Vec<Found>) {
    for c in SENTENCE.captures_iter(flat) {
        let Some(whole) = c.get(0) else { continue };
        let hip = [c.name("api"), c.name("graphs")]
            .iter()
            .any(|m| m.is_some_and(|m| m.as_str() == "HIP"))
            || whole.as_str().contains("PYTORCH_HIP_ALLOC_CONF");
        let mut msg = OomMessage::new(framework(hip), Dialect::Torch21);
        msg.requested_bytes = size(&c, "req");
        msg.gpu_index = number(&c, "gpu");
        msg.total_capacity_bytes = size(&c, "total");
        msg.free_bytes = size(&c, "free");
        msg.allowed_bytes = size(&c, "allowed");
        msg.allocated_by_pytorch_bytes = size(&c, "alloc");
        msg.private_pools_bytes = size(&c, "private");
        msg.reserved_unallocated_bytes = size(&c, "unalloc");
        msg.reserved_total_bytes = msg
            .allocated_by_pytorch_bytes
            .zip(msg.reserved_unallocated_bytes)
            .map(|(a, u)| a.saturating_add(u));
        let procs = c.name("procs").map_or("", |m| m.as_str());
        msg.other_processes = OTHER_PROCESS
            .captures_iter(procs)
            .filter_map(|p| {
                Some(ProcessUse {
                    pid: number(&p, "pid")?,
                    in_use_bytes: size(&p, "size")?,
                })
            })
            .collect();
        msg.process_in_use_bytes = THIS_PROCESS.captures(procs).and_then(|p| size(&p, "size"));
        out.push(Found {
            span: whole.range(),
            msg,
        });
    }
    for (re, dialect) in [
        (&*MORE_THAN_1EB, Dialect::TorchMoreThan1Eb),
        (&*PREEMPTIVE, Dialect::TorchPreemptiveLimit),
        (&*HEAD, Dialect::TorchPartial),
    ] {
        for c in re.captures_iter(flat) {
            let Some(whole) = c.get(0) else { continue };
            let hip = c.name("api").is_some_and(|m| m.as_str() == "HIP");
            let mut msg = OomMessage::new(framework(hip), dialect);
            msg.requested_bytes = size(&c, "req");
            out.push(Found {
                span: whole.range(),
                msg,
            });
        }
    }
}

fn framework(hip: bool) -> Framework {
    if hip {
        Framework::PytorchHip
    } else {
        Framework::Pytorch
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::parse_oom_log;
    use super::*;

    const MIB: u64 = 1 << 20;

    /// (text, requested, total, free, this process, others, allowed, allocated, private,
    /// unallocated)
    #[allow(clippy::type_complexity)]
    const CASES: &[(
        &str,
        Option<u64>,
        u64,
        u64,
        Option<u64>,
        &[(u64, u64)],
        Option<u64>,
        u64,
        Option<u64>,
        u64,
    )] = &[
        // Minimal: no processes, no limit, no hint.
        (
            "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of 1.00 GiB \
             of which 512 bytes is free. Of the allocated memory 3.00 MiB is allocated by PyTorch, \
             and 1.50 KiB is reserved by PyTorch but unallocated.",
            Some(2 * MIB),
            1 << 30,
            512,
            None,
            &[],
            None,
            3 * MIB,
            None,
            1536,
        ),
        // Others before and after our line, a limit and private pools.
        (
            "CUDA out of memory. Tried to allocate 4.00 MiB. GPU 0 has a total capacity of 8.00 GiB \
             of which 2.00 GiB is free. Process 7 has 1.00 GiB memory in use. Including non-PyTorch \
             memory, this process has 5.00 GiB memory in use. Process 9 has 10.00 MiB memory in use. \
             4.50 GiB allowed; Of the allocated memory 4.00 GiB is allocated by PyTorch, with 1.00 MiB \
             allocated in private pools (e.g., CUDA Graphs), and 256.00 MiB is reserved by PyTorch \
             but unallocated.",
            Some(4 * MIB),
            8 << 30,
            2 << 30,
            Some(5 << 30),
            &[(7, 1 << 30), (9, 10 * MIB)],
            Some(4_831_838_208),
            4 << 30,
            Some(MIB),
            256 * MIB,
        ),
        // Headless paste, 2.1 typo.
        (
            "GPU 0 has a total capacty of 4.00 GiB of which 41.56 MiB is free. Of the allocated \
             memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but \
             unallocated.",
            None,
            4 << 30,
            43_578_819,
            None,
            &[],
            None,
            2_770_253_906,
            None,
            1_992_294,
        ),
    ];

    #[test]
    fn sentence_form_numbers() {
        for &(text, req, total, free, this, others, allowed, alloc, private, unalloc) in CASES {
            let m = &parse_oom_log(text)[0];
            assert_eq!(m.dialect, Dialect::Torch21, "{text}");
            assert_eq!(m.requested_bytes, req, "{text}");
            assert_eq!(m.total_capacity_bytes, Some(total), "{text}");
            assert_eq!(m.free_bytes, Some(free), "{text}");
            assert_eq!(m.process_in_use_bytes, this, "{text}");
            let got: Vec<_> = m
                .other_processes
                .iter()
                .map(|p| (p.pid, p.in_use_bytes))
                .collect();
            assert_eq!(got, others, "{text}");
            assert_eq!(m.allowed_bytes, allowed, "{text}");
            assert_eq!(m.allocated_by_pytorch_bytes, Some(alloc), "{text}");
            assert_eq!(m.private_pools_bytes, private, "{text}");
            assert_eq!(m.reserved_unallocated_bytes, Some(unalloc), "{text}");
            assert_eq!(m.reserved_total_bytes, Some(alloc + unalloc), "{text}");
            assert_eq!(
                m.text,
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }

    #[test]
    fn other_native_texts() {
        let cases = [
            (
                "CUDA out of memory. Tried to allocate more than 1EB memory.",
                Dialect::TorchMoreThan1Eb,
                None,
            ),
            (
                "CUDA out of memory. Allocation was preemptively rejected because it would exceed \
                 per_process_memory_fraction limit. Requested size: 2.00 MiB.",
                Dialect::TorchPreemptiveLimit,
                Some(2 * MIB),
            ),
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
                Dialect::TorchPartial,
                Some(20 * MIB),
            ),
            ("HIP out of memory.", Dialect::TorchPartial, None),
        ];
        for (text, dialect, req) in cases {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            assert_eq!(all[0].dialect, dialect, "{text}");
            assert_eq!(all[0].requested_bytes, req, "{text}");
        }
        assert_eq!(
            parse_oom_log("HIP out of memory.")[0].framework,
            Framework::PytorchHip
        );
    }
}
