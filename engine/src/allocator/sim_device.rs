//! [`SimDevice`]: a [`Device`] without a GPU — capacity accounting and an address model.
//!
//! # Capacity
//!
//! `capacity` is the physical memory the process may obtain (cudaMalloc'd segments plus mapped
//! pages); `None` is unlimited. `allocate` and `map` answer "out of memory" past it, as the
//! driver would. (A per-process *fraction* is not a device property: the allocator checks it
//! itself before calling the device, spec C.6.) `free_memory` is `capacity` (or, if unlimited,
//! `total_memory`) minus what is in use.
//!
//! # Addresses
//!
//! Addresses matter: best fit breaks ties between equal-sized free blocks by address (spec C.5),
//! so which segment a request lands in depends on where the driver put the segments.
//!
//! * **Oracle** ([`AddressOracle`]): the addresses the real run got, taken from its trace in order
//!   — every `segment_alloc` address for `allocate`, and for `reserve` the base of every
//!   expandable segment (the first `segment_map` outside any live reservation). A request takes
//!   the next recorded address if its size is the recorded size. On the first mismatch (or when
//!   the recorded ones run out) the oracle is abandoned for good, the mismatch is kept
//!   ([`SimDevice::divergence`]), and synthetic addresses are used from then on. A replay with
//!   the recorded settings thus reproduces the real addresses exactly, and one with other
//!   settings keeps them for as long as it makes the same requests.
//! * **Synthetic**: 2 MiB-aligned addresses handed out from a cursor that only moves one way and
//!   never reuses an address, starting above every address the oracle could give. Descending (the
//!   default) mimics what the CUDA driver was seen doing on the corpus — new large segments below
//!   the previous ones — so the newest of two equal free blocks wins a tie, as it tended to in
//!   the real runs; ascending gives the oldest. The driver's real policy (which also reuses freed
//!   ranges) is not documented, so this is a model. Measured on the 46 corpus snapshots
//!   replayed without the oracle (`shared_corpus_sweep` in `tests/replay.rs`): descending gives
//!   the recorded peak reserved bytes for all 46 and the recorded peak allocated bytes for 44
//!   (two off by 3.5 MiB); ascending gives 41 and 32. The OOM outcome was PyTorch's for all 46
//!   either way.

use std::collections::VecDeque;
use std::fmt;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::Device;
use crate::snapshot::{Action, TraceEntry};

/// 2 MiB: alignment of synthetic addresses (the driver's allocation granularity).
const ALIGN: u64 = 2 << 20;
/// Where descending synthetic addresses start when no oracle address is higher: the top of the
/// region CUDA used for device memory in the corpus (0x7fxx_xxxx_xxxx).
const SYNTHETIC_TOP: u64 = 0x7fff_0000_0000;
/// Where ascending synthetic addresses start (above any oracle address, see [`SimDevice::new`]).
const SYNTHETIC_BOTTOM: u64 = 0x1000_0000_0000;

/// Which way synthetic addresses go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressOrder {
    /// Each new segment below the previous one (what the driver was seen doing).
    #[default]
    Descending,
    /// Each new segment above the previous one.
    Ascending,
}

/// Recorded addresses to hand out, in the order the real run got them.
#[derive(Debug, Clone, Default)]
pub struct AddressOracle {
    /// `(address, size)` of every `segment_alloc`.
    pub segments: VecDeque<(u64, u64)>,
    /// Base address of every expandable segment's reservation.
    pub reservations: VecDeque<u64>,
}

impl AddressOracle {
    /// The addresses of a trace. `reservation_size` is the size of one expandable segment's
    /// address range (to tell a mapping inside a known reservation from a new one); see
    /// [`expandable_reservation_size`](super::expandable_reservation_size).
    pub fn from_trace(entries: &[TraceEntry], reservation_size: u64) -> AddressOracle {
        Self::from_entries(entries, reservation_size)
    }

