//! The allocator replay against ground truth recorded on a real GPU (PyTorch 2.11, H200):
//!
//! * `allocator-traces/workload_{default,expandable}`: 670 scripted ops with the allocator's
//!   statistics after every op, a 3 GiB fraction limit, ending in an OOM — checked op by op,
//!   plus the final `memory_stats()` and the identical trace.
//! * corpus snapshots (`truth.json`): replays with the recorded settings and cap give the
//!   recorded segment events, the peaks to the byte and the OOM where PyTorch raised it; replays
//!   of each workload's `baseline__full` with another run's `PYTORCH_CUDA_ALLOC_CONF` and cap give
//!   that run's OOM outcome.
//!
//! The files in `tests/data/replay/` are copies of small `/work/shared/corpus` files
//! (`truth_subset.json` holds the fields of `truth.json` these tests use). The sweep over every
//! corpus file runs when `../shared/corpus` is present and says `skipped:` otherwise.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use oomlens_engine::allocator::{
    AddressOracle, AllocError, AllocatorConfig, BlockId, CachingAllocator, Event, SMALL_BUFFER,
    SimDevice, allowed_from_fraction, expandable_reservation_size,
};
use oomlens_engine::replay::{DivergenceKind, Replay, ReplayError, ReplayOptions, replay};
use oomlens_engine::snapshot::{Action, ReadOptions, Snapshot, read_snapshot_bytes};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/replay")
        .join(name)
}

fn shared() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    p.join("truth.json").exists().then_some(p)
}

