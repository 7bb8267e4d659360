//! The full-resolution memory series of one device: allocated and reserved bytes and `time_us`
//! after *every* trace entry, for a chart the reader can zoom into down to single entries. The
//! [`super::Timeline`] of the analysis keeps 2,000 points; this keeps them all, compactly:
//!
//! - [`Series::to_bytes`] / [`Series::from_bytes`]: a versioned binary encoding (below) that
//!   stores one device's ~10⁶ entries in a few MB instead of 24 bytes an entry. Decoding never
//!   panics and never allocates more than the input can describe, since the bytes come back from
//!   storage.
//! - [`Series::window`]: any entry range reduced to at most `columns` pixel columns, each with
//!   the first, lowest, highest and last value of both figures, so no peak is lost when drawn.
//!
//! The figures are the analysis' own: the same walk of the trace that feeds the timeline and the
//! peaks fills the columns, and when the analysis is exact ([`super::exact`]) the allocated
//! column is the replay's (PyTorch's `allocated_bytes.all.current`, unsplit-block slack
//! included). Reserved bytes are the trace's own segment events either way. Produced by
//! [`super::analyze_exact_with`] with [`super::AnalyzeOptions::series`], or by [`series`].
//!
//! # Encoding (version 1)
//!
//! ```text
//! "OLSR" 0x01 flags(u8: bit 0 = exact)  device(varint)  n(varint)
//! allocated: shift(u8), then n × zigzag-varint of the delta of (value >> shift)
//! reserved:  shift(u8), k(varint), then k change points × (varint gap, zigzag-varint delta)
//! time_us:   n × varint: 0 = not recorded, else zigzag(delta from the last recorded) + 1
//! ```
//!
//! `shift` is the number of trailing zero bits every value of the column shares (block sizes are
//! multiples of 512, segments of 2 MiB). Reserved bytes change at a few hundred entries of a
//! million, so only the change points are stored: the `gap` is the number of entries since the
//! previous change point (the first counts from entry 0). Every entry costs at least one byte in
//! each dense column, which bounds `n` by the input's length.

use serde::{Serialize, Serializer};

use super::exact::entries_of;
use crate::replay::Timeline as ReplayTimeline;
use crate::snapshot::{Snapshot, TraceEntry};

/// Magic bytes of the encoding.
const MAGIC: &[u8; 4] = b"OLSR";
/// Version of the encoding.
const VERSION: u8 = 1;
/// Flag bit: the allocated column comes from an exact replay.
const FLAG_EXACT: u8 = 1;
/// `time_us` of an entry that has none.
const NO_TIME: i64 = i64::MIN;

/// Allocated and reserved bytes and `time_us` after every entry of one device's trace.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Series {
    device: u32,
    exact: bool,
    allocated: Vec<u64>,
    reserved: Vec<u64>,
    #[serde(serialize_with = "times_as_options")]
    time_us: Vec<i64>,
}

impl std::fmt::Debug for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Series")
            .field("device", &self.device)
            .field("exact", &self.exact)
            .field("len", &self.len())
            .field("max_allocated", &self.max_allocated())
            .field("max_reserved", &self.max_reserved())
            .finish()
    }
}

fn times_as_options<S: Serializer>(times: &[i64], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(times.iter().map(|&t| (t != NO_TIME).then_some(t)))
}

/// Why [`Series::from_bytes`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeriesError {
    /// It does not start with the magic bytes.
    #[error("not a memory series (bad magic bytes)")]
    BadMagic,
    /// A version this build does not read.
    #[error("memory series version {0} is not supported (this build reads version {VERSION})")]
    UnsupportedVersion(u8),
    /// It ends in the middle of a field.
    #[error("memory series truncated at byte {0}")]
    Truncated(usize),
    /// A field has a value that cannot be (a count larger than the input, an overflow…).
    #[error("memory series corrupt at byte {at}: {what}")]
    Corrupt {
        /// Byte offset of the field.
        at: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// First, lowest, highest and last value of one figure over a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Extremes {
    /// After the column's first entry.
    pub first: u64,
    /// Lowest.
    pub min: u64,
    /// Highest.
    pub max: u64,
    /// After the column's last entry.
    pub last: u64,
}

