//! `oomlens-runner selftest`: the engine's caching allocator on the real GPU against the same
//! allocator on the simulated device, step by step. A deterministic mixed workload (sizes from
//! 512 bytes to 512 MiB, frees in between) runs under a per-process limit, twice over — once with
//! native segments (`cuMemAlloc`), once with `expandable_segments:True` (the VMM calls) — on
//! both devices. After every step the OOM decision and the allocated bytes must be the same (the
//! reserved bytes may differ where the blocks' addresses steer a choice, which they do with
//! native segments; those steps are counted); every block is stamped with its id when handed out and checked when freed (a word
//! that lost its stamp means two live blocks overlapped).

use std::time::Instant;

use oomlens_engine::allocator::{AllocError, AllocatorConfig, CachingAllocator, Device, SimDevice};
use serde::Serialize;

use crate::cuda::{CallStats, CudaDevice};
use crate::kernels::{KernelError, Kernels};

/// One settings' run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// `PYTORCH_CUDA_ALLOC_CONF` of the run.
    pub alloc_conf: String,
    /// Steps (mallocs and frees).
    pub steps: u64,
    /// Mallocs that hit the limit (the same on both devices when `mismatches` is empty).
    pub ooms: u64,
    /// Peak reserved bytes on the GPU.
    pub peak_reserved_bytes: u64,
    /// Steps where the GPU and the simulation decided differently (a malloc that fit on one
    /// and not the other, or other allocated bytes): the first few, described.
    pub mismatches: Vec<String>,
    /// Steps after which only the reserved bytes differed. With native segments this happens:
    /// which of two equal cached blocks serves a request, and which segment is released at the
    /// limit, follow the blocks' addresses, and the GPU's are not the simulation's.
    pub reserved_differs_steps: u64,
    /// The first of those, described.
    pub first_reserved_difference: Option<String>,
    /// Words that lost their stamp.
    pub stamp_errors: u64,
    /// Driver calls.
    pub cuda_calls: CallStats,
    /// Wall time of the GPU side, milliseconds.
    pub wall_ms: f64,
}

/// A small deterministic generator (64-bit LCG), so both devices see the same workload.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A size from 512 B to 512 MiB, log-uniform.
    fn size(&mut self) -> u64 {
        let exp = 9 + self.next() % 21; // 2^9 .. 2^29
        let base = 1u64 << exp;
        base + self.next() % base
    }
}