fn read_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn snapshot(path: &Path) -> Snapshot {
    read_snapshot_bytes(&read_bytes(path), &ReadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(path: &Path) -> Value {
    let raw = read_bytes(path);
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_string(&mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(raw).unwrap()
    };
    serde_json::from_str(&text).unwrap()
}

/// `torch.cuda.set_per_process_memory_fraction(cap / total)` → PyTorch's `allowed` bytes.
fn allowed(cap: f64, total: u64) -> u64 {
    #[allow(clippy::cast_precision_loss)]
    let fraction = (cap / total as f64).min(1.0);
    allowed_from_fraction(fraction, total).unwrap_or(u64::MAX)
}

struct TruthRun {
    id: String,
    workload: String,
    remedy: String,
    cap: f64,
    total: u64,
    oom: bool,
    peak_allocated: u64,
    peak_reserved: u64,
    alloc_conf: String,
    snapshot: Option<String>,
}

fn truth(path: &Path) -> Vec<TruthRun> {
    let v = json(path);
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| TruthRun {
            id: r["id"].as_str().unwrap().to_string(),
            workload: r["workload"].as_str().unwrap().to_string(),
            remedy: r["remedy"].as_str().unwrap().to_string(),
            cap: r["cap_bytes"].as_f64().unwrap(),
            total: r["device_total_bytes"].as_u64().unwrap(),
            oom: r["oom"].as_bool().unwrap(),
            peak_allocated: r["peak_allocated_bytes"].as_u64().unwrap(),
            peak_reserved: r["peak_reserved_bytes"].as_u64().unwrap(),
            alloc_conf: r
                .get("alloc_conf")
                .and_then(Value::as_str)
                .or_else(|| r["config"].get("alloc_conf").and_then(Value::as_str))
                .unwrap_or("")
                .to_string(),
            snapshot: r["snapshot"]
                .as_str()
                .map(|s| s.rsplit('/').next().unwrap_or(s).to_string()),
        })
        .collect()
}

fn last_oom_index(s: &Snapshot) -> Option<usize> {
    s.traces[0]
        .entries
        .iter()
        .rposition(|e| e.action == Action::Oom)
}

/// Replays a snapshot with its recorded settings and cap; returns what differs from the truth.
fn check_recorded(s: &Snapshot, run: &TruthRun) -> (Replay, Vec<String>) {
    let opts = ReplayOptions {
        capacity: Some(allowed(run.cap, run.total)),
        device_total: run.total,
        ..ReplayOptions::default()
    };
    let r = replay(s, &opts).unwrap_or_else(|e| panic!("{}: {e}", run.id));
    let mut bad = Vec::new();
    if r.segment_events_identical != Some(true) {
        bad.push(format!("segment events differ: {:?}", r.first_divergence));
    }
    if r.trace_identical != Some(true) {
        bad.push(format!("trace differs: {:?}", r.first_divergence));
    }
    if r.peak_allocated_bytes != run.peak_allocated {
        bad.push(format!(
            "peak allocated {} != {}",
            r.peak_allocated_bytes, run.peak_allocated
        ));
    }
    if r.peak_reserved_bytes != run.peak_reserved {
        bad.push(format!(
            "peak reserved {} != {}",
            r.peak_reserved_bytes, run.peak_reserved
        ));
    }
    if r.oom != run.oom {
        bad.push(format!("oom {} != {}", r.oom, run.oom));
    }
    if run.oom && r.oom_event_index != last_oom_index(s) {
        bad.push(format!(
            "oom at {:?}, recorded at {:?}",
            r.oom_event_index,
            last_oom_index(s)
        ));
    }
    (r, bad)
}

/// Replays `baseline` with another run's config and cap: PyTorch's OOM outcome must come out.
fn check_what_if(baseline: &Snapshot, run: &TruthRun) -> Result<(), String> {
    let config = AllocatorConfig::parse(&run.alloc_conf).map_err(|e| e.to_string())?;
    let opts = ReplayOptions {
        config: Some(config),
        capacity: Some(allowed(run.cap, run.total)),
        device_total: run.total,
        ..ReplayOptions::default()
    };
    let r = replay(baseline, &opts).map_err(|e| e.to_string())?;
    if r.oom == run.oom {
        Ok(())
    } else {
        Err(format!(
            "{}: replay oom={} (peak reserved {}), PyTorch oom={} (peak reserved {})",
            run.id, r.oom, r.peak_reserved_bytes, run.oom, run.peak_reserved
        ))
    }
}

const WHAT_IF_REMEDIES: [&str; 5] = [
    "baseline",
    "expandable_segments",
    "max_split_128",
    "gc_threshold_06",
    "roundup_pow2_4",
];

fn is_capped(id: &str) -> bool {
    id.contains("__cap") || id.contains("__tight")
}

// ------------------------------------------------------------------------------------------------
// allocator-traces: per-op ground truth
// ------------------------------------------------------------------------------------------------

/// Drives the allocator op by op as the workload script did and checks the statistics after
/// every op and at the end; returns the allocator for further checks.
fn drive_workload(pickle: &str, truth_file: &str) {
    let s = snapshot(&data(pickle));
    let t = json(&data(truth_file));
    let total = t["total"].as_u64().unwrap();
    let limit = t["limit"].as_u64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let limit_bytes = allowed(limit as f64, total);
    let config = AllocatorConfig::from_settings(s.allocator_settings.as_ref().unwrap());
    let va = expandable_reservation_size(total, SMALL_BUFFER);
    let mut a =
        CachingAllocator::with_sink(config, SimDevice::new(total, None), Vec::<Event>::new());
    // Before recording began, the script allocated one byte, freed it and emptied the cache:
    // invisible in the trace, but memory_stats() counts it (every accumulated counter is one
    // block and one 2 MiB small segment ahead). Do the same, then take the recorded addresses.
    let warm = a.malloc(1, 0).unwrap();
    a.free(warm.id).unwrap();
    a.empty_cache().unwrap();
    a.sink_mut().clear();
    a.device_mut()
        .set_oracle(AddressOracle::from_trace(&s.traces[0].entries, va));
    a.set_memory_limit(Some(limit_bytes));
    let mut live: BTreeMap<u64, BlockId> = BTreeMap::new();
    let steps = t["steps"].as_array().unwrap();
    let mut ooms = 0;
    for (i, st) in steps.iter().enumerate() {
        let st = st.as_array().unwrap();
        let op = st[0].as_str().unwrap();
        let ptr = st[1].as_u64().unwrap();
        let n = st[2].as_u64().unwrap();
        let stream = st[3].as_u64().unwrap();
        match op {
            "alloc" => {
                let x = a
                    .malloc(n, stream)
                    .unwrap_or_else(|e| panic!("step {i}: {e}"));
                assert_eq!(x.addr, ptr, "step {i}: address");
                live.insert(ptr, x.id);
            }
            "free" => a.free(live.remove(&ptr).unwrap()).unwrap(),
            "empty_cache" => a.empty_cache().unwrap(),
            "OOM" => {
                assert!(
                    matches!(a.malloc(n, stream), Err(AllocError::OutOfMemory(_))),
                    "step {i}: OOM expected"
                );
                ooms += 1;
            }
            other => panic!("unknown op {other}"),
        }
        a.check_invariants()
            .unwrap_or_else(|e| panic!("step {i} ({op}): {e}"));
        let got = [
            a.allocated(),
            a.reserved(),
            a.active(),
            u64::try_from(a.stats().requested_bytes.all.current).unwrap(),
        ];
        let want = [4, 5, 6, 7].map(|k| st[k].as_u64().unwrap());
        assert_eq!(
            got, want,
            "step {i} ({op} {n}): [allocated, reserved, active, requested]"
        );
    }
    assert_eq!(ooms, 1);
    // The events are the recorded trace.
    let recorded: Vec<(Action, u64, u64)> = s.traces[0]
        .entries
        .iter()
        .map(|e| {
            (
                e.action,
                if e.action == Action::Oom { 0 } else { e.addr },
                e.size,
            )
        })
        .collect();
    let simulated: Vec<(Action, u64, u64)> = a
        .sink()
        .iter()
        .map(|e| {
            (
                e.action,
                if e.action == Action::Oom { 0 } else { e.addr },
                e.size,
            )
        })
        .collect();
    assert_eq!(simulated.len(), recorded.len());
    assert!(
        simulated == recorded,
        "emitted events differ from the trace"
    );
    // Every statistic memory_stats() reported at the end.
    let ours = a.stats().to_memory_stats(a.config().max_split_size);
    let theirs = t["final_stats"].as_object().unwrap();
    let mut compared = 0;
    for (k, v) in theirs {
        let Some(o) = ours.get(k) else { continue };
        assert_eq!(*o, v.as_i64().unwrap(), "final memory_stats[{k}]");
        compared += 1;
    }
    assert!(compared >= 120, "{compared} stats compared");
}

#[test]
fn workload_default_op_by_op() {
    drive_workload(
        "workload_default.pickle.gz",
        "workload_default_truth.json.gz",
    );
}

#[test]
fn workload_expandable_op_by_op() {
    drive_workload(
        "workload_expandable.pickle.gz",
        "workload_expandable_truth.json.gz",
    );
}

/// The replay of the workload snapshots: identical trace, OOM at the recorded op, and the
/// allocated/reserved timeline equal to the per-op truth at every alloc and free.
fn replay_workload(pickle: &str, truth_file: &str, check_all_stats: bool) {
    let s = snapshot(&data(pickle));
    let t = json(&data(truth_file));
    let total = t["total"].as_u64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let cap = allowed(t["limit"].as_u64().unwrap() as f64, total);
    let r = replay(
        &s,
        &ReplayOptions {
            capacity: Some(cap),
            device_total: total,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        r.trace_identical,
        Some(true),
        "{pickle}: {:?}",
        r.first_divergence
    );
    assert_eq!(r.segment_events_identical, Some(true));
    assert!(r.oom);
    let entries = &s.traces[0].entries;
    assert_eq!(r.oom_event_index, Some(entries.len() - 1));
    assert_eq!(entries[entries.len() - 1].action, Action::Oom);
    // The script called empty_cache() 8 times; the trace shows those that released something.
    let steps = t["steps"].as_array().unwrap();
    let visible = (1..steps.len())
        .filter(|&i| {
            steps[i][0] == "empty_cache" && steps[i][5].as_u64() < steps[i - 1][5].as_u64()
        })
        .count();
    assert_eq!(
        r.empty_cache_calls, visible,
        "{pickle}: empty_cache() calls"
    );
    let allocs: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].action == Action::Alloc)
        .collect();
    let frees: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].action == Action::FreeRequested)
        .collect();
    let (mut ai, mut fi) = (0, 0);
    for st in t["steps"].as_array().unwrap() {
        let st = st.as_array().unwrap();
        let idx = match st[0].as_str().unwrap() {
            "alloc" => {
                ai += 1;
                allocs[ai - 1]
            }
            "free" => {
                fi += 1;
                frees[fi - 1]
            }
            _ => continue,
        };
        assert_eq!(
            r.timeline.at(idx),
            (st[4].as_u64().unwrap(), st[5].as_u64().unwrap()),
            "entry {idx}"
        );
    }
    assert_eq!(ai, allocs.len());
    let fs = &t["final_stats"];
    assert_eq!(
        r.peak_allocated_bytes,
        fs["allocated_bytes.all.peak"].as_u64().unwrap()
    );
    assert_eq!(
        r.peak_reserved_bytes,
        fs["reserved_bytes.all.peak"].as_u64().unwrap()
    );
    assert_eq!(
        r.stats.num_alloc_retries,
        fs["num_alloc_retries"].as_u64().unwrap()
    );
    if check_all_stats {
        let mut ours = r.stats.to_memory_stats(r.config.max_split_size);
        // An empty_cache() that released nothing leaves no trace entry, but it still counts a
        // full synchronization.
        let called = steps.iter().filter(|st| st[0] == "empty_cache").count();
        if let Some(n) = ours.get_mut("num_sync_all_streams") {
            *n += i64::try_from(called - visible).unwrap();
        }
        let mut compared = 0;
        for (k, v) in fs.as_object().unwrap() {
            let Some(o) = ours.get(k) else { continue };
            assert_eq!(*o, v.as_i64().unwrap(), "{pickle}: final memory_stats[{k}]");
            compared += 1;
        }
        assert!(compared >= 120, "{compared} stats compared");
    }
}