impl Extremes {
    fn of(values: &[u64]) -> Extremes {
        let first = values.first().copied().unwrap_or(0);
        let (mut min, mut max) = (first, first);
        for &v in values {
            min = min.min(v);
            max = max.max(v);
        }
        Extremes {
            first,
            min,
            max,
            last: values.last().copied().unwrap_or(0),
        }
    }
}

/// One pixel column of [`Series::window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WindowPoint {
    /// First entry of the column.
    pub from: usize,
    /// One past its last entry.
    pub to: usize,
    /// `time_us` of its first entry.
    pub time_from_us: Option<i64>,
    /// `time_us` of its last entry.
    pub time_to_us: Option<i64>,
    /// Allocated bytes over the column.
    pub allocated: Extremes,
    /// Reserved bytes over the column.
    pub reserved: Extremes,
}

impl Series {
    /// A series from its columns; `None` unless they have the same length. `time_us[i]` is
    /// `None` where the entry has no time.
    pub fn new(
        device: u32,
        exact: bool,
        allocated: Vec<u64>,
        reserved: Vec<u64>,
        time_us: &[Option<i64>],
    ) -> Option<Series> {
        if allocated.len() != reserved.len() || allocated.len() != time_us.len() {
            return None;
        }
        Some(Series {
            device,
            exact,
            allocated,
            reserved,
            time_us: time_us.iter().map(|t| t.unwrap_or(NO_TIME)).collect(),
        })
    }

    /// The walk's columns, with each entry's `time_us`.
    pub(crate) fn from_walk(
        device: u32,
        entries: &[TraceEntry],
        mut allocated: Vec<u64>,
        mut reserved: Vec<u64>,
    ) -> Series {
        // The walk yields one step per entry; should it not, hold the last value.
        let n = entries.len();
        let last = |v: &[u64]| v.last().copied().unwrap_or(0);
        let (a, r) = (last(&allocated), last(&reserved));
        allocated.resize(n, a);
        reserved.resize(n, r);
        Series {
            device,
            exact: false,
            allocated,
            reserved,
            time_us: entries
                .iter()
                .map(|e| e.time_us.unwrap_or(NO_TIME))
                .collect(),
        }
    }

    /// Replaces the allocated column with an exact replay's (change points after each entry; a
    /// complete trace starts at 0).
    pub(crate) fn set_exact_allocated(&mut self, timeline: &ReplayTimeline) {
        let mut points = timeline.allocated.iter().peekable();
        let mut value = 0u64;
        for (i, slot) in self.allocated.iter_mut().enumerate() {
            while let Some(p) = points.next_if(|p| p.index as usize <= i) {
                value = p.bytes;
            }
            *slot = value;
        }
        self.exact = true;
    }

    /// CUDA device ordinal.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The allocated column comes from a replay that reproduced the recording (see
    /// [`super::Analysis::exact`]).
    pub fn exact(&self) -> bool {
        self.exact
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.allocated.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.allocated.is_empty()
    }

    /// Allocated bytes after each entry.
    pub fn allocated(&self) -> &[u64] {
        &self.allocated
    }

    /// Reserved bytes after each entry.
    pub fn reserved(&self) -> &[u64] {
        &self.reserved
    }

    /// `time_us` of entry `index`.
    pub fn time_us(&self, index: usize) -> Option<i64> {
        self.time_us.get(index).copied().filter(|&t| t != NO_TIME)
    }

    /// Highest allocated bytes (0 when empty).
    pub fn max_allocated(&self) -> u64 {
        self.allocated.iter().copied().max().unwrap_or(0)
    }

    /// Highest reserved bytes (0 when empty).
    pub fn max_reserved(&self) -> u64 {
        self.reserved.iter().copied().max().unwrap_or(0)
    }

    /// The entries `[from, to)` (clamped to the series) in at most `columns` columns of equal
    /// width (±1 entry), in order; one column per entry when there are fewer entries than
    /// columns. Empty when the range is empty or `columns` is 0. Cost: one pass over the range.
    pub fn window(&self, from: usize, to: usize, columns: usize) -> Vec<WindowPoint> {
        let to = to.min(self.len());
        if from >= to || columns == 0 {
            return Vec::new();
        }
        let len = to - from;
        let cols = columns.min(len);
        let bound = |k: usize| from + ((k as u128 * len as u128) / cols as u128) as usize;
        let mut out = Vec::with_capacity(cols);
        let mut start = from;
        for k in 1..=cols {
            let end = bound(k);
            let (Some(a), Some(r)) = (
                self.allocated.get(start..end),
                self.reserved.get(start..end),
            ) else {
                break;
            };
            out.push(WindowPoint {
                from: start,
                to: end,
                time_from_us: self.time_us(start),
                time_to_us: self.time_us(end - 1),
                allocated: Extremes::of(a),
                reserved: Extremes::of(r),
            });
            start = end;
        }
        out
    }

