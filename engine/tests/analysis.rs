//! `engine::trace` and `engine::analysis` against small corpus files copied to
//! `tests/data/analysis/` (expected figures from `../shared/corpus/truth.json`, quoted as literals
//! with the row they come from) and against hand-built snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use oomlens_engine::analysis::{self, Analysis, Category};
use oomlens_engine::snapshot::{
    Action, Block, BlockState, DeviceTrace, PoolKind, ReadOptions, Segment, Snapshot, StackId, Sym,
    TraceEntry, read_snapshot_bytes,
};
use oomlens_engine::trace::{self, SizeModel, Walker};

const MIB: u64 = 1 << 20;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/analysis")
        .join(name)
}

fn load(name: &str) -> Snapshot {
    let bytes = std::fs::read(data(name)).expect("test data present");
    read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("snapshot reads")
}

fn entries(s: &Snapshot) -> &[TraceEntry] {
    &s.traces[0].entries
}

/// `a` is within `pct` percent of `b`.
fn near(a: u64, b: u64, pct: f64) -> bool {
    let (a, b) = (a as f64, b as f64);
    (a - b).abs() <= b * pct / 100.0
}

// ------------------------------------------------------------------------------------------------
// Peaks against truth.json
// ------------------------------------------------------------------------------------------------

/// (file, peak_reserved_bytes, peak_allocated_bytes) from truth.json, rows named by the file.
const TRUTH: &[(&str, u64, u64)] = &[
    // truth.json row "gpt__baseline__full"
    (
        "gpt__baseline__full.pickle.gz",
        13_753_122_816,
        13_432_768_000,
    ),
    // truth.json row "gpt__baseline__cap10"
    (
        "gpt__baseline__cap10.pickle.gz",
        10_605_297_664,
        10_583_607_296,
    ),
    // truth.json row "resnet50__baseline__full"
    (
        "resnet50__baseline__full.pickle.gz",
        13_717_471_232,
        11_499_059_712,
    ),
    // truth.json row "resnet50__baseline__cap10"
    (
        "resnet50__baseline__cap10.pickle.gz",
        10_705_960_960,
        10_642_896_384,
    ),
    // truth.json row "hf_gpt2__baseline__full"
    (
        "hf_gpt2__baseline__full.pickle.gz",
        15_915_286_528,
        15_172_465_664,
    ),
];

#[test]
fn peak_reserved_is_exact() {
    for &(file, reserved, _) in TRUTH {
        let a = analysis::analyze(&load(file));
        assert_eq!(a.peak.reserved_bytes, reserved, "{file}: peak reserved");
    }
}

#[test]
fn peak_allocated_from_addresses_matches_truth() {
    // Not promised by the contract (`exact` stays false), but the address deduction reproduces
    // torch.cuda.max_memory_allocated() on every corpus file; a change here is a regression.
    for &(file, _, allocated) in TRUTH {
        let a = analysis::analyze(&load(file));
        assert!(!a.exact);
        assert_eq!(a.peak.allocated_bytes, allocated, "{file}: peak allocated");
        assert!(a.devices.iter().all(|d| d.final_state.matches), "{file}");
    }
}

#[test]
fn analyze_exact_replays_to_the_byte() {
    // The replay reproduces every segment event, including resnet50's 26 OOMs (25 caught by
    // cuDNN, which retries with a smaller workspace) under the inferred limit.
    for &(file, reserved, allocated) in TRUTH {
        let a = analysis::analyze_exact(&load(file));
        assert!(a.exact, "{file}: {}", a.method);
        assert!(a.method.starts_with("replay:"), "{file}: {}", a.method);
        assert_eq!(a.peak.allocated_bytes, allocated, "{file}: peak allocated");
        assert_eq!(a.peak.reserved_bytes, reserved, "{file}: peak reserved");
        assert!(a.peak.event_index.is_some());
    }
}

#[test]
fn analyze_exact_says_why_not_when_the_trace_starts_mid_run() {
    // Drop the first entries (as a wrapped ring buffer does): the state before the trace is
    // rebuilt, so the figures are not claimed exact, and the method says why.
    let mut s = load("gpt__baseline__full.pickle.gz");
    s.traces[0].entries.drain(..200);
    let a = analysis::analyze_exact(&s);
    assert!(!a.exact);
    assert!(a.method.contains("not exact"), "{}", a.method);
}

#[test]
fn exact_peaks_stop_at_the_oom_the_program_did_not_survive() {
    // gpt cap10 ends in an uncaught OOM (entry 553): PyTorch's max_memory_allocated() at the OOM
    // is the peak before it, not what the failed request would have added.
    let s = load("gpt__baseline__cap10.pickle.gz");
    let x = analysis::exact_peaks(&s, 0).unwrap();
    assert_eq!(x.allocated_bytes, 10_583_607_296);
    assert_eq!(x.reserved_bytes, 10_605_297_664);
    assert!(x.allocated_event_index.unwrap() < 553);
    assert!(x.allocated_time_us.is_some());
}

