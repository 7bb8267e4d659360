//! [`CudaDevice`]: the engine's [`Device`] on a real GPU, through the CUDA driver API (cudarc,
//! loaded at run time). Segments are `cuMemAlloc`/`cuMemFree`; expandable segments are the
//! virtual memory API (`cuMemAddressReserve`, then per page `cuMemCreate` + `cuMemMap` +
//! `cuMemSetAccess`, and back with `cuMemUnmap` + `cuMemRelease`). Out of memory is an answer
//! (`Ok(None)` / `Ok(false)`), as the trait asks; every other driver error is an `Err`.
//!
//! The CUDA context is current on the thread that made the device only: keep every call on that
//! thread (the runner is single-threaded). Each call is counted and timed ([`CallStats`]).

// The CUDA driver and NVRTC are C APIs: their calls are `unsafe`, each with its reason in a
// `SAFETY` comment. This module and `kernels` are the only ones in the workspace besides one
// function of the server's PostgreSQL supervisor.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, DriverError};
use oomlens_engine::allocator::Device;
use serde::Serialize;

/// Why the GPU could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No CUDA driver library on this machine.
    #[error(
        "no CUDA driver here (libcuda.so was not found): the runner needs an NVIDIA GPU and its driver"
    )]
    NoDriver,
    /// A driver call failed (other than running out of memory).
    #[error("{call}: {error}")]
    Driver {
        /// The call.
        call: &'static str,
        /// The driver's error.
        error: DriverError,
    },
    /// An address the allocator gave back was not one this device handed out.
    #[error("{0}")]
    Unknown(String),
}

fn check(call: &'static str, r: CUresult) -> Result<(), CudaError> {
    r.result()
        .map_err(|error| CudaError::Driver { call, error })
}

/// Whether `r` is the driver's "out of memory".
fn is_oom(r: CUresult) -> bool {
    r == CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

/// What the device is.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// `cuDeviceGetName`.
    pub name: String,
    /// Ordinal.
    pub ordinal: usize,
    /// `cuDeviceTotalMem`.
    pub total_memory_bytes: u64,
    /// Free when the runner started (`cuMemGetInfo`).
    pub free_memory_bytes: u64,
    /// Compute capability, `major.minor`.
    pub compute_capability: String,
    /// `cuDriverGetVersion`, e.g. `13.0`.
    pub driver_cuda_version: String,
}

/// Count and total time of one kind of driver call.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CallCount {
    /// Calls.
    pub count: u64,
    /// Total time, milliseconds.
    pub ms: f64,
}

impl CallCount {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ms += d.as_secs_f64() * 1e3;
    }
}

