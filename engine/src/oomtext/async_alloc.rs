//! PyTorch OOMs that do not come from the native caching allocator's own check:
//!
//! * the `cudaMallocAsync` backend's multi-line message ("Allocation on device N would exceed
//!   allowed memory. (out of memory)" then "Currently allocated : …", "Requested : …", "Device
//!   limit : …", "Free (according to CUDA): …", "PyTorch limit (set by user-supplied memory
//!   fraction) : …"; the value lines are optional, as some logs cut them);
//! * a raw CUDA/HIP call failing with out-of-memory: `CUDA error: out of memory` (printed as
//!   `torch.AcceleratorError` from ~2.8, `RuntimeError` before), and cuBLAS's
//!   `CUBLAS_STATUS_ALLOC_FAILED`. These carry no sizes.
//!
//! Spec: `reference/pytorch-allocator-spec.md` D.2.

use std::sync::LazyLock;

use regex::Regex;

use super::{Dialect, Found, Framework, OomMessage, number, regex, size};

static MALLOC_ASYNC: LazyLock<Regex> = LazyLock::new(|| {
    regex(concat!(
        r"Allocation on device (?P<gpu>[0-9]{1,4}) would exceed allowed memory\. \(out of memory\)",
        r"(?: Currently allocated\s*:\s*(?P<alloc>{SIZE}))?",
        r"(?: Requested\s*:\s*(?P<req>{SIZE}))?",
        r"(?: Device limit\s*:\s*(?P<total>{SIZE}))?",
        r"(?: Free \(according to CUDA\)\s*:\s*(?P<free>{SIZE}))?",
        r"(?: PyTorch limit \(set by user-supplied memory fraction\)\s*:\s*(?P<limit>{SIZE}))?",
    ))
});

static CUDA_ERROR: LazyLock<Regex> = LazyLock::new(|| regex(r"(?:CUDA|HIP) error: out of memory"));

static CUBLAS: LazyLock<Regex> =
    LazyLock::new(|| regex(r"CUBLAS_STATUS_ALLOC_FAILED(?: when calling `[^`\n]*`)?"));

/// Appends every cudaMallocAsync and plain CUDA-error OOM found in `flat`.
pub(crate) fn find(flat: &str, out: &mut Vec<Found>) {
    for c in MALLOC_ASYNC.captures_iter(flat) {
        let Some(whole) = c.get(0) else { continue };
        let mut msg = OomMessage::new(Framework::PytorchCudaMallocAsync, Dialect::CudaMallocAsync);
        msg.gpu_index = number(&c, "gpu");
        msg.allocated_by_pytorch_bytes = size(&c, "alloc");
        msg.requested_bytes = size(&c, "req");
        msg.total_capacity_bytes = size(&c, "total");
        msg.free_bytes = size(&c, "free");
        // Without a fraction the limit is printed as a sentinel (2^64 bytes → "17179869184.00
        // GiB"), which does not fit a u64 and reads as None; a limit at or above the device's
        // capacity limits nothing either.
        msg.allowed_bytes =
            size(&c, "limit").filter(|&l| msg.total_capacity_bytes.is_none_or(|t| l < t));
        out.push(Found {
            span: whole.range(),
            msg,
        });
    }
    for (re, dialect) in [
        (&*CUDA_ERROR, Dialect::CudaError),
        (&*CUBLAS, Dialect::CublasAllocFailed),
    ] {
        for m in re.find_iter(flat) {
            out.push(Found {
                span: m.range(),
                msg: OomMessage::new(Framework::PytorchCudaError, dialect),
            });
        }
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
    fn malloc_async_message() {
        // (text, allocated, requested, device limit, free, allowed)
        let cases = [
            (
                "Allocation on device 2 would exceed allowed memory. (out of memory)\n\
                 Currently allocated     : 1.00 GiB\n\
                 Requested               : 2.00 MiB\n\
                 Device limit            : 8.00 GiB\n\
                 Free (according to CUDA): 1.00 MiB\n\
                 PyTorch limit (set by user-supplied memory fraction)\n\
                 \x20                       : 4.00 GiB\n",
                Some(GIB),
                Some(2 * MIB),
                Some(8 * GIB),
                Some(MIB),
                Some(4 * GIB),
            ),
            // Columns collapsed by a log, no limit line.
            (
                "Allocation on device 2 would exceed allowed memory. (out of memory)\n\
                 Currently allocated : 1.00 GiB\nRequested : 2.00 MiB\n",
                Some(GIB),
                Some(2 * MIB),
                None,
                None,
                None,
            ),
            // The "no limit" sentinel.
            (
                "Allocation on device 2 would exceed allowed memory. (out of memory)\n\
                 PyTorch limit (set by user-supplied memory fraction)\n : 17179869184.00 GiB",
                None,
                None,
                None,
                None,
                None,
            ),
        ];
        for (text, alloc, req, total, free, allowed) in cases {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            let m = &all[0];
            assert_eq!(m.framework, Framework::PytorchCudaMallocAsync);
            assert_eq!(m.gpu_index, Some(2));
            assert_eq!(m.allocated_by_pytorch_bytes, alloc, "{text}");
            assert_eq!(m.requested_bytes, req, "{text}");
            assert_eq!(m.total_capacity_bytes, total, "{text}");
            assert_eq!(m.free_bytes, free, "{text}");
            assert_eq!(m.allowed_bytes, allowed, "{text}");
        }
    }

    #[test]
    fn plain_errors() {
        for (text, dialect, exception) in [
            (
                "torch.AcceleratorError: CUDA error: out of memory",
                Dialect::CudaError,
                "torch.AcceleratorError",
            ),
            (
                "RuntimeError: HIP error: out of memory",
                Dialect::CudaError,
                "RuntimeError",
            ),
            (
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                Dialect::CublasAllocFailed,
                "RuntimeError",
            ),
        ] {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            assert_eq!(all[0].dialect, dialect);
            assert_eq!(all[0].framework, Framework::PytorchCudaError);
            assert_eq!(all[0].exception.as_deref(), Some(exception));
            assert_eq!(all[0].requested_bytes, None);
        }
    }
}