#[test]
fn workload_default_replay() {
    // Accumulated counters include an allocation made before recording (see
    // `drive_workload`); the op-by-op test checks every stat.
    replay_workload(
        "workload_default.pickle.gz",
        "workload_default_truth.json.gz",
        false,
    );
}

#[test]
fn workload_expandable_replay() {
    replay_workload(
        "workload_expandable.pickle.gz",
        "workload_expandable_truth.json.gz",
        false,
    );
}

/// Workloads recorded for this replay on an H200 with torch 2.11.0+cu130 by
/// `tests/data/replay/record_workloads.py` (random ops on two streams, `empty_cache()` every 90
/// ops, a 3 or 5 GiB fraction limit, until an OOM), each with allocator settings the corpus
/// workloads do not exercise this way: garbage collection, `max_split_size_mb` (oversize blocks,
/// `release_available_cached_blocks`), `roundup_power2_divisions` with
/// `max_non_split_rounding_mb`, `large_segment_size_mb`, `record_stream` (frees completed later),
/// and expandable segments combined with each.
const RECORDED_WORKLOADS: [&str; 10] = [
    "gc05",
    "maxsplit64",
    "roundup",
    "lseg12",
    "recstream",
    "exp_recstream",
    "exp_lseg12",
    "exp_maxsplit64",
    "exp_gc05",
    "maxsplit_gc_recstream",
];