/// The driver calls a replay made.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CallStats {
    /// `cuMemAlloc`.
    pub alloc: CallCount,
    /// `cuMemFree`.
    pub free: CallCount,
    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`, per page.
    pub map: CallCount,
    /// `cuMemUnmap` + `cuMemRelease`, per page.
    pub unmap: CallCount,
    /// `cuMemAddressReserve` / `cuMemAddressFree`.
    pub reserve: CallCount,
    /// Allocations the driver refused for lack of memory.
    pub out_of_memory: u64,
}

/// One GPU, as the caching allocator's device.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    /// Physical pages mapped into reservations: address → (handle, size).
    pages: BTreeMap<u64, (sys::CUmemGenericAllocationHandle, u64)>,
    /// Live `cuMemAlloc` segments (address → size), so a bad free is caught, not passed on.
    segments: HashMap<u64, u64>,
    /// Live address reservations (base → size).
    reservations: HashMap<u64, u64>,
    /// Memory held so that a smaller card is emulated ([`CudaDevice::emulate`]).
    ballast: Vec<u64>,
    /// `totalGlobalMem` of the emulated card.
    emulated_total: Option<u64>,
    /// The driver calls so far.
    pub calls: CallStats,
}

/// A smaller card, emulated by holding the rest of the GPU's memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Emulation {
    /// The card's size.
    pub device_memory_bytes: u64,
    /// In use before the ballast (this process's CUDA context, and anything else on the GPU).
    pub in_use_before_bytes: u64,
    /// Held as ballast.
    pub ballast_bytes: u64,
    /// Free after the ballast: what the allocator can get from the driver, as on that card
    /// with this context on it.
    pub free_after_bytes: u64,
}

impl CudaDevice {
    /// Opens GPU `ordinal` and makes its context current on this thread.
    pub fn open(ordinal: usize) -> Result<CudaDevice, CudaError> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        let ctx = CudaContext::new(ordinal).map_err(|error| CudaError::Driver {
            call: "cuCtxCreate",
            error,
        })?;
        ctx.bind_to_thread().map_err(|error| CudaError::Driver {
            call: "cuCtxSetCurrent",
            error,
        })?;
        let name = ctx.name().map_err(|error| CudaError::Driver {
            call: "cuDeviceGetName",
            error,
        })?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|error| CudaError::Driver {
                call: "cuDeviceGetAttribute",
                error,
            })?;
        let mut total = 0usize;
        // SAFETY: a valid device handle and an out pointer to a local.
        check("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total, ctx.cu_device())
        })?;
        let mut version = 0i32;
        // SAFETY: an out pointer to a local.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        let mut dev = CudaDevice {
            ctx,
            info: DeviceInfo {
                name,
                ordinal,
                total_memory_bytes: total as u64,
                free_memory_bytes: 0,
                compute_capability: format!("{major}.{minor}"),
                driver_cuda_version: format!("{}.{}", version / 1000, (version % 1000) / 10),
            },
            pages: BTreeMap::new(),
            segments: HashMap::new(),
            reservations: HashMap::new(),
            ballast: Vec::new(),
            emulated_total: None,
            calls: CallStats::default(),
        };
        dev.info.free_memory_bytes = dev.mem_info()?.0;
        Ok(dev)
    }

    /// The device's name, memory and versions.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Emulates a card of `card` bytes: holds all free memory but what that card would have
    /// free with what is in use now (this context included), so the driver itself refuses
    /// where the smaller card would. Its `totalGlobalMem` becomes `card`. Ballast is taken in
    /// 1 GiB `cuMemAlloc`s, then smaller ones down to 2 MiB (the driver's granularity).
    pub fn emulate(&mut self, card: u64) -> Result<Emulation, CudaError> {
        let (free, total) = self.mem_info()?;
        let in_use = total.saturating_sub(free);
        if card <= in_use || card > total {
            return Err(CudaError::Unknown(format!(
                "--device-memory {}: must be more than the {} already in use on this GPU and at most its {}",
                oomlens_engine::Bytes(card),
                oomlens_engine::Bytes(in_use),
                oomlens_engine::Bytes(total)
            )));
        }
        let target = card - in_use;
        let mut chunk: u64 = 1 << 30;
        while chunk >= 2 << 20 {
            let (free, _) = self.mem_info()?;
            if free < target.saturating_add(chunk) {
                chunk /= 2;
                continue;
            }
            let mut ptr: sys::CUdeviceptr = 0;
            // SAFETY: an out pointer to a local; the context is current on this thread.
            let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, chunk as usize) };
            if is_oom(r) {
                chunk /= 2;
                continue;
            }
            check("cuMemAlloc (ballast)", r)?;
            self.ballast.push(ptr);
        }
        let (free_after, _) = self.mem_info()?;
        self.emulated_total = Some(card);
        Ok(Emulation {
            device_memory_bytes: card,
            in_use_before_bytes: in_use,
            ballast_bytes: free.saturating_sub(free_after),
            free_after_bytes: free_after,
        })
    }

    /// Gives the ballast back: the whole GPU again.
    pub fn drop_ballast(&mut self) -> Result<(), CudaError> {
        for addr in std::mem::take(&mut self.ballast) {
            // SAFETY: ballast from cuMemAlloc, not freed.
            check("cuMemFree (ballast)", unsafe { sys::cuMemFree_v2(addr) })?;
        }
        self.emulated_total = None;
        Ok(())
    }

    /// Gives back everything a replay left (segments, mapped pages, reservations), so the next
    /// replay starts from an empty allocator; the ballast stays.
    pub fn release_all(&mut self) -> Result<(), CudaError> {
        // SAFETY: no arguments; the context is current on this thread.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })?;
        let pages: Vec<(u64, u64)> = self.pages.iter().map(|(&a, &(_, s))| (a, s)).collect();
        for (addr, size) in pages {
            self.unmap_page(addr, size)?;
        }
        for (base, size) in std::mem::take(&mut self.reservations) {
            // SAFETY: a reservation of ours, now unmapped.
            check("cuMemAddressFree", unsafe {
                sys::cuMemAddressFree(base, size as usize)
            })?;
        }
        for (addr, _) in std::mem::take(&mut self.segments) {
            // SAFETY: a segment from cuMemAlloc, not freed.
            check("cuMemFree", unsafe { sys::cuMemFree_v2(addr) })?;
        }
        Ok(())
    }

    /// Whether `[addr, addr + size)` lies inside one live `cuMemAlloc` segment or is covered by
    /// mapped pages of a reservation: where every block the allocator hands out must be.
    pub fn backs(&self, addr: u64, size: u64) -> bool {
        if self
            .segments
            .iter()
            .any(|(&base, &len)| addr >= base && addr + size <= base + len)
        {
            return true;
        }
        let end = addr + size;
        let mut at = addr;
        while at < end {
            match self.pages.range(..=at).next_back() {
                Some((&start, &(_, len))) if start + len > at => at = start + len,
                _ => return false,
            }
        }
        size > 0
    }

    /// The live `cuMemAlloc` segments, by address.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.segments.iter().map(|(&a, &s)| (a, s)).collect();
        v.sort_unstable();
        v
    }

    /// The context (for kernels).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// `cuMemGetInfo`: (free, total).
    pub fn mem_info(&self) -> Result<(u64, u64), CudaError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out pointers to locals; the context is current on this thread.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free as u64, total as u64))
    }

    fn prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct; all-zero is its documented default before the fields below.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.info.ordinal as i32;
        prop
    }

    /// Maps one page at `addr`: `Ok(false)` when the device is out of memory.
    fn map_page(&mut self, addr: u64, page: u64) -> Result<bool, CudaError> {
        let prop = self.prop();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` is a valid description; `handle` is an out pointer to a local.
        let r = unsafe { sys::cuMemCreate(&mut handle, page as usize, &prop, 0) };
        if is_oom(r) {
            self.calls.out_of_memory += 1;
            return Ok(false);
        }
        check("cuMemCreate", r)?;
        // SAFETY: `addr` lies in a reservation of ours (the allocator's contract) and is
        // page-aligned; `handle` was just created with the page's size.
        let mapped = unsafe { sys::cuMemMap(addr, page as usize, 0, handle, 0) };
        if let Err(e) = check("cuMemMap", mapped) {
            // SAFETY: releasing the handle created above, mapped nowhere.
            unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        let desc = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range was just mapped; one descriptor.
        check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(addr, page as usize, &desc, 1)
        })?;
        self.pages.insert(addr, (handle, page));
        Ok(true)
    }

    fn unmap_page(&mut self, addr: u64, page: u64) -> Result<(), CudaError> {
        let (handle, _) = self.pages.remove(&addr).ok_or_else(|| {
            CudaError::Unknown(format!("unmap of {addr:#x}: no page mapped there"))
        })?;
        // SAFETY: the page was mapped by `map_page` with this size.
        check("cuMemUnmap", unsafe {
            sys::cuMemUnmap(addr, page as usize)
        })?;
        // SAFETY: the handle is no longer mapped anywhere.
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
    }
}

