//! The allocator's statistics (spec C.14), kept exactly as `torch.cuda.memory_stats()` reports
//! them: every stat for `all`, `small_pool` and `large_pool`, with `current`, `peak`, `allocated`
//! (sum of increases) and `freed` (sum of decreases).

use std::collections::BTreeMap;

use serde::Serialize;

/// One statistic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    /// Value now.
    pub current: i64,
    /// Highest value since the start.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, amount: u64) {
        let a = i64::try_from(amount).unwrap_or(i64::MAX);
        self.current = self.current.saturating_add(a);
        self.peak = self.peak.max(self.current);
        self.allocated = self.allocated.saturating_add(a);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, amount: u64) {
        let a = i64::try_from(amount).unwrap_or(i64::MAX);
        self.current = self.current.saturating_sub(a);
        self.freed = self.freed.saturating_add(a);
    }
}

/// A statistic for the aggregate and for each pool (PyTorch's `StatArray`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatArray {
    /// Both pools (`.all.`).
    pub all: Stat,
    /// The small pool (`.small_pool.`).
    pub small_pool: Stat,
    /// The large pool (`.large_pool.`).
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    pub(crate) fn increase(&mut self, small: bool, amount: u64) {
        self.all.increase(amount);
        if small {
            self.small_pool.increase(amount);
        } else {
            self.large_pool.increase(amount);
        }
    }

    #[inline]
    pub(crate) fn decrease(&mut self, small: bool, amount: u64) {
        self.all.decrease(amount);
        if small {
            self.small_pool.decrease(amount);
        } else {
            self.large_pool.decrease(amount);
        }
    }
}

/// Everything `torch.cuda.memory_stats()` reports for one device (spec C.14).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Allocated blocks (`allocation`).
    pub allocation: StatArray,
    /// cudaMalloc'd segments (`segment`; mapped ranges of expandable segments are not counted).
    pub segment: StatArray,
    /// Allocated or pending-free blocks (`active`).
    pub active: StatArray,
    /// Free blocks inside split non-expandable segments (`inactive_split`).
    pub inactive_split: StatArray,
    /// Bytes of allocated blocks (`allocated_bytes`).
    pub allocated_bytes: StatArray,
    /// Bytes obtained from the device (`reserved_bytes`).
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks (`active_bytes`).
    pub active_bytes: StatArray,
    /// Bytes of `inactive_split` blocks.
    pub inactive_split_bytes: StatArray,
    /// Requested (unrounded) bytes of active blocks (`requested_bytes`).
    pub requested_bytes: StatArray,
    /// Allocated blocks of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// `alloc_block(retry=true)` calls (malloc step 4e).
    pub num_alloc_retries: u64,
    /// OutOfMemoryErrors raised.
    pub num_ooms: u64,
    /// Full synchronizations of outstanding events (`release_cached_blocks`).
    pub num_sync_all_streams: u64,
    /// cudaMalloc calls and expandable mappings.
    pub num_device_alloc: u64,
    /// cudaFree calls and expandable unmappings.
    pub num_device_free: u64,
}

impl Stats {
    /// The stats under PyTorch's `memory_stats()` key names (`allocated_bytes.all.current`, …),
    /// `max_split_size` included (`-1` when unlimited).
    pub fn to_memory_stats(&self, max_split_size: Option<u64>) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        let arrays: [(&str, &StatArray); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        let put = |m: &mut BTreeMap<String, i64>, prefix: &str, s: &Stat| {
            m.insert(format!("{prefix}.current"), s.current);
            m.insert(format!("{prefix}.peak"), s.peak);
            m.insert(format!("{prefix}.allocated"), s.allocated);
            m.insert(format!("{prefix}.freed"), s.freed);
        };
        for (name, a) in arrays {
            put(&mut m, &format!("{name}.all"), &a.all);
            put(&mut m, &format!("{name}.small_pool"), &a.small_pool);
            put(&mut m, &format!("{name}.large_pool"), &a.large_pool);
        }
        put(&mut m, "oversize_allocations", &self.oversize_allocations);
        put(&mut m, "oversize_segments", &self.oversize_segments);
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        m.insert("num_alloc_retries".into(), n(self.num_alloc_retries));
        m.insert("num_ooms".into(), n(self.num_ooms));
        m.insert("num_sync_all_streams".into(), n(self.num_sync_all_streams));
        m.insert("num_device_alloc".into(), n(self.num_device_alloc));
        m.insert("num_device_free".into(), n(self.num_device_free));
        m.insert(
            "max_split_size".into(),
            max_split_size.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX)),
        );
        m
    }
}