#[test]
fn recorded_workloads_replay_exactly() {
    for name in RECORDED_WORKLOADS {
        replay_workload(
            &format!("wl_{name}.pickle.gz"),
            &format!("wl_{name}_truth.json.gz"),
            true,
        );
    }
}

// ------------------------------------------------------------------------------------------------
// corpus snapshots in the repository
// ------------------------------------------------------------------------------------------------

#[test]
fn corpus_snapshots_replay_exactly() {
    let runs = truth(&data("truth_subset.json"));
    let mut checked = 0;
    let mut failures = Vec::new();
    for run in &runs {
        let Some(file) = &run.snapshot else { continue };
        if !data(file).exists() {
            continue;
        }
        let s = snapshot(&data(file));
        let (r, bad) = check_recorded(&s, run);
        eprintln!(
            "{:45} entries {:6} peak alloc {:>12} reserved {:>12} oom {:5} {}",
            run.id,
            r.entries_total,
            r.peak_allocated_bytes,
            r.peak_reserved_bytes,
            r.oom,
            if bad.is_empty() { "ok" } else { "DIFFERS" }
        );
        if !bad.is_empty() {
            failures.push(format!("{}: {}", run.id, bad.join("; ")));
        }
        checked += 1;
    }
    assert!(checked >= 12, "{checked} snapshots checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn what_if_remedies_match_pytorch_oom_outcome() {
    let runs = truth(&data("truth_subset.json"));
    let mut checked = 0;
    let mut failures = Vec::new();
    for workload in ["gpt", "hf_gpt2", "resnet50"] {
        let s = snapshot(&data(&format!("{workload}__baseline__full.pickle.gz")));
        for run in runs.iter().filter(|r| {
            r.workload == workload
                && is_capped(&r.id)
                && WHAT_IF_REMEDIES.contains(&r.remedy.as_str())
        }) {
            checked += 1;
            if let Err(e) = check_what_if(&s, run) {
                failures.push(e);
            }
        }
    }
    eprintln!("what-if runs checked: {checked}, wrong: {}", failures.len());
    assert!(checked >= 40, "{checked} what-if runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ------------------------------------------------------------------------------------------------
// the whole corpus (when ../shared is present)
// ------------------------------------------------------------------------------------------------

#[test]
fn shared_corpus_sweep() {
    let Some(root) = shared() else {
        eprintln!("skipped: ../shared/corpus not found; the full corpus sweep did not run");
        return;
    };
    let runs = truth(&root.join("truth.json"));
    let mut failures = Vec::new();
    let mut checked = 0;
    for run in &runs {
        let Some(file) = &run.snapshot else { continue };
        if !(run.id.ends_with("__full") || run.id.contains("__tight") || run.id.contains("__cap")) {
            continue;
        }
        let s = snapshot(&root.join("snapshots").join(file));
        let (r, bad) = check_recorded(&s, run);
        eprintln!(
            "{:45} entries {:6} peak alloc {:>12} reserved {:>12} oom {:5} {}",
            run.id,
            r.entries_total,
            r.peak_allocated_bytes,
            r.peak_reserved_bytes,
            r.oom,
            if bad.is_empty() {
                "ok".to_string()
            } else {
                bad.join("; ")
            }
        );
        if !bad.is_empty() {
            failures.push(format!("{}: {}", run.id, bad.join("; ")));
        }
        checked += 1;
    }
    let large = root.join("large/gpt__baseline__long400.pickle.gz");
    if let Some(run) = runs.iter().find(|r| r.id == "gpt__baseline__long400") {
        let s = snapshot(&large);
        let (r, bad) = check_recorded(&s, run);
        eprintln!(
            "{:45} entries {:6} peak alloc {:>12} reserved {:>12} oom {:5} {}",
            run.id,
            r.entries_total,
            r.peak_allocated_bytes,
            r.peak_reserved_bytes,
            r.oom,
            if bad.is_empty() {
                "ok".to_string()
            } else {
                bad.join("; ")
            }
        );
        if !bad.is_empty() {
            failures.push(format!("{}: {}", run.id, bad.join("; ")));
        }
        checked += 1;
    }
    eprintln!(
        "corpus snapshots checked: {checked}, differing: {}",
        failures.len()
    );

    // The synthetic address model (no oracle), measured: OOM outcomes must stay PyTorch's.
    let (mut n, mut alloc_exact, mut reserved_exact) = (0, 0, 0);
    for run in &runs {
        let Some(file) = &run.snapshot else { continue };
        if run.id.contains("long400") {
            continue;
        }
        let s = snapshot(&root.join("snapshots").join(file));
        let r = replay(
            &s,
            &ReplayOptions {
                capacity: Some(allowed(run.cap, run.total)),
                device_total: run.total,
                use_oracle: false,
                ..ReplayOptions::default()
            },
        )
        .unwrap();
        n += 1;
        alloc_exact += usize::from(r.peak_allocated_bytes == run.peak_allocated);
        reserved_exact += usize::from(r.peak_reserved_bytes == run.peak_reserved);
        if r.oom != run.oom {
            failures.push(format!(
                "{} without the address oracle: oom {}",
                run.id, r.oom
            ));
        }
    }
    eprintln!(
        "synthetic addresses: {n} snapshots, peak allocated exact {alloc_exact}, peak reserved exact {reserved_exact}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ------------------------------------------------------------------------------------------------
// traces that start mid-run, refusals, divergences
// ------------------------------------------------------------------------------------------------

/// The trace without its first `cut` entries: what a wrapped ring buffer leaves.
fn cut(s: &Snapshot, cut: usize) -> Snapshot {
    let mut c = s.clone();
    c.traces[0].entries.drain(..cut);
    c
}

#[test]
fn mid_run_trace_is_seeded_from_the_rebuilt_state() {
    let run = truth(&data("truth_subset.json"))
        .into_iter()
        .find(|r| r.id == "gpt__baseline__full")
        .unwrap();
    let full = snapshot(&data("gpt__baseline__full.pickle.gz"));
    let opts = ReplayOptions {
        capacity: Some(allowed(run.cap, run.total)),
        device_total: run.total,
        ..ReplayOptions::default()
    };
    for k in [500, 2000, 4000] {
        let s = cut(&full, k);
        let r = replay(&s, &opts).unwrap();
        eprintln!(
            "cut {k}: seeded {} segments {} blocks ({} estimated), peak reserved {} (full run {}), trace identical {:?}, {:?}",
            r.initial.seeded_segments,
            r.initial.seeded_blocks,
            r.initial.estimated_sizes,
            r.peak_reserved_bytes,
            run.peak_reserved,
            r.trace_identical,
            r.first_divergence.as_ref().map(|d| &d.what)
        );
        assert!(r.initial.starts_mid_run);
        assert!(r.initial.seeded_segments > 0);
        assert_eq!(r.entries_replayed, s.traces[0].entries.len());
        // Every segment event after the cut is the recorded one.
        assert_eq!(r.segment_events_identical, Some(true), "cut {k}");
        assert_eq!(r.peak_reserved_bytes, run.peak_reserved, "cut {k}");
    }
}

#[test]
fn mid_run_trace_with_expandable_segments_is_refused() {
    let s = cut(
        &snapshot(&data("gpt__expandable_segments__full.pickle.gz")),
        2000,
    );
    let e = replay(&s, &ReplayOptions::default()).unwrap_err();
    assert!(
        matches!(e, ReplayError::MidRunExpandable { device: 0 }),
        "{e}"
    );
    assert!(e.to_string().contains("expandable"));
}

#[test]
fn refusals() {
    let s = snapshot(&data("gpt__baseline__cap10.pickle.gz"));
    let e = replay(
        &s,
        &ReplayOptions {
            device: 3,
            ..ReplayOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        ReplayError::NoSuchDevice {
            device: 3,
            available: vec![0]
        }
    );
    let e = replay(
        &s,
        &ReplayOptions {
            config: Some(AllocatorConfig::parse("backend:cudaMallocAsync").unwrap()),
            ..ReplayOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(e, ReplayError::UnsupportedBackend);
}

/// A recorded OOM the replay does not hit (here: the cap left out) is a divergence, reported.
#[test]
fn missed_recorded_oom_is_a_divergence() {
    let s = snapshot(&data("gpt__baseline__cap10.pickle.gz"));
    let r = replay(&s, &ReplayOptions::default()).unwrap();
    assert!(!r.oom);
    assert_eq!(r.trace_identical, Some(false));
    let d = r.first_divergence.unwrap();
    assert!(
        matches!(d.kind, DivergenceKind::MissedOom | DivergenceKind::Event),
        "{d:?}"
    );
    assert!(
        r.notes.iter().any(|n| n.contains("recorded OOM")),
        "{:?}",
        r.notes
    );
    // With a lower cap than recorded the replay runs out of memory earlier, at an `alloc`.
    let run = truth(&data("truth_subset.json"))
        .into_iter()
        .find(|r| r.id == "gpt__baseline__cap10")
        .unwrap();
    let r = replay(
        &s,
        &ReplayOptions {
            capacity: Some(allowed(run.cap, run.total) / 2),
            device_total: run.total,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    assert!(r.oom);
    let at = r.oom_event_index.unwrap();
    assert_eq!(s.traces[0].entries[at].action, Action::Alloc);
    assert_eq!(r.entries_replayed, at + 1);
    assert_eq!(
        r.first_divergence.map(|d| d.kind),
        Some(DivergenceKind::UnexpectedOom)
    );
}

/// One trace through every option that must not change the answer (in the spirit of ripgrep's
/// `SearcherTester`): keeping events or not, keeping the timeline or not.
#[test]
fn output_options_do_not_change_the_answer() {
    let s = snapshot(&data("resnet50__baseline__tight10.92.pickle.gz"));
    let run = truth(&data("truth_subset.json"))
        .into_iter()
        .find(|r| r.id == "resnet50__baseline__tight10.92")
        .unwrap();
    let mut answers = Vec::new();
    for (events, timeline) in [(true, true), (false, true), (true, false), (false, false)] {
        let r = replay(
            &s,
            &ReplayOptions {
                capacity: Some(allowed(run.cap, run.total)),
                device_total: run.total,
                record_events: events,
                record_timeline: timeline,
                ..ReplayOptions::default()
            },
        )
        .unwrap();
        assert_eq!(r.events.is_empty(), !events);
        assert_eq!(r.timeline.allocated.is_empty(), !timeline);
        answers.push((
            r.oom,
            r.peak_allocated_bytes,
            r.peak_reserved_bytes,
            r.trace_identical,
            r.segment_events_identical,
            r.empty_cache_calls,
            r.stats.clone(),
            r.final_segments.clone(),
        ));
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
}

/// The emitted events, tagged with their trace entry, are the recorded trace.
#[test]
fn events_are_the_recorded_trace() {
    let s = snapshot(&data("hf_gpt2__baseline__tight14.41.pickle.gz"));
    let run = truth(&data("truth_subset.json"))
        .into_iter()
        .find(|r| r.id == "hf_gpt2__baseline__tight14.41")
        .unwrap();
    let r = replay(
        &s,
        &ReplayOptions {
            capacity: Some(allowed(run.cap, run.total)),
            device_total: run.total,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    // The replay stops at the OOM (PyTorch raised there); the frees the exception's unwinding
    // made before the dump come after it in the recording.
    let stop = r.oom_event_index.unwrap();
    assert!(stop + 1 < s.traces[0].entries.len());
    let recorded: Vec<_> = s.traces[0].entries[..=stop]
        .iter()
        .map(|e| {
            (
                e.action,
                if e.action == Action::Oom { 0 } else { e.addr },
                e.size,
                e.stream,
            )
        })
        .collect();
    let simulated: Vec<_> = r
        .events
        .iter()
        .map(|e| {
            (
                e.action,
                if e.action == Action::Oom { 0 } else { e.addr },
                e.size,
                e.stream,
            )
        })
        .collect();
    assert_eq!(simulated, recorded);
    // Each event is tagged with the entry being replayed: the malloc's `alloc` entry for the
    // segment events recorded before it, the `free_requested` entry for the `free_completed`
    // recorded right after it.
    for (k, e) in r.events.iter().enumerate() {
        assert!(e.at as usize + 1 >= k, "event {k} at entry {}", e.at);
    }
}

/// With a complete trace the replay's final segments are the dump's, block by block.
#[test]
fn final_state_is_the_dump() {
    let s = snapshot(&data("gpt__max_split_128__full.pickle.gz"));
    let r = replay(&s, &ReplayOptions::default()).unwrap();
    assert_eq!(r.final_segments.len(), s.segments.len());
    for (a, b) in r.final_segments.iter().zip(&s.segments) {
        assert_eq!(
            (
                a.address,
                a.total_size,
                a.allocated_size,
                a.active_size,
                a.stream
            ),
            (
                b.address,
                b.total_size,
                b.allocated_size,
                b.active_size,
                b.stream
            )
        );
        let ours: Vec<_> = a
            .blocks
            .iter()
            .map(|x| (x.address, x.size, x.state))
            .collect();
        let theirs: Vec<_> = b
            .blocks
            .iter()
            .map(|x| (x.address, x.size, x.state))
            .collect();
        assert_eq!(ours, theirs, "segment 0x{:x}", a.address);
    }
}

/// Without the address oracle the simulated device makes up addresses (descending, see
/// `SimDevice`): a model. On the in-repo snapshots its OOM outcome and peaks must still be
/// PyTorch's; the sweep below measures it on the whole corpus.
#[test]
fn synthetic_addresses_keep_the_outcome() {
    let runs = truth(&data("truth_subset.json"));
    for run in &runs {
        let Some(file) = &run.snapshot else { continue };
        if !data(file).exists() {
            continue;
        }
        let s = snapshot(&data(file));
        let r = replay(
            &s,
            &ReplayOptions {
                capacity: Some(allowed(run.cap, run.total)),
                device_total: run.total,
                use_oracle: false,
                ..ReplayOptions::default()
            },
        )
        .unwrap();
        assert!(!r.address_oracle.used);
        assert_eq!(r.oom, run.oom, "{}", run.id);
        assert_eq!(r.peak_reserved_bytes, run.peak_reserved, "{}", run.id);
    }
}

/// The result serializes (the CLI and the server hand it on as JSON).
#[test]
fn replay_serializes_to_json() {
    let s = snapshot(&data("gpt__baseline__cap10.pickle.gz"));
    let r = replay(
        &s,
        &ReplayOptions {
            capacity: Some(10 << 30),
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let v: Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    for key in [
        "oom",
        "oom_event_index",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "segment_events_identical",
        "trace_identical",
        "first_divergence",
        "config",
        "events",
        "timeline",
        "final_segments",
        "stats",
        "initial",
        "address_oracle",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    assert_eq!(v["oom"], true);
    assert_eq!(v["events"][0]["action"], "segment_alloc");
    assert_eq!(v["config"]["expandable_segments"], false);
}