    /// The encoding described in the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.len();
        let mut out = Vec::with_capacity(16 + n * 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(if self.exact { FLAG_EXACT } else { 0 });
        put_varint(&mut out, u64::from(self.device));
        put_varint(&mut out, n as u64);

        let shift = common_shift(&self.allocated);
        out.push(shift);
        let mut prev = 0u64;
        for &v in &self.allocated {
            let v = v >> shift;
            put_varint(&mut out, zigzag(v.wrapping_sub(prev) as i64));
            prev = v;
        }

        let shift = common_shift(&self.reserved);
        out.push(shift);
        let mut changes = Vec::new();
        let mut prev = 0u64;
        for (i, &v) in self.reserved.iter().enumerate() {
            if v != prev {
                changes.push((i, v));
                prev = v;
            }
        }
        put_varint(&mut out, changes.len() as u64);
        let (mut next, mut prev) = (0usize, 0u64);
        for (i, v) in changes {
            let v = v >> shift;
            put_varint(&mut out, (i - next) as u64);
            put_varint(&mut out, zigzag(v.wrapping_sub(prev) as i64));
            next = i + 1;
            prev = v;
        }

        let mut prev = 0i64;
        for &t in &self.time_us {
            if t == NO_TIME {
                out.push(0);
            } else {
                // A delta of exactly -2⁶³ (zigzag u64::MAX) would wrap to "not recorded"; times
                // in microseconds since the epoch never are 2⁶³ apart.
                put_varint(&mut out, zigzag(t.wrapping_sub(prev)).wrapping_add(1));
                prev = t;
            }
        }
        out
    }

    /// Reads [`Series::to_bytes`]'s encoding. Never panics; allocates at most a small multiple
    /// of the input's length.
    pub fn from_bytes(bytes: &[u8]) -> Result<Series, SeriesError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4).map_err(|_| SeriesError::BadMagic)? != MAGIC {
            return Err(SeriesError::BadMagic);
        }
        let version = r.byte()?;
        if version != VERSION {
            return Err(SeriesError::UnsupportedVersion(version));
        }
        let at = r.at;
        let flags = r.byte()?;
        if flags & !FLAG_EXACT != 0 {
            return Err(r.corrupt(at, "unknown flags"));
        }
        let at = r.at;
        let device = u32::try_from(r.varint()?).map_err(|_| r.corrupt(at, "device"))?;
        let at = r.at;
        let n = r.varint()?;
        // Two dense columns take at least a byte an entry each.
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= r.left() / 2)
            .ok_or(r.corrupt(at, "entry count larger than the input"))?;

        let shift = r.shift()?;
        let mut allocated = Vec::with_capacity(n);
        let mut prev = 0u64;
        for _ in 0..n {
            let at = r.at;
            let d = unzigzag(r.varint()?);
            prev = Some(prev.wrapping_add(d as u64))
                .filter(|&v| v <= u64::MAX >> shift)
                .ok_or(r.corrupt(at, "allocated bytes out of range"))?;
            allocated.push(prev << shift);
        }

        let shift = r.shift()?;
        let at = r.at;
        let k = r.varint()?;
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k <= n && k <= r.left() / 2)
            .ok_or(r.corrupt(at, "change point count larger than the input"))?;
        let mut reserved = Vec::with_capacity(n);
        let mut prev = 0u64;
        for _ in 0..k {
            let at = r.at;
            let gap = r.varint()?;
            let gap = usize::try_from(gap)
                .ok()
                .filter(|&g| g < n - reserved.len())
                .ok_or(r.corrupt(at, "reserved change point past the end"))?;
            reserved.resize(reserved.len() + gap, prev << shift);
            let at = r.at;
            let d = unzigzag(r.varint()?);
            prev = Some(prev.wrapping_add(d as u64))
                .filter(|&v| v <= u64::MAX >> shift)
                .ok_or(r.corrupt(at, "reserved bytes out of range"))?;
            reserved.push(prev << shift);
        }
        reserved.resize(n, prev << shift);

        let mut time_us = Vec::with_capacity(n);
        let mut prev = 0i64;
        for _ in 0..n {
            let at = r.at;
            match r.varint()? {
                0 => time_us.push(NO_TIME),
                z => {
                    prev = Some(prev.wrapping_add(unzigzag(z - 1)))
                        .filter(|&t| t != NO_TIME)
                        .ok_or(r.corrupt(at, "time out of range"))?;
                    time_us.push(prev);
                }
            }
        }
        if r.left() != 0 {
            return Err(r.corrupt(r.at, "trailing bytes"));
        }
        Ok(Series {
            device,
            exact: flags & FLAG_EXACT != 0,
            allocated,
            reserved,
            time_us,
        })
    }
}