#[test]
fn rounded_model_underestimates_peak_allocated() {
    // round_size(request) alone misses the unsplit remainders: gpt__baseline__full is 2 MiB low.
    let s = load("gpt__baseline__full.pickle.gz");
    let init = trace::initial_state(&s, 0);
    let peak = Walker::with_initial(&s, 0, &init, SizeModel::Rounded)
        .map(|st| st.stats.allocated_bytes)
        .max()
        .unwrap();
    assert_eq!(peak, 13_432_768_000 - 2 * MIB);
}

#[test]
fn walker_matches_memory_stats_after_every_op() {
    // allocator-traces/workload_default: 670 ops with the real memory_stats after each one
    // ([op, ptr, n, stream, allocated, reserved, active, requested]); 10 % on a side stream,
    // record_stream frees, 8 empty_cache() calls, an OOM at the end.
    let s = load("workload_default.pickle");
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("workload_default_truth.json")).unwrap())
            .unwrap();
    let ops: Vec<&serde_json::Value> = truth["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o[0] == "alloc" || o[0] == "free")
        .collect();
    // An op's figures are those after its last entry: a free is `free_requested` and, unless
    // the block waits for recorded streams, the `free_completed` right after it.
    let all: Vec<_> = Walker::new(&s, 0).collect();
    let mut steps = Vec::new();
    for (k, st) in all.iter().enumerate() {
        match st.entry.action {
            Action::Alloc => steps.push(st),
            Action::FreeRequested => match all.get(k + 1) {
                Some(n)
                    if n.entry.action == Action::FreeCompleted && n.entry.addr == st.entry.addr =>
                {
                    steps.push(n)
                }
                _ => steps.push(st),
            },
            _ => {}
        }
    }
    assert_eq!(ops.len(), steps.len());
    for (k, (op, st)) in ops.iter().zip(&steps).enumerate() {
        let want = |i: usize| op[i].as_u64().unwrap();
        assert_eq!(st.entry.addr, want(1), "op {k}: address");
        assert_eq!(
            st.stats.allocated_bytes,
            want(4),
            "op {k} (entry {}): allocated",
            st.index
        );
        assert_eq!(
            st.stats.reserved_bytes,
            want(5),
            "op {k} (entry {}): reserved",
            st.index
        );
        assert_eq!(
            st.stats.active_bytes,
            want(6),
            "op {k} (entry {}): active",
            st.index
        );
        assert_eq!(
            st.stats.requested_bytes,
            want(7),
            "op {k} (entry {}): requested",
            st.index
        );
    }
    // final_stats: allocated_bytes.all.peak = 2856121344, reserved_bytes.all.peak = 3202351104.
    let a = analysis::analyze(&s);
    assert_eq!(a.peak.allocated_bytes, 2_856_121_344);
    assert_eq!(a.peak.reserved_bytes, 3_202_351_104);
}

// ------------------------------------------------------------------------------------------------
// OOM
// ------------------------------------------------------------------------------------------------

#[test]
fn oom_matches_the_trace() {
    let s = load("gpt__baseline__cap10.pickle.gz");
    let a = analysis::analyze(&s);
    let oom = a.oom.as_ref().expect("an OOM");
    let (i, e) = entries(&s)
        .iter()
        .enumerate()
        .find(|(_, e)| e.action == Action::Oom)
        .unwrap();
    assert_eq!(oom.event_index, i);
    assert_eq!(oom.event_index, 553);
    assert_eq!(oom.device, 0);
    assert_eq!(oom.requested_bytes, e.size);
    assert_eq!(oom.requested_bytes, 1_048_576_000); // "Tried to allocate 1000.00 MiB"
    assert_eq!(oom.device_free_bytes, e.device_free().unwrap());
    assert_eq!(oom.device_free_bytes, 116_344_553_472);
    assert!(!oom.recovered);
    assert_eq!(a.ooms.len(), 1);
    // Just before it: the walk's statistics after entry 552.
    let before = Walker::new(&s, 0).nth(i - 1).unwrap().stats;
    assert_eq!(oom.allocated_bytes, before.allocated_bytes);
    assert_eq!(oom.reserved_bytes, before.reserved_bytes);
    assert_eq!(oom.live.bytes, before.allocated_bytes);
    assert_eq!(oom.live.count, before.allocations);
    // The cap is 10 GiB: what was reserved plus the request does not fit.
    assert!(oom.reserved_bytes + oom.requested_bytes > 10 << 30);
    // The free blocks did not hold 1000 MiB even together: a limit, not fragmentation.
    let frag = a.fragmentation.at_oom.as_ref().unwrap();
    assert_eq!(frag.requested_bytes, Some(oom.requested_bytes));
    assert!(frag.largest_free_block_bytes < oom.requested_bytes);
    assert_eq!(frag.blocked_by_fragmentation, Some(false));
    assert_eq!(
        frag.source, "trace",
        "frees follow the OOM, so the dump is not the OOM state"
    );
    assert_eq!(oom.phase, analysis::Phase::Backward);
}

