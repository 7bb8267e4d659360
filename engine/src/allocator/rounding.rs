//! Size rules of the caching allocator (spec C.2, C.3): `round_size` (512-byte rounding and
//! `roundup_power2_divisions`), the pool a size goes to, and `alloc_size`, the size of the segment
//! a request that finds no cached block asks the device for. Pure functions of a size and the
//! settings; they own no state.

pub use crate::trace::{MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE, round_size};

/// Requests of 1 MiB < size < this get a `large_segment_size` segment (kMinLargeAlloc, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Default `large_segment_size`, default `max_non_split_rounding` and minimum `max_split_size`
/// (kLargeBuffer, 20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Segments for requests of at least 10 MiB are rounded up to a multiple of this (kRoundLarge).
pub const ROUND_LARGE: u64 = 2 << 20;
/// `allocate()` refuses requests of this size or more with its own OOM message ("more than 1EB").
pub const ONE_EXA_BYTE: u64 = 1 << 60;

/// The small pool takes rounded sizes up to 1 MiB inclusive (spec C.3).
#[inline]
pub fn is_small(rounded: u64) -> bool {
    rounded <= SMALL_SIZE
}

/// `get_allocation_size(size)` (CUDACachingAllocator.cpp, spec C.3): the cudaMalloc size for a
/// rounded request. ≤ 1 MiB → 2 MiB; < 10 MiB → `large_segment_size` (20 MiB by default);
/// otherwise the next multiple of 2 MiB.
#[inline]
pub fn alloc_size(rounded: u64, large_segment_size: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        large_segment_size
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn divisions(v: u64) -> [u64; 16] {
        [v; 16]
    }

    // Spec C.2 [emp], roundup_power2_divisions:4.
    #[test]
    fn power2_divisions_examples() {
        let d = divisions(4);
        assert_eq!(round_size(5 * MIB + 1, &d), 6 * MIB);
        assert_eq!(round_size(70 * MIB + 1, &d), 80 * MIB);
        assert_eq!(round_size(300 * MIB + 1, &d), 320 * MIB);
        assert_eq!(round_size(1100 * MIB, &d), 1280 * MIB);
        // 1200 ≤ 512 × 4: plain 512-byte rounding, not 1280 as the documentation says.
        assert_eq!(round_size(1200, &d), 1536);
        // A power of two stays.
        assert_eq!(round_size(64 * MIB, &d), 64 * MIB);
    }

    #[test]
    fn plain_rounding() {
        let d = divisions(0);
        assert_eq!(round_size(0, &d), 512);
        assert_eq!(round_size(1, &d), 512);
        assert_eq!(round_size(512, &d), 512);
        assert_eq!(round_size(513, &d), 1024);
        assert_eq!(round_size(MIB + 1, &d), MIB + 512);
    }

    #[test]
    fn division_one_means_no_power2_rounding() {
        let d = divisions(1);
        assert_eq!(round_size(5 * MIB + 1, &d), 5 * MIB + 512);
    }

    // Spec C.3 [emp]: observed segment sizes.
    #[test]
    fn observed_segment_sizes() {
        let d = divisions(0);
        let seg = |n: u64| alloc_size(round_size(n, &d), LARGE_BUFFER);
        assert_eq!(round_size(1, &d), 512);
        assert_eq!(seg(1), 2 * MIB);
        assert_eq!(round_size(MIB + 1, &d), 1_049_088);
        assert_eq!(seg(MIB + 1), 20 * MIB);
        assert_eq!(seg(10 * MIB - 1), 10 * MIB);
        assert_eq!(round_size(10 * MIB + 1, &d), 10_486_272);
        assert_eq!(seg(10 * MIB + 1), 12 * MIB);
        assert_eq!(seg(100 * MIB + 3), 102 * MIB);
        // Exactly 1 MiB is small.
        assert!(is_small(round_size(MIB, &d)));
        assert!(!is_small(round_size(MIB + 1, &d)));
    }

    #[test]
    fn large_segment_size_is_configurable() {
        assert_eq!(alloc_size(3 * MIB, 12 * MIB), 12 * MIB);
        assert_eq!(alloc_size(11 * MIB, 12 * MIB), 12 * MIB);
    }
}