/// Runs the workload with `alloc_conf` under `limit` bytes.
pub fn run(
    gpu: CudaDevice,
    kernels: &mut Kernels,
    alloc_conf: &str,
    limit: u64,
    steps: u64,
) -> Result<(Run, CudaDevice), KernelError> {
    let config = AllocatorConfig::parse(alloc_conf).map_err(|e| {
        KernelError::Compile(format!("the selftest's settings {alloc_conf:?}: {e}"))
    })?;
    let mut gpu = gpu;
    gpu.calls = CallStats::default();
    let total = gpu.total_memory();
    let mut real = CachingAllocator::new(config.clone(), gpu);
    let mut sim = CachingAllocator::new(config, SimDevice::new(total, None));
    real.set_memory_limit(Some(limit));
    sim.set_memory_limit(Some(limit));
    let mut rng = Lcg(0x00c0_ffee);
    let mut live = Vec::new(); // (real id, sim id, addr, size, stamp)
    let mut out = Run {
        alloc_conf: alloc_conf.to_string(),
        steps,
        ooms: 0,
        peak_reserved_bytes: 0,
        mismatches: Vec::new(),
        reserved_differs_steps: 0,
        first_reserved_difference: None,
        stamp_errors: 0,
        cuda_calls: CallStats::default(),
        wall_ms: 0.0,
    };
    let mismatch = |out: &mut Run, m: String| {
        if out.mismatches.len() < 10 {
            out.mismatches.push(m);
        }
    };
    let t0 = Instant::now();
    for step in 0..steps {
        let free_now = !live.is_empty() && rng.next() % 10 < 4;
        if free_now {
            let k = (rng.next() as usize) % live.len();
            let (rid, sid, addr, size, stamp): (_, _, u64, u64, u64) = live.swap_remove(k);
            kernels.check(addr, size, 1, stamp)?;
            let a = real
                .free(rid)
                .map_err(|e| KernelError::Compile(format!("free: {e}")));
            let b = sim.free(sid);
            if a.is_err() || b.is_err() {
                mismatch(&mut out, format!("step {step}: free failed: {a:?} / {b:?}"));
            }
        } else {
            let size = rng.size();
            let a = real.malloc(size, 0);
            let b = sim.malloc(size, 0);
            match (a, b) {
                (Ok(x), Ok(y)) => {
                    let stamp = step + 1;
                    if !real.device().backs(x.addr, x.size) {
                        let around: Vec<String> = real
                            .device()
                            .segments()
                            .iter()
                            .filter(|(a, s)| *a <= x.addr + x.size && x.addr <= a + s)
                            .map(|(a, s)| format!("[{a:#x}, {:#x})", a + s))
                            .collect();
                        return Err(KernelError::Compile(format!(
                            "step {step}: malloc({size}) gave [{:#x}, {:#x}), which no live segment holds; segments around it: {}; all segments: {:x?}; cuMemAlloc calls {}; block {:?}; sim gave {:#x}+{}",
                            x.addr,
                            x.addr + x.size,
                            around.join(" "),
                            real.device().segments(),
                            real.device().calls.alloc.count,
                            real.block(x.id),
                            y.addr,
                            y.size
                        )));
                    }
                    kernels.stamp(x.addr, x.size, 1, stamp)?;
                    if std::env::var_os("OOMLENS_RUNNER_SYNC").is_some() {
                        kernels.synchronize().map_err(|e| {
                            KernelError::Compile(format!(
                                "step {step}: stamp of {:#x} ({} bytes, request {size}): {e}",
                                x.addr, x.size
                            ))
                        })?;
                    }
                    live.push((x.id, y.id, x.addr, x.size, stamp));
                }
                (Err(AllocError::OutOfMemory(_)), Err(AllocError::OutOfMemory(_))) => {
                    out.ooms += 1;
                }
                (Err(AllocError::Device(e)), _) => {
                    return Err(KernelError::Compile(format!(
                        "step {step}: the GPU failed: {e}"
                    )));
                }
                (x, y) => mismatch(
                    &mut out,
                    format!(
                        "step {step}: malloc({size}): GPU {} / simulation {}",
                        if x.is_ok() { "ok" } else { "OOM" },
                        if y.is_ok() { "ok" } else { "OOM" }
                    ),
                ),
            }
        }
        if real.allocated() != sim.allocated() {
            mismatch(
                &mut out,
                format!(
                    "step {step}: GPU allocated {}, simulation {}",
                    real.allocated(),
                    sim.allocated()
                ),
            );
        } else if real.reserved() != sim.reserved() {
            out.reserved_differs_steps += 1;
            if out.first_reserved_difference.is_none() {
                out.first_reserved_difference = Some(format!(
                    "step {step}: GPU reserved {}, simulation {}",
                    real.reserved(),
                    sim.reserved()
                ));
            }
        }
        out.peak_reserved_bytes = out.peak_reserved_bytes.max(real.reserved());
    }
    for (rid, _, addr, size, stamp) in live.drain(..) {
        kernels.check(addr, size, 1, stamp)?;
        let _ = real.free(rid);
    }
    out.stamp_errors = kernels.errors()?;
    let _ = real.empty_cache();
    out.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let (gpu, _) = real.into_parts();
    out.cuda_calls = gpu.calls;
    Ok((out, gpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_deterministic_and_spans_the_sizes() {
        let mut a = Lcg(0x00c0_ffee);
        let mut b = Lcg(0x00c0_ffee);
        let xs: Vec<u64> = (0..1000).map(|_| a.size()).collect();
        let ys: Vec<u64> = (0..1000).map(|_| b.size()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().any(|&s| s < 4096) && xs.iter().any(|&s| s > 256 << 20));
        assert!(xs.iter().all(|&s| (512..1 << 30).contains(&s)));
    }
}
