//! Allocated and reserved bytes over the whole trace, reduced to a bounded number of points
//! without losing a peak: the entries are cut into equal buckets and each bucket keeps the entry
//! with its highest allocated, its lowest allocated and its highest reserved value (in trace
//! order, duplicates merged), plus the last entry of the trace. Owns only that reduction; it is
//! fed the statistics the walk computes.

use serde::Serialize;

use crate::trace::MemoryStats;

/// The timeline of one device.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timeline {
    /// CUDA device ordinal.
    pub device: u32,
    /// Entries of its trace.
    pub events: u64,
    /// Points in trace order; every entry when there are few, else per-bucket extremes.
    pub points: Vec<TimelinePoint>,
}

/// Allocated and reserved bytes after one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// Index of the entry in the device's trace.
    pub event_index: usize,
    /// Its `time_us`.
    pub time_us: Option<i64>,
    /// Allocated bytes after it.
    pub allocated_bytes: u64,
    /// Reserved bytes after it.
    pub reserved_bytes: u64,
}

/// Builds a [`Timeline`] one entry at a time, in constant memory per bucket.
#[derive(Debug)]
pub(crate) struct Reducer {
    device: u32,
    events: usize,
    keep_all: bool,
    bucket: usize,
    /// Entries left in the current bucket.
    left: usize,
    max_alloc: Option<TimelinePoint>,
    min_alloc: Option<TimelinePoint>,
    max_reserved: Option<TimelinePoint>,
    points: Vec<TimelinePoint>,
}

impl Reducer {
    /// A reducer for `events` entries and at most `max_points` points (at least 4).
    pub(crate) fn new(device: u32, events: usize, max_points: usize) -> Reducer {
        let max_points = max_points.max(4);
        let keep_all = events <= max_points;
        // Three points per bucket, one more for the last entry.
        let buckets = ((max_points - 1) / 3).max(1);
        let bucket = events.div_ceil(buckets).max(1);
        Reducer {
            device,
            events,
            keep_all,
            bucket,
            left: bucket,
            max_alloc: None,
            min_alloc: None,
            max_reserved: None,
            points: Vec::with_capacity(events.min(max_points)),
        }
    }

    /// Adds the statistics after entry `index` (entries must come in order).
    #[inline]
    pub(crate) fn push(&mut self, index: usize, time_us: Option<i64>, stats: &MemoryStats) {
        let p = TimelinePoint {
            event_index: index,
            time_us,
            allocated_bytes: stats.allocated_bytes,
            reserved_bytes: stats.reserved_bytes,
        };
        if self.keep_all {
            self.points.push(p);
            return;
        }
        if self
            .max_alloc
            .is_none_or(|m| p.allocated_bytes > m.allocated_bytes)
        {
            self.max_alloc = Some(p);
        }
        if self
            .min_alloc
            .is_none_or(|m| p.allocated_bytes < m.allocated_bytes)
        {
            self.min_alloc = Some(p);
        }
        if self
            .max_reserved
            .is_none_or(|m| p.reserved_bytes > m.reserved_bytes)
        {
            self.max_reserved = Some(p);
        }
        let last = index.saturating_add(1) >= self.events;
        self.left = self.left.saturating_sub(1);
        if self.left == 0 || last {
            self.left = self.bucket;
            self.flush();
        }
        if last && self.points.last().is_none_or(|q| q.event_index != index) {
            self.points.push(p);
        }
    }

    fn flush(&mut self) {
        let mut c = [
            self.max_alloc.take(),
            self.min_alloc.take(),
            self.max_reserved.take(),
        ];
        c.sort_by_key(|p| p.map_or(usize::MAX, |p| p.event_index));
        for p in c.into_iter().flatten() {
            if self
                .points
                .last()
                .is_none_or(|q| q.event_index != p.event_index)
            {
                self.points.push(p);
            }
        }
    }

    /// The timeline.
    pub(crate) fn finish(mut self) -> Timeline {
        if !self.keep_all {
            self.flush();
        }
        Timeline {
            device: self.device,
            events: self.events as u64,
            points: self.points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(a: u64, r: u64) -> MemoryStats {
        MemoryStats {
            allocated_bytes: a,
            reserved_bytes: r,
            ..MemoryStats::default()
        }
    }

    #[test]
    fn keeps_every_point_when_few() {
        let mut r = Reducer::new(0, 3, 10);
        for i in 0..3 {
            r.push(i, None, &stats(i as u64, 0));
        }
        assert_eq!(r.finish().points.len(), 3);
    }

    #[test]
    fn keeps_peaks_and_bounds_points() {
        let n = 100_000;
        let mut r = Reducer::new(0, n, 100);
        for i in 0..n {
            let a = if i == 54_321 {
                1_000_000
            } else {
                (i % 97) as u64
            };
            let res = if i == 77_777 { 2_000_000 } else { 1000 };
            r.push(i, Some(i as i64), &stats(a, res));
        }
        let t = r.finish();
        assert!(t.points.len() <= 100, "{} points", t.points.len());
        assert!(t.points.iter().any(|p| p.allocated_bytes == 1_000_000));
        assert!(t.points.iter().any(|p| p.reserved_bytes == 2_000_000));
        assert_eq!(t.points.last().map(|p| p.event_index), Some(n - 1));
        assert!(
            t.points
                .windows(2)
                .all(|w| w[0].event_index < w[1].event_index)
        );
    }
}
