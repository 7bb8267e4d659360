//! PyTorch's native caching allocator before 2.1: the parenthesised form "Tried to allocate A (GPU
//! N; T total capacity; Al already allocated; F free; [L allowed; ]R reserved in total by PyTorch)"
//! (~1.5–2.0, later followed by the max_split_size_mb hint), and the oldest "…; F free; C cached)"
//! (≤ ~1.4), CUDA and HIP. Spec: `reference/pytorch-allocator-spec.md` D.1.
//!
//! These forms print reserved, not unallocated; [`OomMessage::reserved_unallocated_bytes`] is
//! derived here as reserved − allocated.

use std::sync::LazyLock;

use regex::Regex;

use super::{Dialect, Found, Framework, OomMessage, TORCH_HINT, number, regex, size};

static PARENTHESISED: LazyLock<Regex> = LazyLock::new(|| {
    regex(&[
        r"(?:(?P<api>CUDA|HIP) out of memory\. )?",
        r"Tried to allocate (?P<req>{SIZE}) \(GPU (?P<gpu>[0-9]{1,4}); (?P<total>{SIZE}) total capacity; ",
        r"(?P<alloc>{SIZE}) already allocated; (?P<free>{SIZE}) free; (?:(?P<allowed>{SIZE}) allowed; )?",
        r"(?P<reserved>{SIZE}) (?P<kind>reserved in total by PyTorch|cached)\)",
        TORCH_HINT,
    ]
    .concat())
});

/// Appends every parenthesised native-allocator message found in `flat`.
pub(crate) fn find(flat: &str, out: &mut Vec<Found>) {
    for c in PARENTHESISED.captures_iter(flat) {
        let Some(whole) = c.get(0) else { continue };
        let framework = if c.name("api").is_some_and(|m| m.as_str() == "HIP") {
            Framework::PytorchHip
        } else {
            Framework::Pytorch
        };
        let dialect = if c.name("kind").is_some_and(|m| m.as_str() == "cached") {
            Dialect::Torch14
        } else {
            Dialect::Torch20
        };
        let mut msg = OomMessage::new(framework, dialect);
        msg.requested_bytes = size(&c, "req");
        msg.gpu_index = number(&c, "gpu");
        msg.total_capacity_bytes = size(&c, "total");
        msg.allocated_by_pytorch_bytes = size(&c, "alloc");
        msg.free_bytes = size(&c, "free");
        msg.allowed_bytes = size(&c, "allowed");
        msg.reserved_total_bytes = size(&c, "reserved");
        msg.reserved_unallocated_bytes = msg
            .reserved_total_bytes
            .zip(msg.allocated_by_pytorch_bytes)
            .map(|(r, a)| r.saturating_sub(a));
        out.push(Found {
            span: whole.range(),
            msg,
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::parse_oom_log;
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn parenthesised_forms() {
        // (text, dialect, framework, requested, total, allocated, free, allowed, reserved)
        let cases = [
            (
                "CUDA out of memory. Tried to allocate 2.00 MiB (GPU 3; 1.00 GiB total capacity; \
                 4.00 MiB already allocated; 0 bytes free; 6.00 MiB cached)",
                Dialect::Torch14,
                Framework::Pytorch,
                2 * MIB,
                GIB,
                4 * MIB,
                0,
                None,
                6 * MIB,
            ),
            (
                "HIP out of memory. Tried to allocate 2.00 MiB (GPU 0; 2.00 GiB total capacity; \
                 1.00 GiB already allocated; 1.00 MiB free; 1.50 GiB allowed; 1.25 GiB reserved in \
                 total by PyTorch) If reserved memory is >> allocated memory try setting \
                 max_split_size_mb to avoid fragmentation.  See documentation for Memory Management \
                 and PYTORCH_CUDA_ALLOC_CONF",
                Dialect::Torch20,
                Framework::PytorchHip,
                2 * MIB,
                2 * GIB,
                GIB,
                MIB,
                Some(GIB + GIB / 2),
                GIB + GIB / 4,
            ),
        ];
        for (text, dialect, framework, req, total, alloc, free, allowed, reserved) in cases {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            let m = &all[0];
            assert_eq!((m.dialect, m.framework), (dialect, framework), "{text}");
            assert_eq!(m.requested_bytes, Some(req), "{text}");
            assert_eq!(m.total_capacity_bytes, Some(total), "{text}");
            assert_eq!(m.allocated_by_pytorch_bytes, Some(alloc), "{text}");
            assert_eq!(m.free_bytes, Some(free), "{text}");
            assert_eq!(m.allowed_bytes, allowed, "{text}");
            assert_eq!(m.reserved_total_bytes, Some(reserved), "{text}");
            assert_eq!(
                m.reserved_unallocated_bytes,
                Some(reserved - alloc),
                "{text}"
            );
            // The whole message, hint included, is the text.
            assert_eq!(
                m.text,
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }
}
