//! The allocator on its own: PyTorch's `PYTORCH_CUDA_ALLOC_CONF` parser checked against what
//! torch 2.11.0+cu130 answered on the GPU for 64 strings; the behaviours the spec marks [emp]
//! (`reference/pytorch-allocator-spec.md` C.3, C.5, C.8, C.10, C.11, C.13), each as a named test;
//! and model-based property tests: random programs under several settings, with every
//! invariant checked after every operation and a clean slate at the end.
#![allow(clippy::unwrap_used)]

use oomlens_engine::allocator::{
    AllocError, AllocatorConfig, BlockId, CachingAllocator, ConfError, Device, Event, NoEvents,
    SimDevice,
};
use oomlens_engine::snapshot::{Action, BlockState};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

type Alloc = CachingAllocator<SimDevice, Vec<Event>>;

fn allocator(config: AllocatorConfig) -> Alloc {
    CachingAllocator::with_sink(config, SimDevice::new(80 * GIB, None), Vec::new())
}

fn parse(s: &str) -> AllocatorConfig {
    AllocatorConfig::parse(s).unwrap()
}

/// (action, size) of the events emitted since the last call, which drains them.
fn drain(a: &mut Alloc) -> Vec<(Action, u64)> {
    a.sink_mut().drain(..).map(|e| (e.action, e.size)).collect()
}

// ------------------------------------------------------------------------------------------------
// PYTORCH_CUDA_ALLOC_CONF against torch 2.11
// ------------------------------------------------------------------------------------------------

enum Want {
    /// Parsed: max_split_size as the snapshot reports it (-1 = unlimited), GC threshold,
    /// expandable_segments, roundup_power2_divisions.
    Ok(i64, f64, bool, [u64; 16]),
    /// Python exception type and message.
    Err(&'static str, &'static str),
    /// The process aborted (an internal assertion while the allocator initializes).
    Abort,
}