#[test]
fn caught_ooms_are_told_apart_from_the_fatal_one() {
    // resnet50 at a 10 GiB cap: cuDNN tries workspace sizes that OOM (entries 706–730, caught),
    // then the real OOM at entry 737 ends the trace.
    let s = load("resnet50__baseline__cap10.pickle.gz");
    let a = analysis::analyze(&s);
    assert_eq!(a.ooms.len(), 26);
    assert!(a.ooms[..25].iter().all(|o| o.recovered));
    let oom = a.oom.as_ref().unwrap();
    assert_eq!(oom.event_index, 737);
    assert!(!oom.recovered);
    assert_eq!(oom.requested_bytes, 51_380_224);
    assert_eq!(oom.device_free_bytes, 137_306_308_608);
    let frag = a.fragmentation.at_oom.as_ref().unwrap();
    // Nothing follows the OOM: the dump's own blocks are the state at the OOM.
    assert_eq!(frag.source, "segments");
    assert_eq!(frag.pool, Some(PoolKind::Large));
    assert!(frag.largest_free_block_bytes < oom.requested_bytes);
}

// ------------------------------------------------------------------------------------------------
// Categories
// ------------------------------------------------------------------------------------------------

/// Parameters + buffers that `model.to(device)` allocates, in requested bytes, computed from the
/// configs (fp32, 4 bytes each) and equal to the Σ requested size of the `_apply` allocations.
const GPT_PARAM_BYTES: u64 = 883_548_160; // 220,887,040 params, see below
const RESNET50_PARAM_BYTES: u64 = 102_441_032; // 25,557,032 params + BN buffers (53,227 B)
const HF_GPT2_PARAM_BYTES: u64 = 497_759_232; // 124,439,808 params (GPT-2 small, tied head)

#[test]
fn parameter_counts_from_the_configs() {
    // gpt: d=1024, 12 layers, vocab 32000; a 4096-row position table (the 16 MiB tensor in the
    // trace); per layer 2 LayerNorms, qkv 3d²+3d, proj d²+d, MLP 4d²+4d and 4d²+d; final LN;
    // untied head without bias.
    let d: u64 = 1024;
    let layer =
        2 * (2 * d) + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d);
    let gpt = 32_000 * d + 4096 * d + 12 * layer + 2 * d + 32_000 * d;
    assert_eq!(gpt, 220_887_040);
    assert_eq!(gpt * 4, GPT_PARAM_BYTES);
    // GPT-2 small: wte 50257×768 (tied with the head), wpe 1024×768, 12 blocks, ln_f.
    let h: u64 = 768;
    let block =
        2 * (2 * h) + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h);
    let gpt2 = 50_257 * h + 1024 * h + 12 * block + 2 * h;
    assert_eq!(gpt2, 124_439_808);
    assert_eq!(gpt2 * 4, HF_GPT2_PARAM_BYTES);
    // ResNet-50: 25,557,032 parameters; BN running mean/var (26,560 channels) and 53
    // num_batches_tracked (int64).
    assert_eq!(
        25_557_032 * 4 + 2 * 26_560 * 4 + 53 * 8,
        RESNET50_PARAM_BYTES
    );
}

fn assert_categories_sum(a: &Analysis) {
    assert_eq!(
        a.categories_at_peak.total_bytes(),
        a.peak.allocated_bytes,
        "categories must sum to allocated at the peak"
    );
}

#[test]
fn categories_at_the_peak_of_the_three_baselines() {
    // (file, parameter bytes, AdamW state = 2 × parameters without buffers)
    let cases = [
        (
            "gpt__baseline__full.pickle.gz",
            GPT_PARAM_BYTES,
            2 * GPT_PARAM_BYTES,
        ),
        (
            "resnet50__baseline__full.pickle.gz",
            RESNET50_PARAM_BYTES,
            2 * 25_557_032 * 4,
        ),
        (
            "hf_gpt2__baseline__full.pickle.gz",
            HF_GPT2_PARAM_BYTES,
            2 * HF_GPT2_PARAM_BYTES,
        ),
    ];
    for (file, params, state) in cases {
        let a = analysis::analyze(&load(file));
        assert_categories_sum(&a);
        let c = &a.categories_at_peak;
        // What the tensors asked for is exact; blocks add the allocator's unsplit remainders.
        assert_eq!(c.parameter.requested_bytes, params, "{file}: parameters");
        assert!(c.parameter.bytes >= params && near(c.parameter.bytes, params, 0.5));
        assert_eq!(
            c.optimizer_state.requested_bytes, state,
            "{file}: optimizer state"
        );
        assert!(near(c.optimizer_state.bytes, state, 1.0), "{file}");
        // Every peak is early in the second step's backward: activations dominate, the inputs
        // are there, gradients have (almost) not been made yet (zero_grad set them to None).
        assert!(c.activation.bytes > a.peak.allocated_bytes / 2, "{file}");
        assert!(c.input.count >= 1, "{file}");
        assert!(c.gradient.bytes < c.parameter.bytes / 10, "{file}");
        // cuBLAS workspaces (32 MiB + 1 MiB, forward thread; 32 MiB, backward thread) persist.
        assert_eq!(c.unknown.bytes, 65 * MIB, "{file}");
        assert_eq!(a.peak.phase, analysis::Phase::Backward, "{file}");
        for cat in Category::ALL {
            assert!(!c.get(cat).rule.is_empty());
        }
    }
}