/// The full-resolution series of the main device (the one [`super::Analysis::peak`] names),
/// exact when the analysis is. Costs a whole [`super::analyze_exact_with`]; a caller that needs
/// the analysis too should ask it for the series instead. `None` when the snapshot has no trace.
pub fn series(snapshot: &Snapshot) -> Option<Series> {
    let options = super::AnalyzeOptions {
        series: true,
        ..super::AnalyzeOptions::default()
    };
    super::analyze_exact_with(snapshot, &options).1
}

/// Builds the walk's columns, one push per entry.
#[derive(Debug, Default)]
pub(crate) struct Columns {
    pub(crate) allocated: Vec<u64>,
    pub(crate) reserved: Vec<u64>,
}

impl Columns {
    pub(crate) fn with_capacity(n: usize) -> Columns {
        Columns {
            allocated: Vec::with_capacity(n),
            reserved: Vec::with_capacity(n),
        }
    }

    /// The figures after entry `index` (entries in order; a gap holds the last values).
    #[inline]
    pub(crate) fn push(&mut self, index: usize, allocated: u64, reserved: u64) {
        if index > self.allocated.len() {
            let (a, r) = (
                self.allocated.last().copied().unwrap_or(0),
                self.reserved.last().copied().unwrap_or(0),
            );
            self.allocated.resize(index, a);
            self.reserved.resize(index, r);
        }
        if index == self.allocated.len() {
            self.allocated.push(allocated);
            self.reserved.push(reserved);
        }
    }

    pub(crate) fn into_series(self, device: u32, snapshot: &Snapshot) -> Series {
        Series::from_walk(
            device,
            entries_of(snapshot, device),
            self.allocated,
            self.reserved,
        )
    }
}

