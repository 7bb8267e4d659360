//! The `Device` trait: the few memory operations the caching allocator asks of a GPU, shaped like
//! the CUDA calls PyTorch makes, so that the same allocator drives a simulation ([`SimDevice`])
//! and a real card (the runner's `CudaDevice`).
//!
//! | method | CUDA |
//! |---|---|
//! | [`Device::allocate`] / [`Device::free`] | `cudaMalloc` / `cudaFree` (cuMemAlloc / cuMemFree) |
//! | [`Device::reserve`] / [`Device::release`] | `cuMemAddressReserve` / `cuMemAddressFree` |
//! | [`Device::map`] / [`Device::unmap`] | `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` per page / `cuMemUnmap` + `cuMemRelease` per page |
//! | [`Device::free_memory`] | `cudaMemGetInfo` (free) |
//! | [`Device::total_memory`] | `cudaDeviceProp::totalGlobalMem` |
//!
//! Out of memory is not an error here: it is an answer (`Ok(None)`, `Ok(false)`), as
//! `cudaErrorMemoryAllocation` is for PyTorch, which clears it and goes down its release paths.
//! `Err` is for everything else (an invalid address, a driver failure) and aborts the operation.
//!
//! [`SimDevice`]: super::SimDevice

use std::fmt;

/// Memory of one device, as the caching allocator uses it. Implementations must be cheap to call:
/// the allocator calls them only when it needs a new segment or returns one, never per block.
pub trait Device {
    /// A failure that is not "out of memory".
    type Error: fmt::Debug + fmt::Display;

    /// `totalGlobalMem`: sizes the virtual address range of an expandable segment
    /// (1⅛ × this) and is the base of a memory fraction.
    fn total_memory(&self) -> u64;

    /// `cudaMalloc(size)`: the base address of a new segment, or `None` when the device is out of
    /// memory.
    fn allocate(&mut self, size: u64) -> Result<Option<u64>, Self::Error>;

    /// `cudaFree` of a segment that [`Device::allocate`] returned, with its size.
    fn free(&mut self, addr: u64, size: u64) -> Result<(), Self::Error>;

    /// `cuMemAddressReserve(size)`: virtual address space for an expandable segment; no physical
    /// memory yet. Returns the base.
    fn reserve(&mut self, size: u64) -> Result<u64, Self::Error>;

    /// `cuMemAddressFree` of a whole reservation (all of it unmapped).
    fn release(&mut self, base: u64, size: u64) -> Result<(), Self::Error>;

    /// Backs `[addr, addr + size)` (inside a reservation, page-aligned, a whole number of pages)
    /// with physical memory, one `page_size` allocation per page, all or nothing: `Ok(false)` when
    /// the device is out of memory (pages created before the failure are given back first, as
    /// PyTorch's `ExpandableSegment::map` does).
    fn map(&mut self, addr: u64, size: u64, page_size: u64) -> Result<bool, Self::Error>;

    /// Unmaps and releases the pages of `[addr, addr + size)` (page-aligned, mapped).
    fn unmap(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), Self::Error>;

    /// `cudaMemGetInfo`'s free bytes, as the allocator reports them in an `oom` trace entry.
    fn free_memory(&mut self) -> Result<u64, Self::Error>;
}

/// A device lent to an allocator: the caller keeps it when the allocator is gone (a replay that
/// fails still hands back its GPU).
impl<D: Device + ?Sized> Device for &mut D {
    type Error = D::Error;

    fn total_memory(&self) -> u64 {
        (**self).total_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<Option<u64>, Self::Error> {
        (**self).allocate(size)
    }
    fn free(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        (**self).free(addr, size)
    }
    fn reserve(&mut self, size: u64) -> Result<u64, Self::Error> {
        (**self).reserve(size)
    }
    fn release(&mut self, base: u64, size: u64) -> Result<(), Self::Error> {
        (**self).release(base, size)
    }
    fn map(&mut self, addr: u64, size: u64, page_size: u64) -> Result<bool, Self::Error> {
        (**self).map(addr, size, page_size)
    }
    fn unmap(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), Self::Error> {
        (**self).unmap(addr, size, page_size)
    }
    fn free_memory(&mut self) -> Result<u64, Self::Error> {
        (**self).free_memory()
    }
}