/// Every string was set as `PYTORCH_CUDA_ALLOC_CONF` in a fresh process on an H200 with torch
/// 2.11.0+cu130, which then allocated a tensor and printed `allocator_settings` or the
/// exception (`tests/data/replay/conf_probe.py`; the answers are copied verbatim). `backend:cudaMallocAsync` parsed; only the snapshot call then refused.
const PROBE: [(&str, Want); 64] = [
    ("", Want::Ok(-1, 0.0, false, [0; 16])),
    ("expandable_segments:True", Want::Ok(-1, 0.0, true, [0; 16])),
    (
        "expandable_segments:False",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "expandable_segments:true",
        Want::Err(
            "ValueError",
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'",
        ),
    ),
    (
        "expandable_segments:1",
        Want::Err(
            "ValueError",
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'",
        ),
    ),
    (
        "max_split_size_mb:128",
        Want::Ok(134217728, 0.0, false, [0; 16]),
    ),
    (
        "max_split_size_mb:20",
        Want::Ok(20971520, 0.0, false, [0; 16]),
    ),
    (
        "max_split_size_mb:19",
        Want::Err(
            "ValueError",
            "CachingAllocator option max_split_size_mb too small, must be >= 20",
        ),
    ),
    ("max_split_size_mb:abc", Want::Err("RuntimeError", "stoull")),
    (
        "max_split_size_mb:128abc",
        Want::Ok(134217728, 0.0, false, [0; 16]),
    ),
    (
        "max_split_size_mb:-5",
        Want::Ok(-1048576, 0.0, false, [0; 16]),
    ),
    ("max_split_size_mb", Want::Abort),
    ("max_split_size_mb:", Want::Abort),
    (
        "max_split_size_mb:100,",
        Want::Ok(104857600, 0.0, false, [0; 16]),
    ),
    (
        "max_split_size_mb:100,,expandable_segments:True",
        Want::Err(
            "ValueError",
            "Unrecognized key ',' in CUDA allocator config.",
        ),
    ),
    (
        " max_split_size_mb : 100 , expandable_segments : True ",
        Want::Ok(104857600, 0.0, true, [0; 16]),
    ),
    (
        "foo:1",
        Want::Err(
            "ValueError",
            "Unrecognized key 'foo' in CUDA allocator config.",
        ),
    ),
    (
        "foo:[1,2]",
        Want::Err(
            "ValueError",
            "Unrecognized key 'foo' in CUDA allocator config.",
        ),
    ),
    (
        "garbage_collection_threshold:0.6",
        Want::Ok(-1, 0.6, false, [0; 16]),
    ),
    (
        "garbage_collection_threshold:1",
        Want::Err(
            "ValueError",
            "garbage_collect_threshold is invalid, set it in (0.0, 1.0)",
        ),
    ),
    (
        "garbage_collection_threshold:0",
        Want::Err(
            "ValueError",
            "garbage_collect_threshold is invalid, set it in (0.0, 1.0)",
        ),
    ),
    (
        "garbage_collection_threshold:1e-1",
        Want::Ok(-1, 0.1, false, [0; 16]),
    ),
    (
        "garbage_collection_threshold:abc",
        Want::Err("RuntimeError", "stod"),
    ),
    (
        "roundup_power2_divisions:4",
        Want::Ok(
            -1,
            0.0,
            false,
            [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4],
        ),
    ),
    (
        "roundup_power2_divisions:3",
        Want::Err(
            "ValueError",
            "For roundups, the divisions has to be power of 2 ",
        ),
    ),
    (
        "roundup_power2_divisions:0",
        Want::Err(
            "ValueError",
            "For roundups, the divisions has to be power of 2 ",
        ),
    ),
    (
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        Want::Ok(
            -1,
            0.0,
            false,
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8],
        ),
    ),
    (
        "roundup_power2_divisions:[>:8]",
        Want::Ok(
            -1,
            0.0,
            false,
            [0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8],
        ),
    ),
    (
        "roundup_power2_divisions:[2:4]",
        Want::Ok(
            -1,
            0.0,
            false,
            [4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
    ),
    (
        "roundup_power2_divisions:[3:4]",
        Want::Err(
            "ValueError",
            "For roundups, the intervals have to be power of 2 ",
        ),
    ),
    (
        "roundup_power2_divisions:[2:3]",
        Want::Err(
            "ValueError",
            "For roundups, the divisions has to be power of 2 or 0 to disable roundup ",
        ),
    ),
    (
        "roundup_power2_divisions:[1:2,65536:16]",
        Want::Ok(
            -1,
            0.0,
            false,
            [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16],
        ),
    ),
    ("roundup_power2_divisions:[1:2", Want::Abort),
    (
        "roundup_power2_divisions:[1:2,]",
        Want::Ok(
            -1,
            0.0,
            false,
            [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
    ),
    (
        "max_non_split_rounding_mb:64",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "max_non_split_rounding_mb:10",
        Want::Err(
            "ValueError",
            "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20",
        ),
    ),
    (
        "large_segment_size_mb:12",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "large_segment_size_mb:10",
        Want::Err(
            "ValueError",
            "CachingAllocator option large_segment_size_mb must be > 10 MB",
        ),
    ),
    (
        "large_segment_size_mb:40,max_split_size_mb:30",
        Want::Err(
            "ValueError",
            "CachingAllocator option max_split_size_mb too small, must be >= 40",
        ),
    ),
    (
        "max_split_size_mb:30,large_segment_size_mb:40",
        Want::Err(
            "ValueError",
            "CachingAllocator option max_split_size_mb too small, must be >= 40",
        ),
    ),
    (
        "large_segment_size_mb:64,max_non_split_rounding_mb:30",
        Want::Err(
            "ValueError",
            "CachingAllocator option max_non_split_rounding_mb too small, must be >= 64",
        ),
    ),
    ("backend:native", Want::Ok(-1, 0.0, false, [0; 16])),
    ("backend:cudaMallocAsync", Want::Ok(-1, 0.0, false, [0; 16])),
    (
        "backend:foo",
        Want::Err(
            "ValueError",
            "Unknown allocator backend, options are native and cudaMallocAsync",
        ),
    ),
    (
        "backend:native,max_split_size_mb:100",
        Want::Ok(104857600, 0.0, false, [0; 16]),
    ),
    (
        "per_process_memory_fraction:0.5",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "per_process_memory_fraction:1.5",
        Want::Err(
            "ValueError",
            "per_process_memory_fraction is invalid, set it in [0.0, 1.0]",
        ),
    ),
    (
        "per_process_memory_fraction:1",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "release_lock_on_cudamalloc:True",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "pinned_use_cuda_host_register:True",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "pinned_num_register_threads:8",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "pinned_num_register_threads:3",
        Want::Err(
            "ValueError",
            "Number of register threads has to be power of 2, got 3",
        ),
    ),
    (
        "graph_capture_record_stream_reuse:True",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "pinned_use_background_threads:True",
        Want::Ok(-1, 0.0, false, [0; 16]),
    ),
    (
        "pinned_reserve_segment_size_mb:0",
        Want::Err(
            "ValueError",
            "Pinned reserve segment size has to be greater than 0",
        ),
    ),
    ("expandable_segments:True:False", Want::Abort),
    ("max_split_size_mb:100:200", Want::Abort),
    ("[", Want::Abort),
    ("]", Want::Abort),
    (",", Want::Abort),
    (":", Want::Abort),
    ("max_split_size_mb;100", Want::Abort),
    (
        "MAX_SPLIT_SIZE_MB:100",
        Want::Err(
            "ValueError",
            "Unrecognized key 'MAX_SPLIT_SIZE_MB' in CUDA allocator config.",
        ),
    ),
    (
        "throw_on_cudamalloc_oom:True",
        Want::Err(
            "ValueError",
            "Unrecognized key 'throw_on_cudamalloc_oom' in CUDA allocator config.",
        ),
    ),
];

#[test]
fn parser_agrees_with_torch_2_11() {
    let mut failures = Vec::new();
    for (s, want) in &PROBE {
        let got = AllocatorConfig::parse(s);
        let ok = match (want, &got) {
            (Want::Ok(max_split, gc, expandable, divisions), Ok(c)) => {
                c.max_split_size.map_or(-1, |v| v as i64) == *max_split
                    && c.garbage_collection_threshold.unwrap_or(0.0) == *gc
                    && c.expandable_segments == *expandable
                    && c.roundup_power2_divisions == *divisions
            }
            (Want::Err(kind, message), Err(e)) => {
                e.pytorch_message() == *message
                    && e.python_exception() == *kind
                    && !e.aborts_process()
            }
            (Want::Abort, Err(e)) => e.aborts_process(),
            _ => false,
        };
        if !ok {
            failures.push(format!("{s:?}: got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn parser_errors_name_the_key() {
    for (s, key) in [
        ("max_split_size_mb:19", "max_split_size_mb"),
        (
            "garbage_collection_threshold:2",
            "garbage_collection_threshold",
        ),
        ("roundup_power2_divisions:3", "roundup_power2_divisions"),
        ("expandable_segments:yes", "expandable_segments"),
        ("large_segment_size_mb:4", "large_segment_size_mb"),
        (
            "per_process_memory_fraction:2",
            "per_process_memory_fraction",
        ),
        ("foo:1", "foo"),
        ("max_non_split_rounding_mb:abc", "max_non_split_rounding_mb"),
    ] {
        let e: ConfError = AllocatorConfig::parse(s).unwrap_err();
        assert!(e.to_string().contains(key), "{s:?}: {e}");
    }
}

#[test]
fn config_display_is_what_pytorch_takes() {
    let c = parse("max_split_size_mb:128,expandable_segments:True");
    assert_eq!(
        c.to_string(),
        "expandable_segments:True,max_split_size_mb:128"
    );
    for (s, _) in &PROBE {
        if let Ok(c) = AllocatorConfig::parse(s) {
            assert_eq!(parse(&c.to_string()), c, "{s:?} → {c}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// [emp] behaviours of the spec
// ------------------------------------------------------------------------------------------------

// C.3: observed block and segment sizes.
#[test]
fn c3_observed_sizes() {
    for (request, block, segment) in [
        (1, 512, 2 * MIB),
        (MIB + 1, 1_049_088, 20 * MIB),
        (10 * MIB - 1, 10 * MIB, 10 * MIB),
        (10 * MIB + 1, 10_486_272, 12 * MIB),
        (100 * MIB + 3, 100 * MIB + 512, 102 * MIB),
    ] {
        let mut a = allocator(AllocatorConfig::default());
        let x = a.malloc(request, 0).unwrap();
        assert_eq!(x.size, block, "request {request}");
        assert_eq!(
            drain(&mut a),
            [(Action::SegmentAlloc, segment), (Action::Alloc, request)],
            "request {request}"
        );
    }
}

// C.8: the split rule and its consequences.
#[test]
fn c8_split_rule() {
    let mut a = allocator(AllocatorConfig::default());
    let x = a.malloc(12 * MIB, 0).unwrap();
    a.free(x.id).unwrap();
    // 11 MiB in a free 12 MiB block: the remainder is exactly 1 MiB, not split.
    let y = a.malloc(11 * MIB, 0).unwrap();
    assert_eq!((y.addr, y.size), (x.addr, 12 * MIB));
    assert_eq!(a.allocated(), 12 * MIB);
    a.free(y.id).unwrap();
    // 10 MiB in it: 2 MiB remain, split off.
    let z = a.malloc(10 * MIB, 0).unwrap();
    assert_eq!(z.size, 10 * MIB);
    a.free(z.id).unwrap();
    a.empty_cache().unwrap();
    drain(&mut a);
    // 19.5 MiB gets a 20 MiB segment, unsplit: allocated rises by 20 MiB.
    let before = a.allocated();
    let w = a.malloc(19 * MIB + MIB / 2, 0).unwrap();
    assert_eq!(w.size, 20 * MIB);
    assert_eq!(a.allocated() - before, 20 * MIB);
    // 25 MiB + 1 gets 26 MiB, unsplit.
    let v = a.malloc(25 * MIB + 1, 0).unwrap();
    assert_eq!(v.size, 26 * MIB);
    // Small pool: any remainder of 512 bytes or more is split.
    let s = a.malloc(1000, 0).unwrap();
    assert_eq!(s.size, 1024);
    // Oversize requests are never split.
    let mut b = allocator(parse("max_split_size_mb:64"));
    let big = b.malloc(200 * MIB, 0).unwrap();
    b.free(big.id).unwrap();
    let again = b.malloc(190 * MIB, 0).unwrap();
    assert_eq!((again.addr, again.size), (big.addr, 200 * MIB));
}

// C.5: best fit within a stream, ties to the lowest address; streams never share.
#[test]
fn c5_best_fit_per_stream() {
    let mut a = allocator(AllocatorConfig::default());
    let p = a.malloc(30 * MIB, 0).unwrap();
    let q = a.malloc(30 * MIB, 0).unwrap();
    let r = a.malloc(40 * MIB, 0).unwrap();
    let other = a.malloc(30 * MIB, 7).unwrap();
    for x in [p, q, r, other] {
        a.free(x.id).unwrap();
    }
    drain(&mut a);
    // Two free 30 MiB blocks on stream 0: the lower address wins.
    let low = p.addr.min(q.addr);
    let x = a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(x.addr, low);
    // 35 MiB: the 40 MiB block (best fit), not stream 7's.
    let y = a.malloc(35 * MIB, 0).unwrap();
    assert_eq!(y.addr, r.addr);
    // Stream 7 only sees its own block.
    let z = a.malloc(30 * MIB, 7).unwrap();
    assert_eq!(z.addr, other.addr);
    assert!(drain(&mut a).iter().all(|(act, _)| *act == Action::Alloc));
}

// C.5: the oversize rules with max_split_size_mb.
#[test]
fn c5_oversize_rules() {
    let mut a = allocator(parse("max_split_size_mb:128"));
    let b150 = a.malloc(150 * MIB, 0).unwrap();
    a.free(b150.id).unwrap();
    drain(&mut a);
    // 130 MiB: 150 ≥ 130 + 20, so the cached 150 MiB block is not used; a new segment is made.
    let x = a.malloc(130 * MIB, 0).unwrap();
    assert_ne!(x.addr, b150.addr);
    assert_eq!(
        drain(&mut a),
        [
            (Action::SegmentAlloc, 130 * MIB),
            (Action::Alloc, 130 * MIB)
        ]
    );
    // 140 MiB: within 20 MiB of it, taken whole.
    let y = a.malloc(140 * MIB, 0).unwrap();
    assert_eq!((y.addr, y.size), (b150.addr, 150 * MIB));
    // A request below max_split never takes an oversize block.
    a.free(y.id).unwrap();
    let z = a.malloc(100 * MIB, 0).unwrap();
    assert_ne!(z.addr, b150.addr);
    // A larger non-split rounding lets the oversize block serve more.
    let mut b = allocator(parse("max_split_size_mb:128,max_non_split_rounding_mb:40"));
    let c = b.malloc(150 * MIB, 0).unwrap();
    b.free(c.id).unwrap();
    assert_eq!(b.malloc(130 * MIB, 0).unwrap().addr, c.addr);
}

// C.10: release_available_cached_blocks frees the largest oversize blocks first, just enough.
#[test]
fn c10_release_available_example() {
    let mut a = allocator(parse("max_split_size_mb:128"));
    let blocks: Vec<_> = [130, 150, 200]
        .iter()
        .map(|&m| a.malloc(m * MIB, 0).unwrap())
        .collect();
    for b in &blocks {
        a.free(b.id).unwrap();
    }
    a.set_memory_limit(Some(600 * MIB));
    drain(&mut a);
    let x = a.malloc(250 * MIB, 0).unwrap();
    assert_eq!(
        drain(&mut a),
        [
            (Action::SegmentFree, 200 * MIB),
            (Action::SegmentFree, 150 * MIB),
            (Action::SegmentAlloc, 250 * MIB),
            (Action::Alloc, 250 * MIB),
        ]
    );
    assert_eq!(x.size, 250 * MIB);
    assert_eq!(a.reserved(), 380 * MIB);
    assert_eq!(a.stats().num_alloc_retries, 0);
}

// C.4 / C.10: the full flush and the OOM, exactly where PyTorch raises.
#[test]
fn c4_flush_then_oom() {
    let mut a = allocator(AllocatorConfig::default());
    a.set_memory_limit(Some(100 * MIB));
    let x = a.malloc(30 * MIB, 0).unwrap();
    let y = a.malloc(30 * MIB, 0).unwrap();
    a.free(x.id).unwrap();
    drain(&mut a);
    // 50 MiB: no cached fit, 60 + 50 > 100 → flush (x's segment goes) → retry succeeds.
    let z = a.malloc(50 * MIB, 0).unwrap();
    assert_eq!(
        drain(&mut a),
        [
            (Action::SegmentFree, 30 * MIB),
            (Action::SegmentAlloc, 50 * MIB),
            (Action::Alloc, 50 * MIB)
        ]
    );
    assert_eq!(a.stats().num_alloc_retries, 1);
    // 40 MiB more cannot fit: flush finds nothing, retry fails, OOM of the rounded size.
    match a.malloc(40 * MIB - 100, 0) {
        Err(AllocError::OutOfMemory(o)) => {
            assert_eq!(o.rounded, 40 * MIB);
            assert_eq!(o.alloc_size, 40 * MIB);
            assert_eq!(o.allowed, Some(100 * MIB));
            assert_eq!((o.allocated, o.reserved), (80 * MIB, 80 * MIB));
            assert!(
                o.message(0)
                    .starts_with("CUDA out of memory. Tried to allocate 40.00 MiB.")
            );
        }
        other => panic!("expected an OOM, got {other:?}"),
    }
    let ev = a.sink().last().copied().unwrap();
    assert_eq!((ev.action, ev.size), (Action::Oom, 40 * MIB));
    assert_eq!(ev.addr, 80 * GIB - 80 * MIB, "device_free");
    assert_eq!(a.stats().num_ooms, 1);
    assert_eq!(a.stats().num_alloc_retries, 2);
    a.free(y.id).unwrap();
    a.free(z.id).unwrap();
    a.check_invariants().unwrap();
}

// C.11: garbage collection releases the blocks unused for at least the mean age.
#[test]
fn c11_garbage_collection_releases_old_blocks() {
    let mut a = allocator(parse("garbage_collection_threshold:0.3"));
    a.set_memory_limit(Some(1000 * MIB));
    // A block on stream 7 whose reuse advances the large pool's clock.
    let x = a.malloc(60 * MIB, 7).unwrap();
    a.free(x.id).unwrap();
    let blocks: Vec<_> = (0..5).map(|_| a.malloc(60 * MIB, 0).unwrap()).collect();
    a.free(blocks[1].id).unwrap(); // B
    for _ in 0..3 {
        let y = a.malloc(60 * MIB, 7).unwrap();
        assert_eq!(y.addr, x.addr);
        a.free(y.id).unwrap();
    }
    a.free(blocks[2].id).unwrap(); // C
    drain(&mut a);
    // 360 MiB reserved > 300 MiB threshold; target 60 MiB. Ages: B 4, C 1, X 1; mean 2: B goes.
    a.malloc(100 * MIB, 0).unwrap();
    let ev: Vec<_> = a
        .sink()
        .iter()
        .map(|e| (e.action, e.addr, e.size))
        .collect();
    assert_eq!(
        ev,
        [
            (Action::SegmentFree, blocks[1].addr, 60 * MIB),
            (Action::SegmentAlloc, ev[1].1, 100 * MIB),
            (Action::Alloc, ev[1].1, 100 * MIB),
        ]
    );
    // Without a limit there is no garbage collection.
    let mut b = allocator(parse("garbage_collection_threshold:0.3"));
    let p = b.malloc(60 * MIB, 0).unwrap();
    b.free(p.id).unwrap();
    drain(&mut b);
    b.malloc(100 * MIB, 0).unwrap();
    assert_eq!(drain(&mut b)[0].0, Action::SegmentAlloc);
}

// C.9: a block used on another stream stays pending until its events complete.
#[test]
fn c9_record_stream_pending_free() {
    let mut a = allocator(AllocatorConfig::default());
    let x = a.malloc(30 * MIB, 0).unwrap();
    a.record_stream(x.id, 5).unwrap();
    a.record_stream(x.id, 0).unwrap(); // its own stream: ignored
    a.free(x.id).unwrap();
    assert!(a.block(x.id).unwrap().pending_free);
    assert_eq!(a.allocated(), 0);
    assert_eq!(a.active(), 30 * MIB);
    drain(&mut a);
    // Not reusable while pending: a new segment.
    let y = a.malloc(30 * MIB, 0).unwrap();
    assert_ne!(y.addr, x.addr);
    assert_eq!(drain(&mut a)[0], (Action::SegmentAlloc, 30 * MIB));
    assert!(a.complete_events(x.id).unwrap());
    assert_eq!(drain(&mut a), [(Action::FreeCompleted, 30 * MIB)]);
    let z = a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(z.addr, x.addr);
    // empty_cache synchronizes: pending blocks complete first, then their segments go.
    a.record_stream(z.id, 5).unwrap();
    a.free(z.id).unwrap();
    drain(&mut a);
    a.empty_cache().unwrap();
    assert_eq!(
        drain(&mut a),
        [
            (Action::FreeCompleted, 30 * MIB),
            (Action::SegmentFree, 30 * MIB)
        ]
    );
    assert_eq!(a.stats().num_sync_all_streams, 1);
}

// C.13: the expandable-segments example of the spec.
#[test]
fn c13_expandable_example() {
    let mut a = allocator(parse("expandable_segments:True"));
    let x = a.malloc(30 * MIB, 0).unwrap();
    let base = x.addr;
    assert_eq!(
        drain(&mut a),
        [(Action::SegmentMap, 40 * MIB), (Action::Alloc, 30 * MIB)]
    );
    // 5 MiB reuses the free 10 MiB after it.
    let y = a.malloc(5 * MIB, 0).unwrap();
    assert_eq!(y.addr, base + 30 * MIB);
    assert_eq!(drain(&mut a), [(Action::Alloc, 5 * MIB)]);
    // 45 MiB maps 40 MiB more right after and takes the old free 5 MiB with it.
    let z = a.malloc(45 * MIB, 0).unwrap();
    assert_eq!(z.addr, base + 35 * MIB);
    let ev: Vec<_> = a
        .sink()
        .iter()
        .map(|e| (e.action, e.addr, e.size))
        .collect();
    assert_eq!(
        ev,
        [
            (Action::SegmentMap, base + 40 * MIB, 40 * MIB),
            (Action::Alloc, base + 35 * MIB, 45 * MIB)
        ]
    );
    drain(&mut a);
    // Freeing the 30 MiB block and emptying the cache unmaps only the first 20 MiB page.
    a.free(x.id).unwrap();
    drain(&mut a);
    a.empty_cache().unwrap();
    let ev: Vec<_> = a
        .sink()
        .iter()
        .map(|e| (e.action, e.addr, e.size))
        .collect();
    assert_eq!(ev, [(Action::SegmentUnmap, base, 20 * MIB)]);
    let segs = a.snapshot();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].address, base + 20 * MIB);
    assert!(segs[0].is_expandable);
    let states: Vec<_> = segs[0]
        .blocks
        .iter()
        .map(|b| (b.size / MIB, b.state))
        .collect();
    assert_eq!(
        states,
        [
            (10, BlockState::Inactive),
            (5, BlockState::ActiveAllocated),
            (45, BlockState::ActiveAllocated)
        ]
    );
    a.check_invariants().unwrap();
    // Everything freed: all pages unmapped and the address range given back.
    a.free(y.id).unwrap();
    a.free(z.id).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.reserved(), 0);
    assert_eq!(a.block_count(), 0);
}

// C.12: a fraction of 1 or more sets no limit (2.9+); below, the limit is ⌊f × total⌋.
#[test]
fn c12_memory_fraction() {
    let mut a = allocator(AllocatorConfig::default());
    a.set_memory_fraction(1.0);
    assert_eq!(a.memory_limit(), None);
    a.set_memory_fraction(0.25);
    assert_eq!(a.memory_limit(), Some(20 * GIB));
    let b = allocator(parse("per_process_memory_fraction:0.5"));
    assert_eq!(b.memory_limit(), Some(40 * GIB));
}

#[test]
fn stale_block_ids_are_refused() {
    let mut a = allocator(AllocatorConfig::default());
    let x = a.malloc(1000, 0).unwrap();
    a.free(x.id).unwrap();
    assert!(matches!(
        a.free(x.id),
        Err(AllocError::WrongState(_)) | Err(AllocError::UnknownBlock)
    ));
    let y = a.malloc(100, 0).unwrap();
    // x's block merged away or reused: its id names nothing now, or not an allocated block.
    let _ = y;
    assert!(a.malloc(1 << 60, 0).is_err());
}

/// A device that fails after a number of segments, to check errors travel up.
struct Failing {
    left: u32,
}

impl Device for Failing {
    type Error = String;
    fn total_memory(&self) -> u64 {
        GIB
    }
    fn allocate(&mut self, _size: u64) -> Result<Option<u64>, String> {
        if self.left == 0 {
            return Err("driver error".into());
        }
        self.left -= 1;
        Ok(Some(u64::from(self.left + 1) << 30))
    }
    fn free(&mut self, _: u64, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn reserve(&mut self, _: u64) -> Result<u64, String> {
        Err("no VMM".into())
    }
    fn release(&mut self, _: u64, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn map(&mut self, _: u64, _: u64, _: u64) -> Result<bool, String> {
        Ok(false)
    }
    fn unmap(&mut self, _: u64, _: u64, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn free_memory(&mut self) -> Result<u64, String> {
        Ok(0)
    }
}

#[test]
fn device_errors_are_returned_not_panicked() {
    let mut a = CachingAllocator::new(AllocatorConfig::default(), Failing { left: 1 });
    assert!(a.malloc(MIB * 30, 0).is_ok());
    assert!(matches!(a.malloc(MIB * 30, 0), Err(AllocError::Device(e)) if e == "driver error"));
    let mut b = CachingAllocator::new(parse("expandable_segments:True"), Failing { left: 0 });
    assert!(matches!(b.malloc(MIB, 0), Err(AllocError::Device(_))));
    let _: &CachingAllocator<Failing, NoEvents> = &b;
}

// ------------------------------------------------------------------------------------------------
// property tests: random programs, invariants after every op
// ------------------------------------------------------------------------------------------------

/// SplitMix64: a small deterministic generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn size(&mut self) -> u64 {
        match self.below(10) {
            0..=3 => 1 + self.below(MIB),
            4..=5 => MIB + 1 + self.below(9 * MIB),
            6..=8 => 10 * MIB + self.below(110 * MIB),
            _ => 120 * MIB + self.below(300 * MIB),
        }
    }
}

fn run_program(config: &str, seed: u64, limit: Option<u64>) {
    let mut a = allocator(parse(config));
    a.set_memory_limit(limit);
    let mut rng = Rng(seed);
    let mut live: Vec<(BlockId, u64)> = Vec::new();
    let mut pending: Vec<BlockId> = Vec::new();
    let streams = [0u64, 0, 0, 7, 9];
    for step in 0..600 {
        let op = rng.below(100);
        let what = if op < 50 || live.is_empty() {
            let size = rng.size();
            let stream = streams[rng.below(5) as usize];
            match a.malloc(size, stream) {
                Ok(x) => {
                    assert!(x.size >= size);
                    live.push((x.id, x.size));
                }
                Err(AllocError::OutOfMemory(_)) => {}
                Err(e) => panic!("{config} seed {seed} step {step}: {e}"),
            }
            "malloc"
        } else if op < 85 {
            let (id, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
            if rng.below(5) == 0 {
                a.record_stream(id, 3).unwrap();
                pending.push(id);
            }
            a.free(id).unwrap();
            "free"
        } else if op < 93 && !pending.is_empty() {
            let id = pending.swap_remove(rng.below(pending.len() as u64) as usize);
            a.complete_events(id).unwrap();
            "complete"
        } else if op < 97 {
            a.empty_cache().unwrap();
            pending.clear();
            "empty_cache"
        } else {
            a.set_memory_limit(if rng.below(2) == 0 {
                None
            } else {
                Some(a.reserved() + rng.below(GIB))
            });
            "limit"
        };
        a.check_invariants()
            .unwrap_or_else(|e| panic!("{config} seed {seed} step {step} ({what}): {e}"));
        // The naive model: allocated = Σ live block sizes, live blocks never overlap.
        let sum: u64 = live.iter().map(|(_, s)| s).sum();
        assert_eq!(a.allocated(), sum, "{config} seed {seed} step {step}");
        let mut spans: Vec<(u64, u64)> = live
            .iter()
            .map(|(id, _)| {
                let b = a.block(*id).unwrap();
                assert!(b.allocated);
                (b.addr, b.addr + b.size)
            })
            .collect();
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlap at step {step}"
        );
    }
    for (id, _) in live.drain(..) {
        a.free(id).unwrap();
    }
    a.empty_cache().unwrap();
    a.check_invariants().unwrap();
    assert_eq!(
        a.reserved(),
        0,
        "{config} seed {seed}: reserved after freeing all"
    );
    assert_eq!(
        a.block_count(),
        0,
        "{config} seed {seed}: blocks after freeing all"
    );
    assert_eq!(a.device().used(), 0);
}

#[test]
fn random_programs_keep_every_invariant() {
    for config in [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "max_split_size_mb:64,max_non_split_rounding_mb:40",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[1:2,64:4,>:8]",
        "large_segment_size_mb:12",
        "garbage_collection_threshold:0.5",
        "expandable_segments:True,garbage_collection_threshold:0.5",
    ] {
        for seed in 1..=6 {
            let limit = (seed % 2 == 0).then_some(2 * GIB);
            run_program(config, seed, limit);
        }
    }
}