fn common_shift(values: &[u64]) -> u8 {
    let all = values.iter().fold(0u64, |acc, &v| acc | v);
    if all == 0 {
        0
    } else {
        all.trailing_zeros() as u8
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    fn corrupt(&self, at: usize, what: &'static str) -> SeriesError {
        SeriesError::Corrupt { at, what }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], SeriesError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(SeriesError::Truncated(self.at))?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or(SeriesError::Truncated(self.at))?;
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, SeriesError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or(SeriesError::Truncated(self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn shift(&mut self) -> Result<u8, SeriesError> {
        let at = self.at;
        let s = self.byte()?;
        if s > 63 {
            return Err(self.corrupt(at, "shift over 63"));
        }
        Ok(s)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, SeriesError> {
        let start = self.at;
        let mut v = 0u64;
        for k in 0..10 {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if k == 9 && bits > 1 {
                return Err(self.corrupt(start, "varint over 64 bits"));
            }
            v |= bits << (7 * k);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt(start, "varint over 10 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Series {
        let mut a = Vec::with_capacity(n);
        let mut r = Vec::with_capacity(n);
        let mut t = Vec::with_capacity(n);
        let mut x = 7u64;
        for i in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            a.push(((x >> 40) % 4096) * 512);
            r.push(((i / 100) as u64 % 7) << 21);
            t.push(if i % 13 == 5 {
                None
            } else {
                Some(i as i64 * 3 - 50)
            });
        }
        Series::new(0, true, a, r, &t).expect("same lengths")
    }

    #[test]
    fn round_trips() {
        for n in [0, 1, 2, 100, 10_000] {
            let s = sample(n);
            let b = s.to_bytes();
            assert_eq!(Series::from_bytes(&b), Ok(s), "n = {n}");
        }
    }

    #[test]
    fn round_trips_extreme_values() {
        let a = vec![u64::MAX, 0, u64::MAX, 1, 0];
        let r = vec![0, u64::MAX, u64::MAX, 0, 3];
        let t = [Some(i64::MAX), Some(i64::MIN + 1), None, Some(0), Some(-1)];
        let s = Series::new(3, false, a, r, &t).expect("same lengths");
        assert_eq!(Series::from_bytes(&s.to_bytes()), Ok(s));
    }

    #[test]
    fn hostile_bytes_are_errors() {
        let good = sample(1000).to_bytes();
        // Every truncation.
        for k in 0..good.len() {
            assert!(Series::from_bytes(&good[..k]).is_err(), "truncated at {k}");
        }
        assert_eq!(Series::from_bytes(b"XXXX\x01"), Err(SeriesError::BadMagic));
        assert_eq!(
            Series::from_bytes(b"OLSR\x09"),
            Err(SeriesError::UnsupportedVersion(9))
        );
        // A huge entry count.
        let mut huge = b"OLSR\x01\x00\x00".to_vec();
        put_varint(&mut huge, u64::MAX);
        huge.extend_from_slice(&[0; 32]);
        assert!(matches!(
            Series::from_bytes(&huge),
            Err(SeriesError::Corrupt { .. })
        ));
        // A huge change-point count and a huge gap.
        let mut gap = b"OLSR\x01\x00\x00\x02\x00\x00\x00\x00\x01".to_vec();
        put_varint(&mut gap, u64::MAX);
        gap.extend_from_slice(&[0; 8]);
        assert!(Series::from_bytes(&gap).is_err());
        // Trailing bytes.
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(Series::from_bytes(&trailing).is_err());
        // Every single-byte corruption is an answer, never a panic.
        for k in 0..good.len().min(400) {
            for v in [0x00, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[k] = v;
                let _ = Series::from_bytes(&b);
            }
        }
    }

    #[test]
    fn windows_keep_the_extremes() {
        let s = sample(5000);
        let (ma, mr) = (s.max_allocated(), s.max_reserved());
        for (from, to, cols) in [
            (0, 5000, 1200),
            (0, 5000, 7),
            (10, 4000, 1),
            (100, 160, 1200),
        ] {
            let w = s.window(from, to, cols);
            assert!(w.len() <= cols);
            assert_eq!(w.first().map(|p| p.from), Some(from));
            assert_eq!(w.last().map(|p| p.to), Some(to));
            assert!(w.windows(2).all(|p| p[0].to == p[1].from));
            let sa = s.allocated().get(from..to).expect("in range");
            let sr = s.reserved().get(from..to).expect("in range");
            let wa = w.iter().map(|p| p.allocated.max).max();
            let wr = w.iter().map(|p| p.reserved.max).max();
            assert_eq!(wa, sa.iter().copied().max());
            assert_eq!(wr, sr.iter().copied().max());
            let wmin = w.iter().map(|p| p.allocated.min).min();
            assert_eq!(wmin, sa.iter().copied().min());
        }
        let w = s.window(0, 5000, 1200);
        assert!(w.iter().any(|p| p.allocated.max == ma));
        assert!(w.iter().any(|p| p.reserved.max == mr));
        assert!(s.window(10, 10, 5).is_empty());
        assert!(s.window(0, 10, 0).is_empty());
        assert_eq!(s.window(4990, usize::MAX, 100).len(), 10);
    }

    #[test]
    fn every_range_keeps_the_global_max() {
        let s = sample(300);
        let (ma, mr) = (s.max_allocated(), s.max_reserved());
        let ia = s.allocated().iter().position(|&v| v == ma).expect("max");
        let ir = s.reserved().iter().position(|&v| v == mr).expect("max");
        for from in 0..300 {
            for to in from + 1..=300 {
                for cols in [1, 3, 64] {
                    let w = s.window(from, to, cols);
                    if (from..to).contains(&ia) {
                        assert!(
                            w.iter().any(|p| p.allocated.max == ma),
                            "{from}..{to}/{cols}"
                        );
                    }
                    if (from..to).contains(&ir) {
                        assert!(
                            w.iter().any(|p| p.reserved.max == mr),
                            "{from}..{to}/{cols}"
                        );
                    }
                }
            }
        }
    }
}
