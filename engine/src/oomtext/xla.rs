//! JAX / XLA out-of-memory texts (reported as [`Framework::Jax`]):
//!
//! * "RESOURCE_EXHAUSTED: Out of memory while trying to allocate X[ with allocator A on device
//!   N]." with sizes as "200.00GiB" (jax ≥ 0.4) or "7406166528 bytes", and the bracketed tags
//!   (`[executable_name='…']`, `[tf-allocator-allocation-error='']`) in either order; ≤ 2021 logs
//!   say "Resource exhausted: " instead;
//! * "Out of memory allocating N bytes.";
//! * "Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0" (the exact byte
//!   count in parentheses is used);
//! * the stream executor's "failed to allocate 17.79G (19104890880 bytes) from device:
//!   CUDA_ERROR_OUT_OF_MEMORY: out of memory" (a log line XLA shares with TensorFlow);
//! * "XLA:TPU compile permanent error. Ran out of memory in memory space vmem." (no size).
//!
//! The BFC allocator's warning "Allocator (GPU_0_bfc) ran out of memory trying to allocate …" that
//! precedes the error is a log line about the same event, not a message of its own, and is not
//! reported. Spec: `reference/pytorch-allocator-spec.md` D.3.

use std::sync::LazyLock;

use regex::{Captures, Regex};

use super::{Dialect, Found, Framework, OomMessage, number, regex, size};

/// The status prefix XLA puts before its messages.
const STATUS: &str = r"(?:(?:RESOURCE_EXHAUSTED|Resource exhausted): )?";

static WHILE_TRYING: LazyLock<Regex> = LazyLock::new(|| {
    regex(
        &[
            STATUS,
            r"Out of memory while trying to allocate (?P<req>{SIZE})",
            r"(?: with allocator (?P<allocator>\S+) on device (?P<gpu>[0-9]{1,4}))?\.?",
            r"(?: \[[A-Za-z0-9_-]+='[^'\n]*'\])*",
        ]
        .concat(),
    )
});

static ALLOCATING: LazyLock<Regex> =
    LazyLock::new(|| regex(&[STATUS, r"Out of memory allocating (?P<req>{SIZE})\.?"].concat()));

static REQUEST: LazyLock<Regex> = LazyLock::new(|| {
    regex(
        &[
            STATUS,
            r"Failed to allocate request for (?P<approx>{SIZE}) \((?P<exact>[0-9]{1,20})B\) on device ordinal (?P<gpu>[0-9]{1,4})",
        ]
        .concat(),
    )
});

static STREAM_EXECUTOR: LazyLock<Regex> = LazyLock::new(|| {
    regex(concat!(
        r"failed to allocate (?P<approx>{SIZE}) \((?P<exact>[0-9]{1,20}) bytes\) from device: ",
        r"CUDA_ERROR_OUT_OF_MEMORY(?:: out of memory)?",
    ))
});

static TPU_COMPILE: LazyLock<Regex> = LazyLock::new(|| {
    regex(&[
        STATUS,
        r"XLA:TPU compile permanent error\. Ran out of memory in memory space (?P<space>[A-Za-z0-9_]+)\.",
    ]
    .concat())
});

/// Appends every XLA out-of-memory message found in `flat`.
pub(crate) fn find(flat: &str, out: &mut Vec<Found>) {
    let templates: [(&Regex, Dialect); 5] = [
        (&WHILE_TRYING, Dialect::XlaWhileTryingToAllocate),
        (&ALLOCATING, Dialect::XlaAllocating),
        (&REQUEST, Dialect::XlaFailedToAllocateRequest),
        (&STREAM_EXECUTOR, Dialect::XlaStreamExecutor),
        (&TPU_COMPILE, Dialect::XlaTpuCompile),
    ];
    for (re, dialect) in templates {
        for c in re.captures_iter(flat) {
            let Some(whole) = c.get(0) else { continue };
            let mut msg = OomMessage::new(Framework::Jax, dialect);
            msg.requested_bytes = requested(&c);
            msg.gpu_index = number(&c, "gpu");
            out.push(Found {
                span: whole.range(),
                msg,
            });
        }
    }
}

/// The exact byte count where the message has one, else the (rounded) size.
fn requested(c: &Captures<'_>) -> Option<u64> {
    number(c, "exact")
        .or_else(|| size(c, "req"))
        .or_else(|| size(c, "approx"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::parse_oom_log;
    use super::*;

    #[test]
    fn xla_texts() {
        // (text, dialect, requested, gpu)
        let cases = [
            (
                "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.50GiB with allocator \
                 GPU_1_bfc on device 1. [tf-allocator-allocation-error=''] [executable_name='jit_f']",
                Dialect::XlaWhileTryingToAllocate,
                Some(1_610_612_736),
                Some(1),
            ),
            (
                "Resource exhausted: Out of memory while trying to allocate 24 bytes.",
                Dialect::XlaWhileTryingToAllocate,
                Some(24),
                None,
            ),
            (
                "RESOURCE_EXHAUSTED: Out of memory allocating 100 bytes.",
                Dialect::XlaAllocating,
                Some(100),
                None,
            ),
            (
                "RESOURCE_EXHAUSTED: Failed to allocate request for 1.00KiB (1000B) on device ordinal 3",
                Dialect::XlaFailedToAllocateRequest,
                Some(1000),
                Some(3),
            ),
            (
                "failed to allocate 1.00G (1073741000 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
                Dialect::XlaStreamExecutor,
                Some(1_073_741_000),
                None,
            ),
            (
                "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm.",
                Dialect::XlaTpuCompile,
                None,
                None,
            ),
        ];
        for (text, dialect, req, gpu) in cases {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            let m = &all[0];
            assert_eq!(
                (m.framework, m.dialect),
                (Framework::Jax, dialect),
                "{text}"
            );
            assert_eq!(m.requested_bytes, req, "{text}");
            assert_eq!(m.gpu_index, gpu, "{text}");
            assert_eq!(m.text, text, "the whole message, tags included");
        }
    }

    #[test]
    fn bfc_warning_is_not_a_message() {
        let log = "W0000 bfc_allocator.cc:598] Allocator (GPU_0_bfc) ran out of memory trying to \
                   allocate 2.00GiB (rounded to 2147483648) from the lower end requested by op";
        assert!(parse_oom_log(log).is_empty());
    }
}