    /// [`AddressOracle::from_trace`] over any sequence of trace entries (only the segment
    /// entries matter, so a caller that already picked them out can pass just those).
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = &'a TraceEntry>,
        reservation_size: u64,
    ) -> AddressOracle {
        let mut oracle = AddressOracle::default();
        // Live reservations: (base, mapped bytes).
        let mut live: Vec<(u64, u64)> = Vec::new();
        for e in entries {
            match e.action {
                Action::SegmentAlloc => oracle.segments.push_back((e.addr, e.size)),
                Action::SegmentMap => {
                    match live
                        .iter_mut()
                        .find(|(b, _)| e.addr >= *b && e.addr - *b < reservation_size)
                    {
                        Some((_, mapped)) => *mapped = mapped.saturating_add(e.size),
                        None => {
                            oracle.reservations.push_back(e.addr);
                            live.push((e.addr, e.size));
                        }
                    }
                }
                Action::SegmentUnmap => {
                    if let Some(pos) = live
                        .iter()
                        .position(|(b, _)| e.addr >= *b && e.addr - *b < reservation_size)
                    {
                        let mapped = live[pos].1.saturating_sub(e.size);
                        if mapped == 0 {
                            // Fully unmapped: PyTorch releases the whole range.
                            live.swap_remove(pos);
                        } else {
                            live[pos].1 = mapped;
                        }
                    }
                }
                _ => {}
            }
        }
        oracle
    }

    /// The highest address the oracle can hand out, plus the size there.
    fn top(&self, reservation_size: u64) -> u64 {
        let segs = self.segments.iter().map(|(a, s)| a.saturating_add(*s));
        let res = self
            .reservations
            .iter()
            .map(|b| b.saturating_add(reservation_size));
        segs.chain(res).max().unwrap_or(0)
    }
}

/// Why the oracle was abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum OracleMiss {
    /// A segment of another size than the next recorded one was asked for.
    SizeMismatch {
        /// The recorded size.
        expected: u64,
        /// The size asked for.
        got: u64,
    },
    /// More segments (or reservations) were asked for than the trace recorded.
    Exhausted,
    /// The next recorded reservation overlaps one still live.
    Overlap,
}

/// The first request the oracle could not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OracleDivergence {
    /// What did not match.
    pub miss: OracleMiss,
    /// `allocate` (false) or `reserve` (true).
    pub reservation: bool,
    /// How many requests of that kind the oracle had answered before.
    pub answered: usize,
}