#[test]
fn gradients_equal_parameters_when_the_optimizer_starts() {
    for (file, trainable) in [
        ("gpt__baseline__full.pickle.gz", GPT_PARAM_BYTES),
        ("resnet50__baseline__full.pickle.gz", 25_557_032 * 4),
        ("hf_gpt2__baseline__full.pickle.gz", HF_GPT2_PARAM_BYTES),
    ] {
        let s = load(file);
        // The entry before the first optimizer allocation of step 1.
        let first_step = entries(&s)
            .iter()
            .position(|e| {
                e.action == Action::Alloc
                    && s.stacks
                        .frames(e.frames)
                        .iter()
                        .any(|f| s.stacks.str(f.filename).contains("torch/optim/"))
            })
            .unwrap();
        let c = analysis::categories_at(&s, 0, first_step - 1);
        assert_eq!(c.gradient.requested_bytes, trainable, "{file}: gradients");
        // resnet50's 161 gradients of many sizes leave 5 % in unsplit remainders.
        assert!(
            near(c.gradient.bytes, trainable, 6.0),
            "{file}: {}",
            c.gradient.bytes
        );
        assert_eq!(
            c.optimizer_state.bytes, 0,
            "{file}: no state before the first step"
        );
        // The backward freed the saved activations; the model output and the loss are still
        // held by the training loop until the next step.
        assert!(
            c.activation.count <= 2,
            "{file}: {} activations",
            c.activation.count
        );
        eprintln!(
            "{file}: at the first optimizer step: gradient {} (trainable {trainable}), activation {} in {}",
            c.gradient.bytes, c.activation.bytes, c.activation.count
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Sites, timeline, JSON
// ------------------------------------------------------------------------------------------------

#[test]
fn top_sites_are_user_lines() {
    let a = analysis::analyze(&load("gpt__baseline__full.pickle.gz"));
    assert!(!a.top_sites.is_empty() && a.top_sites.len() <= 20);
    assert!(a.top_sites.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    let top = &a.top_sites[0];
    assert_eq!(top.site, "/opt/job/train.py:69:forward");
    assert_eq!(top.category, Category::Activation);
    assert!(top.stack.iter().any(|f| f.contains("site-packages/torch")));
    let params = a
        .top_sites
        .iter()
        .find(|s| s.category == Category::Parameter)
        .unwrap();
    assert_eq!(params.site, "/opt/job/train.py:86:build");
    assert_eq!(params.count, 149);
    let sum: u64 = a.top_sites.iter().map(|s| s.bytes).sum();
    assert!(sum <= a.peak.allocated_bytes);
}

#[test]
fn timeline_keeps_the_peaks() {
    let s = load("hf_gpt2__baseline__full.pickle.gz");
    let opts = analysis::AnalyzeOptions {
        timeline_points: 300,
        ..analysis::AnalyzeOptions::default()
    };
    let a = analysis::analyze_with(&s, &opts);
    let t = &a.timeline;
    assert_eq!(t.events, entries(&s).len() as u64);
    assert!(t.points.len() <= 300);
    assert!(
        t.points
            .iter()
            .any(|p| p.allocated_bytes == a.peak.allocated_bytes)
    );
    assert!(
        t.points
            .iter()
            .any(|p| p.reserved_bytes == a.peak.reserved_bytes)
    );
    assert!(
        t.points
            .windows(2)
            .all(|w| w[0].event_index < w[1].event_index)
    );
}

#[test]
fn json_contract() {
    let a = analysis::analyze(&load("gpt__baseline__cap10.pickle.gz"));
    let v = serde_json::to_value(&a).unwrap();
    for key in [
        "events",
        "devices",
        "exact",
        "method",
        "peak",
        "oom",
        "ooms",
        "timeline",
        "categories_at_peak",
        "top_sites",
        "fragmentation",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    for key in [
        "allocated_bytes",
        "reserved_bytes",
        "event_index",
        "time_us",
        "device",
        "reserved_event_index",
    ] {
        assert!(v["peak"].get(key).is_some(), "peak.{key}");
    }
    for key in [
        "event_index",
        "device",
        "requested_bytes",
        "device_free_bytes",
        "allocated_bytes",
        "reserved_bytes",
    ] {
        assert!(v["oom"].get(key).is_some(), "oom.{key}");
    }
    assert!(v["oom"]["live"]["count"].is_u64() && v["oom"]["live"]["bytes"].is_u64());
    for key in [
        "event_index",
        "time_us",
        "allocated_bytes",
        "reserved_bytes",
    ] {
        assert!(
            v["timeline"]["points"][0].get(key).is_some(),
            "timeline point .{key}"
        );
    }
    for cat in [
        "parameter",
        "gradient",
        "optimizer_state",
        "activation",
        "temporary",
        "input",
        "unknown",
    ] {
        let c = &v["categories_at_peak"][cat];
        assert!(
            c["bytes"].is_u64() && c["count"].is_u64() && c["rule"].is_string(),
            "{cat}"
        );
    }
    for key in ["site", "bytes", "count", "category", "stack"] {
        assert!(v["top_sites"][0].get(key).is_some(), "top_sites[0].{key}");
    }
    assert!(v["fragmentation"]["at_peak"].is_object());
    assert!(v["fragmentation"]["at_oom"].is_object());
    assert_eq!(v["exact"], false);
    assert_eq!(v["devices"][0]["starts_mid_run"], false);
}

// ------------------------------------------------------------------------------------------------
// Initial state: complete, wrapped, hand-built
// ------------------------------------------------------------------------------------------------

#[test]
fn complete_trace_starts_empty() {
    for &(file, _, _) in TRUTH {
        let s = load(file);
        let init = trace::initial_state(&s, 0);
        assert!(!init.starts_mid_run, "{file}");
        assert!(init.blocks.is_empty() && init.segments.is_empty(), "{file}");
        assert_eq!(init.allocated_bytes + init.reserved_bytes, 0);
        assert!(init.notes.is_empty(), "{file}: {:?}", init.notes);
    }
}

#[test]
fn wrapped_ring_buffer_is_detected_and_rebuilt() {
    let full = load("gpt__baseline__full.pickle.gz");
    let full_steps: Vec<_> = Walker::new(&full, 0).map(|st| st.stats).collect();
    for k in [1, 200, 3001, 5000, 7000] {
        let mut s = full.clone();
        s.traces[0].entries.drain(..k);
        let init = trace::initial_state(&s, 0);
        assert!(init.starts_mid_run, "k={k}");
        assert!(init.notes.iter().any(|n| n.contains("mid-run")), "k={k}");
        // The state before the kept entries is the full trace's state after entry k-1.
        let truth = full_steps[k - 1];
        assert_eq!(init.reserved_bytes, truth.reserved_bytes, "k={k}: reserved");
        assert_eq!(init.active_bytes, truth.active_bytes, "k={k}: active");
        let live = init.blocks.len() as u64;
        assert!(live >= truth.allocations, "k={k}");
        // Block sizes of blocks freed later are estimates: the rebuilt allocated is close.
        assert!(
            init.allocated_bytes.abs_diff(truth.allocated_bytes)
                <= 2 * MIB * init.estimated_sizes as u64,
            "k={k}: allocated {} vs {}",
            init.allocated_bytes,
            truth.allocated_bytes
        );
        // Walking on from the rebuilt state ends exactly at the dump's segments.
        let mut w = Walker::with_initial(&s, 0, &init, SizeModel::Inferred);
        let mut n = 0;
        for (j, st) in w.by_ref().enumerate() {
            assert_eq!(
                st.stats.reserved_bytes,
                full_steps[k + j].reserved_bytes,
                "k={k}: reserved after entry {}",
                k + j
            );
            n += 1;
        }
        assert_eq!(n, full_steps.len() - k);
        assert_eq!(w.anomalies(), 0, "k={k}");
        let check = w.final_check(&s, 0);
        assert!(check.matches, "k={k}: {check:?}");
        // The analysis says so too.
        let a = analysis::analyze(&s);
        assert!(a.devices[0].starts_mid_run);
        assert_categories_sum(&a);
    }
}

const BASE: u64 = 0x7f00_0000_0000;
const SMALL_SEG: u64 = 0x7f10_0000_0000;

fn entry(action: Action, addr: u64, size: u64) -> TraceEntry {
    TraceEntry {
        action,
        addr,
        size,
        stream: 0,
        time_us: None,
        frames: StackId::EMPTY,
        compile_context: Sym::EMPTY,
        user_metadata: Sym::EMPTY,
    }
}

fn block(address: u64, size: u64, requested: u64, state: BlockState) -> Block {
    Block {
        address,
        size,
        requested_size: requested,
        state,
        frames: StackId::EMPTY,
    }
}

fn segment(address: u64, pool: PoolKind, blocks: Vec<Block>) -> Segment {
    let total_size = blocks.iter().map(|b| b.size).sum();
    let allocated_size = blocks
        .iter()
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum();
    Segment {
        device: 0,
        address,
        total_size,
        allocated_size,
        active_size: allocated_size,
        requested_size: 0,
        stream: 0,
        segment_type: pool,
        segment_pool_id: (0, 0),
        is_expandable: false,
        frames: StackId::EMPTY,
        blocks,
    }
}

/// A 20 MiB segment whose 8 MiB block X and a block Y of 3,000,000 requested bytes were live
/// before the trace; the trace frees Y, then makes a small segment and allocates 1000 bytes.
fn mid_run_snapshot() -> Snapshot {
    Snapshot {
        segments: vec![
            segment(
                BASE,
                PoolKind::Large,
                vec![
                    block(BASE, 8 * MIB, 8 * MIB, BlockState::ActiveAllocated),
                    block(BASE + 8 * MIB, 12 * MIB, 0, BlockState::Inactive),
                ],
            ),
            segment(
                SMALL_SEG,
                PoolKind::Small,
                vec![
                    block(SMALL_SEG, 1024, 1000, BlockState::ActiveAllocated),
                    block(SMALL_SEG + 1024, 2 * MIB - 1024, 0, BlockState::Inactive),
                ],
            ),
        ],
        traces: vec![DeviceTrace {
            device: 0,
            entries: vec![
                entry(Action::FreeRequested, BASE + 8 * MIB, 3_000_000),
                entry(Action::FreeCompleted, BASE + 8 * MIB, 3_000_000),
                entry(Action::SegmentAlloc, SMALL_SEG, 2 * MIB),
                entry(Action::Alloc, SMALL_SEG, 1000),
            ],
        }],
        stacks: oomlens_engine::snapshot::Stacks::new(),
        ..Snapshot::default()
    }
}

#[test]
fn hand_built_mid_run_snapshot() {
    let s = mid_run_snapshot();
    let init = trace::initial_state(&s, 0);
    assert!(init.starts_mid_run);
    assert_eq!(init.blocks.len(), 2);
    // X is exact (still in the dump); Y is round_size(3,000,000) = 3,000,320: the 9.14 MiB left
    // after it would be split off (> 1 MiB), so it is not widened.
    assert_eq!(init.blocks[0].size, 8 * MIB);
    assert!(!init.blocks[0].size_estimated);
    assert_eq!(init.blocks[1].addr, BASE + 8 * MIB);
    assert_eq!(init.blocks[1].size, 3_000_320);
    assert_eq!(init.blocks[1].requested, 3_000_000);
    assert!(init.blocks[1].size_estimated);
    assert_eq!(init.estimated_sizes, 1);
    assert_eq!(init.allocated_bytes, 8 * MIB + 3_000_320);
    assert_eq!(init.reserved_bytes, 20 * MIB);
    assert_eq!(init.segments.len(), 1);

    let stats: Vec<_> = Walker::new(&s, 0).map(|st| st.stats).collect();
    assert_eq!(stats[0].allocated_bytes, 8 * MIB);
    assert_eq!(stats[1].active_bytes, 8 * MIB);
    assert_eq!(stats[3].allocated_bytes, 8 * MIB + 1024);
    assert_eq!(stats[3].reserved_bytes, 22 * MIB);

    let mut w = Walker::new(&s, 0);
    w.by_ref().for_each(drop);
    assert!(w.final_check(&s, 0).matches);

    let a = analysis::analyze(&s);
    assert!(a.devices[0].starts_mid_run);
    assert_eq!(a.devices[0].initial_allocated_bytes, 8 * MIB + 3_000_320);
    // The peak is the state before the trace.
    assert_eq!(a.peak.event_index, None);
    assert_eq!(a.peak.allocated_bytes, 8 * MIB + 3_000_320);
    assert_eq!(a.peak.reserved_event_index, Some(2));
    assert_categories_sum(&a);
    assert_eq!(a.categories_at_peak.unknown.count, 2);
}

#[test]
fn a_block_freed_in_the_trace_is_widened_when_it_was_not_split() {
    // Y (requested 11.5 MiB) sat in a 12 MiB segment: 0.5 MiB would have been left, which the
    // large pool does not split off (spec C.8), so the block was the whole 12 MiB.
    let s = Snapshot {
        segments: vec![segment(
            BASE,
            PoolKind::Large,
            vec![block(BASE, 12 * MIB, 0, BlockState::Inactive)],
        )],
        traces: vec![DeviceTrace {
            device: 0,
            entries: vec![entry(Action::FreeRequested, BASE, 11 * MIB + MIB / 2)],
        }],
        ..Snapshot::default()
    };
    let init = trace::initial_state(&s, 0);
    assert_eq!(init.blocks.len(), 1);
    assert_eq!(init.blocks[0].size, 12 * MIB);
    // The free_requested without free_completed is noted, not fatal.
    assert!(!init.notes.is_empty());
}

#[test]
fn inconsistencies_become_notes() {
    let mut s = mid_run_snapshot();
    s.traces[0].entries.extend([
        // Two allocations at one address without a free between them.
        entry(Action::Alloc, 0xdead_0000, 4096),
        entry(Action::Alloc, 0xdead_0000, 4096),
        // The 1000-byte block is returned to the pool, yet the dump still has it allocated.
        entry(Action::FreeCompleted, SMALL_SEG, 1000),
    ]);
    let init = trace::initial_state(&s, 0);
    assert!(
        init.notes.iter().any(|n| n.contains("0xdead0000")),
        "{:?}",
        init.notes
    );
    let a = analysis::analyze(&s);
    let notes = &a.devices[0].notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("where the trace still had a live block")),
        "{notes:?}"
    );
    assert!(!a.devices[0].final_state.matches);
    assert!(
        notes.iter().any(|n| n.contains("differs from the dump")),
        "{notes:?}"
    );
    assert_categories_sum(&a);
}

#[test]
fn never_panics() {
    // Empty, segments only, trace only, and a stream of nonsense entries with extreme values.
    let _ = analysis::analyze(&Snapshot::default());
    let mut s = mid_run_snapshot();
    s.traces.clear();
    let a = analysis::analyze(&s);
    assert!(a.devices[0].starts_mid_run);
    assert_eq!(a.peak.allocated_bytes, 8 * MIB + 1024);

    let actions = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::UserDefined,
        Action::Unknown,
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut trace = Vec::new();
    for _ in 0..20_000 {
        let a = actions[(next() % actions.len() as u64) as usize];
        let addr = match next() % 4 {
            0 => u64::MAX - (next() % 8) * 512,
            1 => 0,
            _ => BASE + (next() % 64) * MIB,
        };
        let size = match next() % 4 {
            0 => u64::MAX,
            1 => 0,
            _ => next() % (64 * MIB),
        };
        let mut e = entry(a, addr, size);
        e.time_us = Some((next() % 1000) as i64 - 500);
        e.stream = next() % 2;
        trace.push(e);
    }
    s.traces = vec![
        DeviceTrace {
            device: 0,
            entries: trace.clone(),
        },
        DeviceTrace {
            device: 3,
            entries: trace,
        },
    ];
    let a = analysis::analyze(&s);
    assert_eq!(a.events, 40_000);
    assert_eq!(a.devices.len(), 2);
    let _ = serde_json::to_string(&a).unwrap();
}

// ------------------------------------------------------------------------------------------------
// Speed (needs the shared corpus; run with --release -- --ignored --nocapture)
// ------------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs ../shared/corpus/large; a timing, not a check"]
fn analyze_speed_on_the_long_trace() {
    let path = std::env::var("OOMLENS_LONG_TRACE").unwrap_or_else(|_| {
        format!(
            "{}/../../shared/corpus/large/gpt__baseline__long400.pickle.gz",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("SKIPPED: {path} not found");
        return;
    };
    let s = read_snapshot_bytes(&bytes, &ReadOptions::default()).unwrap();
    let mut best = std::time::Duration::MAX;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let a = analysis::analyze(&s);
        best = best.min(t.elapsed());
        assert_eq!(a.events, 961_801);
        // truth.json row "gpt__baseline__long400"
        assert_eq!(a.peak.reserved_bytes, 13_753_122_816);
        assert_eq!(a.peak.allocated_bytes, 13_432_768_000);
    }
    eprintln!("analyze: {best:?} for 961,801 entries (best of 5)");
}

// ------------------------------------------------------------------------------------------------
// Full-resolution series and the allocator's state at the OOM
// ------------------------------------------------------------------------------------------------

fn with_series(s: &Snapshot) -> (Analysis, analysis::Series) {
    let opts = analysis::AnalyzeOptions {
        series: true,
        ..analysis::AnalyzeOptions::default()
    };
    let (a, series) = analysis::analyze_exact_with(s, &opts);
    (a, series.expect("a series for a snapshot with a trace"))
}

#[test]
fn series_max_is_the_exact_peak() {
    for &(file, reserved, allocated) in TRUTH {
        let s = load(file);
        let (a, series) = with_series(&s);
        assert!(a.exact && series.exact(), "{file}: {}", a.method);
        assert_eq!(series.len(), entries(&s).len(), "{file}");
        assert_eq!(series.device(), a.peak.device, "{file}");
        assert_eq!(series.max_allocated(), allocated, "{file}: allocated");
        assert_eq!(series.max_reserved(), reserved, "{file}: reserved");
        assert_eq!(series.max_allocated(), a.peak.allocated_bytes, "{file}");
        assert_eq!(series.max_reserved(), a.peak.reserved_bytes, "{file}");
        let i = a.peak.event_index.expect("peak entry");
        assert_eq!(
            series.allocated()[i],
            a.peak.allocated_bytes,
            "{file}: at the peak entry"
        );
        assert_eq!(series.time_us(i), a.peak.time_us, "{file}");
        // The same analysis as without the series, to the byte.
        let plain = serde_json::to_string(&analysis::analyze_exact(&s)).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), plain, "{file}");
        // Round trip, and every window keeps the peaks.
        let bytes = series.to_bytes();
        assert_eq!(analysis::Series::from_bytes(&bytes).as_ref(), Ok(&series));
        let w = series.window(0, series.len(), 1200);
        assert_eq!(w.iter().map(|p| p.allocated.max).max(), Some(allocated));
        assert_eq!(w.iter().map(|p| p.reserved.max).max(), Some(reserved));
        let w = series.window(i, i + 1, 10);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].allocated.max, allocated);
    }
}

