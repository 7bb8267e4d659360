//! Fuzz target: the caching allocator driven by arbitrary operations (malloc of any size on two
//! streams, free, record_stream + free with a late completion, empty_cache) under arbitrary
//! settings and limits, with its invariants checked after every operation. Any panic, invariant
//! violation or device error is a bug; out of memory is a normal answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oomlens_engine::allocator::{AllocatorConfig, BlockId, CachingAllocator, SimDevice};

const GIB: u64 = 1 << 30;

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let Some((&cap, ops)) = rest.split_first() else {
        return;
    };
    let conf = match cfg % 6 {
        0 => "",
        1 => "expandable_segments:True",
        2 => "max_split_size_mb:20",
        3 => "roundup_power2_divisions:4,max_split_size_mb:64",
        4 => "garbage_collection_threshold:0.5,max_split_size_mb:40",
        _ => "expandable_segments:True,garbage_collection_threshold:0.6",
    };
    let Ok(config) = AllocatorConfig::parse(conf) else {
        return;
    };
    let limit = (cap % 8 != 0).then(|| u64::from(cap % 8) * GIB / 2);
    let device = SimDevice::new(140 * GIB, Some(4 * GIB));
    let mut a = CachingAllocator::new(config, device);
    a.set_memory_limit(limit);
    let mut live: Vec<BlockId> = Vec::new();
    let mut pending: Vec<BlockId> = Vec::new();
    let mut it = ops.chunks_exact(4);
    for op in &mut it {
        let arg = u32::from_le_bytes([op[0], op[1], op[2], op[3]]);
        match arg % 8 {
            0..=3 => {
                // Sizes from bytes to ~1 GiB, log-spread.
                let shift = (arg >> 3) % 31;
                let size = 1 + (u64::from(arg >> 8) & ((1 << shift) - 1));
                let stream = u64::from((arg >> 7) & 1);
                if let Ok(b) = a.malloc(size, stream) {
                    live.push(b.id);
                }
            }
            4 | 5 if !live.is_empty() => {
                let b = live.swap_remove((arg as usize >> 3) % live.len());
                assert!(a.free(b).is_ok(), "free failed");
            }
            6 if !live.is_empty() => {
                let b = live.swap_remove((arg as usize >> 3) % live.len());
                assert!(a.record_stream(b, 7).is_ok(), "record_stream failed");
                assert!(a.free(b).is_ok(), "free failed");
                pending.push(b);
            }
            6 if !pending.is_empty() => {
                let b = pending.swap_remove((arg as usize >> 3) % pending.len());
                assert!(a.complete_events(b).is_ok(), "complete_events failed");
            }
            _ => {
                assert!(a.empty_cache().is_ok(), "empty_cache failed");
                pending.clear();
            }
        }
        if let Err(v) = a.check_invariants() {
            panic!("invariant violated: {}", v.0);
        }
    }
});