/// What a [`SimDevice`] refuses: operations no real driver would accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimDeviceError {
    /// `free` of an address `allocate` did not return (or of the wrong size).
    #[error("free of unknown segment 0x{addr:x} ({size} bytes)")]
    UnknownSegment {
        /// Address.
        addr: u64,
        /// Size given.
        size: u64,
    },
    /// `map`/`unmap`/`release` outside a live reservation.
    #[error("{op} of [0x{addr:x}, +{size}) outside any reservation")]
    OutsideReservation {
        /// The operation.
        op: &'static str,
        /// Address.
        addr: u64,
        /// Size.
        size: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Reservation {
    base: u64,
    size: u64,
    mapped: u64,
}

/// A simulated device: capacity accounting and an address model (see the module docs).
#[derive(Debug, Clone)]
pub struct SimDevice {
    total: u64,
    capacity: Option<u64>,
    used: u64,
    order: AddressOrder,
    cursor: u64,
    oracle: Option<AddressOracle>,
    answered_segments: usize,
    answered_reservations: usize,
    divergence: Option<OracleDivergence>,
    segments: FxHashMap<u64, u64>,
    reservations: Vec<Reservation>,
}

impl SimDevice {
    /// A device of `total` bytes (`totalGlobalMem`) of which this process may use `capacity`
    /// (`None`: no physical limit), with descending synthetic addresses.
    pub fn new(total: u64, capacity: Option<u64>) -> SimDevice {
        SimDevice {
            total,
            capacity,
            used: 0,
            order: AddressOrder::Descending,
            cursor: SYNTHETIC_TOP,
            oracle: None,
            answered_segments: 0,
            answered_reservations: 0,
            divergence: None,
            segments: FxHashMap::default(),
            reservations: Vec::new(),
        }
    }

    /// Synthetic addresses in this order (before any address is handed out).
    pub fn with_order(mut self, order: AddressOrder) -> SimDevice {
        self.order = order;
        self.reset_cursor();
        self
    }

    /// Hands out the oracle's addresses first (see the module docs).
    pub fn with_oracle(mut self, oracle: AddressOracle) -> SimDevice {
        self.oracle = Some(oracle);
        self.reset_cursor();
        self
    }

    /// Hands out the oracle's addresses from now on (see the module docs).
    pub fn set_oracle(&mut self, oracle: AddressOracle) {
        self.oracle = Some(oracle);
        self.answered_segments = 0;
        self.answered_reservations = 0;
        self.divergence = None;
        self.reset_cursor();
    }

    fn reset_cursor(&mut self) {
        let va = super::expandable_reservation_size(self.total, ALIGN);
        let top = self.oracle.as_ref().map_or(0, |o| o.top(va));
        self.cursor = match self.order {
            // Descend from far enough above every oracle address (64 TiB) never to meet one.
            AddressOrder::Descending if top > 0 => align_up(top, ALIGN).saturating_add(1 << 46),
            AddressOrder::Descending => SYNTHETIC_TOP,
            AddressOrder::Ascending => SYNTHETIC_BOTTOM.max(align_up(top, ALIGN)),
        };
    }

    /// Takes over a segment that already exists (a trace that starts mid-run): it counts as in
    /// use and can be freed.
    pub fn adopt_segment(&mut self, addr: u64, size: u64) {
        if self.segments.insert(addr, size).is_none() {
            self.used = self.used.saturating_add(size);
        }
    }

    /// Bytes in use (segments and mapped pages).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The physical limit.
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Whether `bytes` more would fit under the physical limit.
    pub fn fits(&self, bytes: u64) -> bool {
        self.capacity
            .is_none_or(|c| self.used.saturating_add(bytes) <= c)
    }

    /// The first request the oracle could not answer, if any.
    pub fn divergence(&self) -> Option<OracleDivergence> {
        self.divergence
    }

    /// The oracle is (still) in use.
    pub fn oracle_active(&self) -> bool {
        self.oracle.is_some()
    }

    /// Segment addresses the oracle handed out.
    pub fn oracle_answered(&self) -> (usize, usize) {
        (self.answered_segments, self.answered_reservations)
    }

    fn abandon(&mut self, miss: OracleMiss, reservation: bool) {
        if self.oracle.take().is_some() && self.divergence.is_none() {
            self.divergence = Some(OracleDivergence {
                miss,
                reservation,
                answered: if reservation {
                    self.answered_reservations
                } else {
                    self.answered_segments
                },
            });
        }
    }

    fn synthetic(&mut self, size: u64) -> u64 {
        match self.order {
            AddressOrder::Ascending => {
                let addr = align_up(self.cursor, ALIGN);
                self.cursor = addr.saturating_add(size);
                addr
            }
            AddressOrder::Descending => {
                let addr = align_down(self.cursor.saturating_sub(size), ALIGN);
                self.cursor = addr;
                addr
            }
        }
    }

    fn reservation_of(&self, addr: u64, size: u64) -> Option<usize> {
        self.reservations.iter().position(|r| {
            addr >= r.base && addr.saturating_add(size) <= r.base.saturating_add(r.size)
        })
    }
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a).saturating_mul(a)
}

fn align_down(v: u64, a: u64) -> u64 {
    v / a * a
}

impl Device for SimDevice {
    type Error = SimDeviceError;

    fn total_memory(&self) -> u64 {
        self.total
    }

    fn allocate(&mut self, size: u64) -> Result<Option<u64>, SimDeviceError> {
        if !self.fits(size) {
            return Ok(None);
        }
        let mut addr = None;
        if let Some(o) = &mut self.oracle {
            match o.segments.front().copied() {
                Some((a, s)) if s == size => {
                    o.segments.pop_front();
                    self.answered_segments += 1;
                    addr = Some(a);
                }
                Some((_, s)) => self.abandon(
                    OracleMiss::SizeMismatch {
                        expected: s,
                        got: size,
                    },
                    false,
                ),
                None => self.abandon(OracleMiss::Exhausted, false),
            }
        }
        let addr = match addr {
            Some(a) => a,
            None => self.synthetic(size),
        };
        self.used = self.used.saturating_add(size);
        self.segments.insert(addr, size);
        Ok(Some(addr))
    }

    fn free(&mut self, addr: u64, size: u64) -> Result<(), SimDeviceError> {
        match self.segments.get(&addr) {
            Some(&s) if s == size => {
                self.segments.remove(&addr);
                self.used = self.used.saturating_sub(size);
                Ok(())
            }
            _ => Err(SimDeviceError::UnknownSegment { addr, size }),
        }
    }