#[test]
fn series_of_a_mid_run_trace_is_the_walk() {
    let mut s = load("gpt__baseline__full.pickle.gz");
    s.traces[0].entries.drain(..200);
    let (a, series) = with_series(&s);
    assert!(!a.exact && !series.exact());
    assert_eq!(series.len(), entries(&s).len());
    assert_eq!(series.max_allocated(), a.peak.allocated_bytes);
    assert_eq!(series.max_reserved(), a.peak.reserved_bytes);
    assert_eq!(analysis::series(&s).as_ref(), Some(&series));
}

#[test]
fn no_series_without_a_trace() {
    let (_, series) = analysis::analyze_exact_with(
        &Snapshot::default(),
        &analysis::AnalyzeOptions {
            series: true,
            ..analysis::AnalyzeOptions::default()
        },
    );
    assert!(series.is_none());
    assert!(analysis::state_at_oom(&Snapshot::default()).is_none());
}

#[test]
fn state_at_oom_explains_the_failed_request() {
    for file in [
        "gpt__baseline__cap10.pickle.gz",
        "resnet50__baseline__cap10.pickle.gz",
    ] {
        let s = load(file);
        let a = analysis::analyze(&s);
        let oom = a.oom.as_ref().expect("an OOM");
        let st = analysis::state_at_oom(&s).expect("a state at the OOM");
        assert_eq!(
            (st.device, st.event_index),
            (oom.device, oom.event_index),
            "{file}"
        );
        assert_eq!(st.request.size, oom.requested_bytes, "{file}");
        assert_eq!(st.request.size, entries(&s)[oom.event_index].size, "{file}");
        assert!(st.request.rounded_size >= st.request.size, "{file}");
        assert!(st.exact, "{file}: {:?}", st.notes);
        let reserved: u64 = st.segments.iter().map(|g| g.total_size).sum();
        assert_eq!(
            reserved, oom.reserved_bytes,
            "{file}: Σ segments = reserved at the OOM"
        );
        assert_eq!(st.reserved_bytes, reserved, "{file}");
        for g in &st.segments {
            let blocks: u64 = g.blocks.iter().map(|b| b.size).sum();
            assert_eq!(blocks, g.total_size, "{file}: segment 0x{:x}", g.address);
            assert!(
                g.blocks
                    .windows(2)
                    .all(|w| w[0].offset + w[0].size == w[1].offset)
            );
            for b in &g.blocks {
                assert_eq!(b.fit.is_some(), b.state == BlockState::Inactive);
                assert_eq!(b.requested_size.is_some(), b.state != BlockState::Inactive);
                assert_ne!(b.fit, Some(analysis::FreeBlockFit::Fits), "{file}");
            }
        }
        assert!(st.segments.windows(2).all(|w| w[0].address < w[1].address));
        assert!(!st.why.is_empty(), "{file}");
        assert!(
            st.why.contains("GiB") || st.why.contains("MiB"),
            "{file}: {}",
            st.why
        );
        let json = serde_json::to_string(&st).unwrap();
        let back: analysis::OomState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, st);
        println!("{file}: {}", st.why);
    }
}

#[test]
fn live_at_the_peak_is_what_the_analysis_reports_at_the_peak() {
    let s = load("gpt__baseline__full.pickle.gz");
    let a = analysis::analyze(&s);
    let peak = &a.peak;
    let event = peak.event_index.expect("the peak's event");
    let (cats, sites) = analysis::live_at(&s, peak.device, event, 20);
    assert_eq!(
        serde_json::to_value(&cats).ok(),
        serde_json::to_value(&a.categories_at_peak).ok()
    );
    assert_eq!(sites.len(), a.top_sites.len());
    for (x, y) in sites.iter().zip(&a.top_sites) {
        assert_eq!((&x.site, x.bytes, x.count), (&y.site, y.bytes, y.count));
    }
    // Earlier, less is live: the first event holds at most what the peak does.
    let (early, _) = analysis::live_at(&s, peak.device, 0, 20);
    let total = |c: &analysis::Categories| {
        serde_json::to_value(c)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .map_or(0, |o| {
                o.values().filter_map(|t| t["bytes"].as_u64()).sum::<u64>()
            })
    };
    assert!(
        total(&early) < total(&cats),
        "{} vs {}",
        total(&early),
        total(&cats)
    );
}