impl Device for CudaDevice {
    type Error = CudaError;

    fn total_memory(&self) -> u64 {
        self.emulated_total.unwrap_or(self.info.total_memory_bytes)
    }

    fn allocate(&mut self, size: u64) -> Result<Option<u64>, CudaError> {
        let t = Instant::now();
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: an out pointer to a local; the context is current on this thread.
        let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, size as usize) };
        self.calls.alloc.add(t.elapsed());
        if is_oom(r) {
            self.calls.out_of_memory += 1;
            return Ok(None);
        }
        check("cuMemAlloc", r)?;
        self.segments.insert(ptr, size);
        Ok(Some(ptr))
    }

    fn free(&mut self, addr: u64, size: u64) -> Result<(), CudaError> {
        match self.segments.remove(&addr) {
            Some(s) if s == size => {}
            other => {
                return Err(CudaError::Unknown(format!(
                    "free of {addr:#x} ({size} bytes): {}",
                    match other {
                        Some(s) => format!("the segment there has {s} bytes"),
                        None => "no segment starts there".into(),
                    }
                )));
            }
        }
        let t = Instant::now();
        // SAFETY: `addr` came from cuMemAlloc and was not freed (checked above).
        let r = unsafe { sys::cuMemFree_v2(addr) };
        self.calls.free.add(t.elapsed());
        check("cuMemFree", r)
    }

    fn reserve(&mut self, size: u64) -> Result<u64, CudaError> {
        let t = Instant::now();
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: an out pointer to a local; no fixed address, default alignment.
        let r = unsafe { sys::cuMemAddressReserve(&mut base, size as usize, 0, 0, 0) };
        self.calls.reserve.add(t.elapsed());
        check("cuMemAddressReserve", r)?;
        self.reservations.insert(base, size);
        Ok(base)
    }

    fn release(&mut self, base: u64, size: u64) -> Result<(), CudaError> {
        self.reservations.remove(&base);
        let t = Instant::now();
        // SAFETY: a whole reservation of ours, all of it unmapped (the trait's contract).
        let r = unsafe { sys::cuMemAddressFree(base, size as usize) };
        self.calls.reserve.add(t.elapsed());
        check("cuMemAddressFree", r)
    }

    fn map(&mut self, addr: u64, size: u64, page_size: u64) -> Result<bool, CudaError> {
        let t = Instant::now();
        let pages = size / page_size.max(1);
        for i in 0..pages {
            match self.map_page(addr + i * page_size, page_size) {
                Ok(true) => {}
                Ok(false) => {
                    // All or nothing: give back the pages made so far, as PyTorch does.
                    for j in 0..i {
                        self.unmap_page(addr + j * page_size, page_size)?;
                    }
                    self.calls.map.add(t.elapsed());
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        self.calls.map.add(t.elapsed());
        Ok(true)
    }

    fn unmap(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), CudaError> {
        let t = Instant::now();
        // Unlike cuMemFree, cuMemUnmap/cuMemRelease do not wait for kernels still using the
        // pages: wait for them first, as PyTorch's ExpandableSegment::unmapHandles does (found
        // by the stamp kernels on the H200: without it a pending kernel hit unmapped memory).
        // SAFETY: no arguments; the context is current on this thread.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })?;
        let pages = size / page_size.max(1);
        for i in 0..pages {
            self.unmap_page(addr + i * page_size, page_size)?;
        }
        self.calls.unmap.add(t.elapsed());
        Ok(())
    }

    fn free_memory(&mut self) -> Result<u64, CudaError> {
        Ok(self.mem_info()?.0)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Segments the allocator still holds go back to the driver; mapped pages and
        // reservations go with the context when its last handle is dropped.
        for addr in self
            .segments
            .drain()
            .map(|(a, _)| a)
            .chain(self.ballast.drain(..))
        {
            // SAFETY: segments (and ballast) from cuMemAlloc, not freed.
            let _ = unsafe { sys::cuMemFree_v2(addr) };
        }
    }
}