    fn reserve(&mut self, size: u64) -> Result<u64, SimDeviceError> {
        let mut base = None;
        if let Some(o) = &mut self.oracle {
            match o.reservations.front().copied() {
                Some(b) => {
                    let overlaps = self.reservations.iter().any(|r| {
                        b < r.base.saturating_add(r.size) && r.base < b.saturating_add(size)
                    });
                    if overlaps {
                        self.abandon(OracleMiss::Overlap, true);
                    } else {
                        if let Some(o) = &mut self.oracle {
                            o.reservations.pop_front();
                        }
                        self.answered_reservations += 1;
                        base = Some(b);
                    }
                }
                None => self.abandon(OracleMiss::Exhausted, true),
            }
        }
        let base = match base {
            Some(b) => b,
            None => self.synthetic(size),
        };
        self.reservations.push(Reservation {
            base,
            size,
            mapped: 0,
        });
        Ok(base)
    }

    fn release(&mut self, base: u64, size: u64) -> Result<(), SimDeviceError> {
        match self
            .reservations
            .iter()
            .position(|r| r.base == base && r.size == size && r.mapped == 0)
        {
            Some(p) => {
                self.reservations.swap_remove(p);
                Ok(())
            }
            None => Err(SimDeviceError::OutsideReservation {
                op: "release",
                addr: base,
                size,
            }),
        }
    }

    fn map(&mut self, addr: u64, size: u64, _page_size: u64) -> Result<bool, SimDeviceError> {
        let Some(r) = self.reservation_of(addr, size) else {
            return Err(SimDeviceError::OutsideReservation {
                op: "map",
                addr,
                size,
            });
        };
        if !self.fits(size) {
            return Ok(false);
        }
        self.reservations[r].mapped = self.reservations[r].mapped.saturating_add(size);
        self.used = self.used.saturating_add(size);
        Ok(true)
    }

    fn unmap(&mut self, addr: u64, size: u64, _page_size: u64) -> Result<(), SimDeviceError> {
        let Some(r) = self.reservation_of(addr, size) else {
            return Err(SimDeviceError::OutsideReservation {
                op: "unmap",
                addr,
                size,
            });
        };
        self.reservations[r].mapped = self.reservations[r].mapped.saturating_sub(size);
        self.used = self.used.saturating_sub(size);
        Ok(())
    }

    fn free_memory(&mut self) -> Result<u64, SimDeviceError> {
        Ok(self
            .capacity
            .unwrap_or(self.total)
            .saturating_sub(self.used))
    }
}

impl fmt::Display for AddressOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressOrder::Descending => "descending",
            AddressOrder::Ascending => "ascending",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn capacity_is_enforced() {
        let mut d = SimDevice::new(100 * MIB, Some(10 * MIB));
        assert!(matches!(d.allocate(8 * MIB), Ok(Some(_))));
        assert_eq!(d.allocate(4 * MIB), Ok(None));
        assert_eq!(d.free_memory(), Ok(2 * MIB));
    }

    #[test]
    fn synthetic_addresses_are_aligned_and_monotone() {
        let mut d = SimDevice::new(100 * MIB, None);
        let a = d.allocate(3 * MIB).ok().flatten().unwrap_or(0);
        let b = d.allocate(2 * MIB).ok().flatten().unwrap_or(0);
        assert!(a.is_multiple_of(ALIGN));
        assert!(b < a && b + 2 * MIB <= a);
        let mut d = SimDevice::new(100 * MIB, None).with_order(AddressOrder::Ascending);
        let a = d.allocate(3 * MIB).ok().flatten().unwrap_or(0);
        let b = d.allocate(2 * MIB).ok().flatten().unwrap_or(0);
        assert!(b >= a + 3 * MIB && b.is_multiple_of(ALIGN));
    }

    #[test]
    fn oracle_is_abandoned_on_a_size_mismatch() {
        let oracle = AddressOracle {
            segments: [(0x1000_0000, 2 * MIB), (0x2000_0000, 20 * MIB)].into(),
            reservations: VecDeque::new(),
        };
        let mut d = SimDevice::new(100 * MIB, None).with_oracle(oracle);
        assert_eq!(d.allocate(2 * MIB), Ok(Some(0x1000_0000)));
        let c = d.allocate(4 * MIB).ok().flatten().unwrap_or(0);
        assert_ne!(c, 0x2000_0000);
        assert!(c > 0x2000_0000 + 20 * MIB);
        assert_eq!(
            d.divergence().map(|x| x.miss),
            Some(OracleMiss::SizeMismatch {
                expected: 20 * MIB,
                got: 4 * MIB
            })
        );
        assert!(!d.oracle_active());
    }
}
