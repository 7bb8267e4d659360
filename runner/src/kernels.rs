//! The kernels of `kernels/stamp.cu`, compiled at run time with NVRTC for the card's
//! architecture: [`Kernels::stamp`] writes an allocation's id into its block when it is handed
//! out, [`Kernels::check`] counts the words that lost it when the block is freed (overlapping
//! blocks), [`Kernels::spin`] waits on the GPU's clock.

// The CUDA driver and NVRTC are C APIs: their calls are `unsafe`, each with its reason in a
// `SAFETY` comment. This module and `kernels` are the only ones in the workspace besides one
// function of the server's PostgreSQL supervisor.
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

use crate::cuda::{CudaDevice, CudaError};

/// The CUDA C source, embedded.
pub const SOURCE: &str = include_str!("../../kernels/stamp.cu");

/// Threads per block and the most blocks a launch uses (grid-stride loops cover the rest).
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 4096;

/// Why the kernels could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No NVRTC library on this machine.
    #[error(
        "no NVRTC here (libnvrtc.so was not found): the runner compiles its kernels at run time"
    )]
    NoNvrtc,
    /// NVRTC refused the source.
    #[error("compiling kernels/stamp.cu: {0}")]
    Compile(String),
    /// A driver call failed.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// Loading or launching failed.
    #[error("{0}: {1}")]
    Launch(&'static str, cudarc::driver::DriverError),
}

/// NVRTC's name for a compute capability (`9.0` → `compute_90`), for the ones this build knows.
fn arch(cc: &str) -> Option<&'static str> {
    Some(match cc {
        "7.0" => "compute_70",
        "7.5" => "compute_75",
        "8.0" => "compute_80",
        "8.6" => "compute_86",
        "8.9" => "compute_89",
        "9.0" => "compute_90",
        "10.0" => "compute_100",
        "12.0" => "compute_120",
        _ => return None,
    })
}

/// The loaded kernels and the stream they run on.
pub struct Kernels {
    stream: Arc<CudaStream>,
    stamp: CudaFunction,
    check: CudaFunction,
    spin: CudaFunction,
    errors: CudaSlice<u64>,
    /// Milliseconds NVRTC took.
    pub compile_ms: f64,
}

impl Kernels {
    /// Compiles and loads the kernels for `dev`.
    pub fn load(dev: &CudaDevice) -> Result<Kernels, KernelError> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(KernelError::NoNvrtc);
        }
        let t = std::time::Instant::now();
        let opts = CompileOptions {
            arch: arch(&dev.info().compute_capability),
            name: Some("stamp.cu".into()),
            ..CompileOptions::default()
        };
        let ptx =
            compile_ptx_with_opts(SOURCE, opts).map_err(|e| KernelError::Compile(e.to_string()))?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let ctx = dev.context();
        let module = ctx
            .load_module(ptx)
            .map_err(|e| KernelError::Launch("cuModuleLoadData", e))?;
        let f = |name: &'static str| {
            module
                .load_function(name)
                .map_err(|e| KernelError::Launch("cuModuleGetFunction", e))
        };
        let stream = ctx.default_stream();
        let errors = stream
            .alloc_zeros::<u64>(1)
            .map_err(|e| KernelError::Launch("cuMemAlloc (error counter)", e))?;
        Ok(Kernels {
            stamp: f("stamp")?,
            check: f("check")?,
            spin: f("spin")?,
            stream,
            errors,
            compile_ms,
        })
    }

    fn config(words: u64) -> LaunchConfig {
        let blocks = words.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Writes `id` into every `stride`-th 8-byte word of `[addr, addr + bytes)` (1: every word).
    pub fn stamp(&self, addr: u64, bytes: u64, stride: u64, id: u64) -> Result<(), KernelError> {
        let words = bytes / 8;
        if words == 0 {
            return Ok(());
        }
        let stride = stride.max(1);
        let mut b = self.stream.launch_builder(&self.stamp);
        b.arg(&addr).arg(&words).arg(&stride).arg(&id);
        // SAFETY: the kernel writes `words` 8-byte words from `addr`, a live block of at least
        // `bytes` bytes that the allocator handed out on this device.
        unsafe { b.launch(Self::config(words.div_ceil(stride))) }
            .map(|_| ())
            .map_err(|e| KernelError::Launch("stamp", e))
    }

    /// Starts counting the stamped words (every `stride`-th) of `[addr, addr + bytes)` that do
    /// not hold `id`; the count is added up on the device and read by [`Kernels::errors`].
    pub fn check(
        &mut self,
        addr: u64,
        bytes: u64,
        stride: u64,
        id: u64,
    ) -> Result<(), KernelError> {
        let words = bytes / 8;
        if words == 0 {
            return Ok(());
        }
        let stride = stride.max(1);
        let mut b = self.stream.launch_builder(&self.check);
        b.arg(&addr)
            .arg(&words)
            .arg(&stride)
            .arg(&id)
            .arg(&mut self.errors);
        // SAFETY: reads every `stride`-th of `words` words of a live block; adds into the
        // one-word counter.
        unsafe { b.launch(Self::config(words.div_ceil(stride))) }
            .map(|_| ())
            .map_err(|e| KernelError::Launch("check", e))
    }

    /// Spins on the GPU for `ns` nanoseconds.
    pub fn spin(&self, ns: u64) -> Result<(), KernelError> {
        let mut b = self.stream.launch_builder(&self.spin);
        b.arg(&ns);
        // SAFETY: the kernel reads only the clock.
        unsafe { b.launch(LaunchConfig::for_num_elems(1)) }
            .map(|_| ())
            .map_err(|e| KernelError::Launch("spin", e))
    }

    /// Waits for the kernels so far and returns the number of words that lost their stamp.
    pub fn errors(&self) -> Result<u64, KernelError> {
        let v = self
            .stream
            .clone_dtoh(&self.errors)
            .map_err(|e| KernelError::Launch("cuMemcpyDtoH (error counter)", e))?;
        Ok(v.first().copied().unwrap_or(0))
    }

    /// Waits for every kernel launched so far.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.stream
            .synchronize()
            .map_err(|e| KernelError::Launch("cuStreamSynchronize", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_has_the_three_kernels() {
        for k in ["void stamp(", "void check(", "void spin("] {
            assert!(SOURCE.contains(k), "{k}");
        }
    }

    #[test]
    fn known_architectures_map_to_nvrtc_names() {
        assert_eq!(arch("9.0"), Some("compute_90"));
        assert_eq!(arch("8.6"), Some("compute_86"));
        assert_eq!(arch("1.0"), None);
    }

    #[test]
    fn launches_cover_large_blocks_with_a_bounded_grid() {
        assert_eq!(Kernels::config(1).grid_dim.0, 1);
        assert_eq!(Kernels::config(256 * 10).grid_dim.0, 10);
        assert_eq!(Kernels::config(u64::MAX / 2).grid_dim.0, MAX_BLOCKS as u32);
    }
}
