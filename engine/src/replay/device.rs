//! What a replay asks of a device beyond the allocator's [`Device`]: [`ReplayDevice`]. The
//! simulation ([`SimDevice`]) and a real GPU (the runner's) both implement it, so one replay
//! driver runs a trace on either.

use crate::allocator::{AddressOracle, Device, OracleDivergence, SimDevice};
use crate::snapshot::TraceEntry;

/// A device a trace can be replayed on (see [`crate::replay::replay_on`]).
///
/// Beyond memory, the driver tells the device which blocks the program holds — a real GPU can
/// stamp them and check the stamps when they are freed (overlapping blocks would be caught) —
/// and which trace entry comes next (to keep the recorded time between entries).
pub trait ReplayDevice: Device {
    /// Whether `bytes` more could be had from the device now, the allocator's own limit aside
    /// (the driver asks this when it decides what the recorded program did).
    fn fits(&self, bytes: u64) -> bool;

    /// Takes over a segment that existed before the trace's first entry (a trace that starts
    /// mid-run) and returns the address it has on this device: the recorded one in a
    /// simulation, a new allocation of the same size on a GPU. `Ok(None)`: out of memory.
    fn adopt_segment(&mut self, addr: u64, size: u64) -> Result<Option<u64>, Self::Error>;

    /// Offered the recorded segment addresses before the replay starts. A device that can hand
    /// them out (a simulation) uses them; a GPU cannot choose its addresses and ignores them.
    fn offer_oracle(&mut self, oracle: AddressOracle) {
        let _ = oracle;
    }

    /// Segment and reservation addresses the oracle answered, and the first request it could
    /// not.
    fn oracle_report(&self) -> (usize, usize, Option<OracleDivergence>) {
        (0, 0, None)
    }

    /// The program got the block `[addr, addr + size)` (a successful malloc).
    fn block_allocated(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        let _ = (addr, size);
        Ok(())
    }

    /// The program frees the block `[addr, addr + size)` (called before the allocator takes it
    /// back).
    fn block_freed(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        let _ = (addr, size);
        Ok(())
    }

    /// The driver is about to replay `entry` (index `index` of the trace).
    fn before_entry(&mut self, index: usize, entry: &TraceEntry) -> Result<(), Self::Error> {
        let _ = (index, entry);
        Ok(())
    }
}

impl ReplayDevice for SimDevice {
    fn fits(&self, bytes: u64) -> bool {
        SimDevice::fits(self, bytes)
    }

    fn adopt_segment(&mut self, addr: u64, size: u64) -> Result<Option<u64>, Self::Error> {
        SimDevice::adopt_segment(self, addr, size);
        Ok(Some(addr))
    }

    fn offer_oracle(&mut self, oracle: AddressOracle) {
        self.set_oracle(oracle);
    }

    fn oracle_report(&self) -> (usize, usize, Option<OracleDivergence>) {
        let (s, r) = self.oracle_answered();
        (s, r, self.divergence())
    }
}

/// A device lent to a replay (see [`crate::replay::replay_on`]).
impl<D: ReplayDevice + ?Sized> ReplayDevice for &mut D {
    fn fits(&self, bytes: u64) -> bool {
        (**self).fits(bytes)
    }
    fn adopt_segment(&mut self, addr: u64, size: u64) -> Result<Option<u64>, Self::Error> {
        (**self).adopt_segment(addr, size)
    }
    fn offer_oracle(&mut self, oracle: AddressOracle) {
        (**self).offer_oracle(oracle);
    }
    fn oracle_report(&self) -> (usize, usize, Option<OracleDivergence>) {
        (**self).oracle_report()
    }
    fn block_allocated(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        (**self).block_allocated(addr, size)
    }
    fn block_freed(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        (**self).block_freed(addr, size)
    }
    fn before_entry(&mut self, index: usize, entry: &TraceEntry) -> Result<(), Self::Error> {
        (**self).before_entry(index, entry)
    }
}
