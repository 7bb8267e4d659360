//! The snapshot writer (`write_snapshot`): every snapshot of `tests/data` read → written → read
//! gives the same model; CPython loads what we write, `pickletools.dis` accepts it, the object it
//! loads pickles back (`pickle.dumps(obj, protocol=4)`) to exactly our bytes and equals the object
//! loaded from the original file where the model is lossless; edge values (ints past 63 bits,
//! non-ASCII and 64 KiB+ strings, batch boundaries, empty traces) survive; errors come before
//! any byte; the output goes out in frame-sized writes. The last test measures the write speed on
//! the large corpus trace when `/work/shared/corpus` is present.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use oomlens_engine::snapshot::{
    Action, AllocatorSettings, Annotation, AnnotationStage, Block, BlockState, DeviceTrace,
    EncodeError, Frame, PoolKind, ReadOptions, Segment, Snapshot, StackId, Stacks, Sym, TraceEntry,
    WriteOptions, read_snapshot_bytes, write_snapshot, write_snapshot_bytes,
};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Every snapshot-like file of `tests/data/{snapshots,corpus,corpus/variants,analysis}`.
fn snapshot_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["snapshots", "corpus", "corpus/variants", "analysis"] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(data_dir().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                [".pickle", ".pickle.gz", ".json", ".json.gz"]
                    .iter()
                    .any(|ext| name.ends_with(ext))
            })
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

fn name(p: &Path) -> String {
    p.strip_prefix(data_dir())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

fn read(bytes: &[u8], what: &str) -> Snapshot {
    read_snapshot_bytes(bytes, &ReadOptions::default())
        .unwrap_or_else(|e| panic!("{what}: our reader refuses it: {e}"))
}

fn write(s: &Snapshot, opts: &WriteOptions) -> Vec<u8> {
    write_snapshot_bytes(s, opts).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Model comparison: by content (strings and stacks resolved), not by interned ids, which depend
// on the order the reader met the strings.

fn frames_of(s: &Snapshot, id: StackId) -> Vec<(&str, &str, u32)> {
    s.stacks
        .frames(id)
        .iter()
        .map(|f| (s.stacks.str(f.name), s.stacks.str(f.filename), f.line))
        .collect()
}

fn same_stack(a: &Snapshot, x: StackId, b: &Snapshot, y: StackId) -> bool {
    let (fa, fb) = (a.stacks.frames(x), b.stacks.frames(y));
    fa.len() == fb.len()
        && fa.iter().zip(fb).all(|(f, g)| {
            f.line == g.line
                && a.stacks.str(f.name) == b.stacks.str(g.name)
                && a.stacks.str(f.filename) == b.stacks.str(g.filename)
        })
}

fn same_segment(a: &Snapshot, s: &Segment, b: &Snapshot, t: &Segment) -> Result<(), String> {
    let head = |s: &Segment| {
        (
            s.device,
            s.address,
            s.total_size,
            s.allocated_size,
            s.active_size,
            s.requested_size,
            s.stream,
            s.segment_type,
            s.segment_pool_id,
            s.is_expandable,
            s.blocks.len(),
        )
    };
    if head(s) != head(t) {
        return Err(format!("{:?}\n  vs {:?}", head(s), head(t)));
    }
    if !same_stack(a, s.frames, b, t.frames) {
        return Err(format!(
            "frames {:?}\n  vs {:?}",
            frames_of(a, s.frames),
            frames_of(b, t.frames)
        ));
    }
    for (i, (x, y)) in s.blocks.iter().zip(&t.blocks).enumerate() {
        let head = |x: &Block| (x.address, x.size, x.requested_size, x.state);
        if head(x) != head(y) || !same_stack(a, x.frames, b, y.frames) {
            return Err(format!(
                "blocks[{i}]: {:?} {:?}\n  vs {:?} {:?}",
                head(x),
                frames_of(a, x.frames),
                head(y),
                frames_of(b, y.frames)
            ));
        }
    }
    Ok(())
}

fn same_entry(a: &Snapshot, e: &TraceEntry, b: &Snapshot, f: &TraceEntry) -> bool {
    (e.action, e.addr, e.size, e.stream, e.time_us)
        == (f.action, f.addr, f.size, f.stream, f.time_us)
        && a.stacks.str(e.compile_context) == b.stacks.str(f.compile_context)
        && a.stacks.str(e.user_metadata) == b.stacks.str(f.user_metadata)
        && same_stack(a, e.frames, b, f.frames)
}

/// Traces compared device by device; with `pad_empty`, a device missing on one side counts as an
/// empty trace (the writer fills gaps in the device ordinals with empty lists).
fn compare(a: &Snapshot, b: &Snapshot, pad_empty: bool) -> Result<(), String> {
    if a.segments.len() != b.segments.len() {
        return Err(format!(
            "segments: {} vs {}",
            a.segments.len(),
            b.segments.len()
        ));
    }
    for (i, (s, t)) in a.segments.iter().zip(&b.segments).enumerate() {
        same_segment(a, s, b, t).map_err(|e| format!("segments[{i}]: {e}"))?;
    }
    let devices = a.traces.len().max(b.traces.len());
    if !pad_empty && a.traces.len() != b.traces.len() {
        return Err(format!("traces: {} vs {}", a.traces.len(), b.traces.len()));
    }
    fn trace(s: &Snapshot, d: usize) -> &[TraceEntry] {
        s.traces
            .iter()
            .find(|t| t.device as usize == d)
            .map_or(&[], |t| &t.entries)
    }
    for d in 0..devices {
        if !pad_empty && a.traces[d].device != b.traces[d].device {
            return Err(format!("traces[{d}].device"));
        }
        let (x, y) = (trace(a, d), trace(b, d));
        if x.len() != y.len() {
            return Err(format!("device {d}: {} vs {} entries", x.len(), y.len()));
        }
        for (i, (e, f)) in x.iter().zip(y).enumerate() {
            if !same_entry(a, e, b, f) {
                return Err(format!(
                    "device {d} entry {i}: {e:?} {:?}\n  vs {f:?} {:?}",
                    frames_of(a, e.frames),
                    frames_of(b, f.frames)
                ));
            }
        }
    }
    if a.allocator_settings != b.allocator_settings {
        return Err(format!(
            "allocator_settings: {:?}\n  vs {:?}",
            a.allocator_settings, b.allocator_settings
        ));
    }
    if a.external_annotations != b.external_annotations {
        return Err(format!(
            "external_annotations: {:?}\n  vs {:?}",
            a.external_annotations, b.external_annotations
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// CPython.

fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import pickle, pickletools"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some("python3")
}

/// For each (ours, original, how): loads ours with CPython (plain or gzip), runs
/// `pickletools.dis` over it, checks its opcodes are within MemoryViz's unpickler's set and the
/// header is protocol 4, checks `pickle.dumps(obj, protocol=4)` gives back exactly our bytes,
/// and compares with the original object when `how` is `pickle` (==) or `json` (== after a JSON
/// round trip of ours: tuples become lists).
const PY_CHECK: &str = r#"
import gzip, io, json, pickle, pickletools, sys
VIEWER = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "SETITEM",
          "SETITEMS", "APPEND", "APPENDS", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
          "LONG_BINGET", "BININT", "BININT1", "BININT2", "LONG1", "SHORT_BINUNICODE", "BINUNICODE",
          "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "TUPLE1", "TUPLE2", "TUPLE3", "TUPLE", "LIST",
          "DICT"}
def raw(p):
    with open(p, "rb") as f:
        d = f.read()
    return gzip.decompress(d) if d[:2] == b"\x1f\x8b" else d
args = sys.argv[1:]
n = 0
for ours, orig, how in zip(args[0::3], args[1::3], args[2::3]):
    b = raw(ours)
    assert b[:2] == b"\x80\x04", (ours, b[:2])
    obj = pickle.loads(b)
    pickletools.dis(b, out=io.StringIO())
    ops = {op.name for op, _, _ in pickletools.genops(b)}
    assert ops <= VIEWER, (ours, sorted(ops - VIEWER))
    again = pickle.dumps(obj, protocol=4)
    if again != b:
        i = next((i for i, (x, y) in enumerate(zip(again, b)) if x != y), min(len(again), len(b)))
        raise AssertionError(f"{orig}: CPython re-pickles our {len(b)} bytes to {len(again)} bytes, first difference at byte {i}")
    if how == "pickle":
        assert pickle.loads(raw(orig)) == obj, f"{orig}: CPython's object differs from the original's"
    elif how == "json":
        assert json.loads(json.dumps(obj)) == json.loads(raw(orig)), f"{orig}: differs from the JSON original"
    n += 1
print(f"checked {n}")
"#;

fn run_python(py: &str, triples: &[(PathBuf, PathBuf, &str)]) {
    let mut cmd = Command::new(py);
    cmd.arg("-c").arg(PY_CHECK);
    for (ours, orig, how) in triples {
        cmd.arg(ours).arg(orig).arg(how);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "python3 check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oomlens-encode-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------------
// Round trips of the test data.

/// Files the reader refuses, so there is nothing to write: protocol 0 (text strings) and a JSON
/// file that is a truth table, not a snapshot.
fn refused_on_purpose(name: &str) -> bool {
    name.contains(".p0.pickle") || name.ends_with("_truth.json")
}

#[test]
fn every_test_snapshot_round_trips() {
    let mut done = 0;
    for path in snapshot_files() {
        let what = name(&path);
        let bytes = std::fs::read(&path).unwrap();
        let original = match read_snapshot_bytes(&bytes, &ReadOptions::default()) {
            Ok(s) => s,
            Err(e) => {
                assert!(refused_on_purpose(&what), "{what}: {e}");
                continue;
            }
        };
        for opts in [
            WriteOptions::default(),
            WriteOptions {
                gzip: Some(6),
                pytorch_defaults: false,
            },
        ] {
            let written = write(&original, &opts);
            assert_eq!(written[..2] == [0x1f, 0x8b], opts.gzip.is_some(), "{what}");
            let again = read(&written, &what);
            if let Err(e) = compare(&original, &again, false) {
                panic!("{what} ({opts:?}): read → write → read differs: {e}");
            }
            assert_eq!(again.source.protocol, Some(4), "{what}");
            assert!(again.unknown_keys.is_empty(), "{what}");
            // Writing what was read back gives the same bytes: the encoding is a function of
            // the model.
            assert_eq!(
                write(&again, &opts),
                written,
                "{what}: second write differs"
            );
        }
        done += 1;
    }
    eprintln!("round-tripped {done} snapshot files");
    assert!(done >= 40, "only {done} files found");
}

#[test]
fn cpython_loads_and_re_pickles_our_bytes_and_sees_the_original() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 (with pickle) is not available");
        return;
    };
    let dir = scratch_dir("cpython");
    let mut triples = Vec::new();
    for path in snapshot_files() {
        let what = name(&path);
        let bytes = std::fs::read(&path).unwrap();
        let Ok(original) = read_snapshot_bytes(&bytes, &ReadOptions::default()) else {
            continue;
        };
        // Where the model holds everything the file holds, CPython must see equal objects.
        let how = if what.contains("legacy_list_root") || what.contains("pytorch20_history") {
            "none" // Old layouts: written in today's layout on purpose.
        } else if what.contains(".json") {
            "json"
        } else {
            "pickle"
        };
        // A file generate.py made without the keys PyTorch 2.11 always writes: written without
        // them too.
        let opts = WriteOptions {
            pytorch_defaults: !what.contains("long1_u64max"),
            ..WriteOptions::default()
        };
        let out = dir.join(what.replace('/', "__") + ".out.pickle");
        std::fs::write(&out, write(&original, &opts)).unwrap();
        triples.push((out, path, how));
    }
    assert!(triples.len() >= 40);
    run_python(py, &triples);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Edge values.

fn frame(stacks: &mut Stacks, name: &str, file: &str, line: u32) -> Frame {
    Frame {
        name: stacks.intern(name),
        filename: stacks.intern(file),
        line,
    }
}

fn entry(action: Action, addr: u64, size: u64, frames: StackId) -> TraceEntry {
    TraceEntry {
        action,
        addr,
        size,
        stream: 0,
        time_us: Some(1_796_208_766_163_742),
        frames,
        compile_context: Sym::EMPTY,
        user_metadata: Sym::EMPTY,
    }
}

/// A snapshot with what real dumps rarely have: ints of 64 bits and more, negative streams and
/// times, non-ASCII, one-character and 64 KiB+ strings, stacks of 1 and 2,500 frames, recursion,
/// lists and a dict at CPython's batch boundaries, all actions and states, a gap in the devices.
fn hostile() -> Snapshot {
    let mut stacks = Stacks::new();
    let long = "λ".repeat(40_000); // 80,000 bytes: written outside any frame
    let f_main = frame(&mut stacks, "<module>", "/home/ü/train.py", 12);
    let f_cjk = frame(&mut stacks, "関数_🦀", "モデル.py", u32::MAX);
    let f_one = frame(&mut stacks, "é", "x", 0);
    let f_empty = frame(&mut stacks, "", "", 1);
    let f_long = frame(&mut stacks, &long, &"n".repeat(256), 7);
    let f_255 = frame(&mut stacks, &"a".repeat(255), "\0nul\u{7f}", 3);
    let one = stacks.intern_stack_slice(&[f_main]);
    let mixed = stacks.intern_stack_slice(&[f_cjk, f_one, f_empty, f_long, f_255, f_cjk]);
    let deep: Vec<Frame> = (0..2_500)
        .map(|i| frame(&mut stacks, &format!("recurse{}", i % 7), "r.py", i))
        .collect();
    let deep = stacks.intern_stack_slice(&deep);
    let na = stacks.intern("N/A");
    let meta = stacks.intern("{\"step\": 3, \"note\": \"ß\"}");
    let one_char = stacks.intern("1"); // also a roundup key: one object for both

    let mut e0 = Vec::new();
    let actions = [
        Action::SegmentAlloc,
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::UserDefined,
        Action::Unknown,
    ];
    for i in 0..2_001u64 {
        let mut e = entry(
            actions[i as usize % actions.len()],
            0x7f00_0000_0000 + i * 512,
            i * 1_000_003,
            [StackId::EMPTY, one, mixed, deep][i as usize % 4],
        );
        e.stream = [0, 574_705_552, u64::MAX, 1 << 63, (1 << 63) - 1][i as usize % 5];
        e.time_us = [Some(-1), None, Some(i64::MIN), Some(i64::MAX), Some(0)][i as usize % 5];
        if i.is_multiple_of(3) {
            e.compile_context = na;
        }
        if i.is_multiple_of(5) {
            e.user_metadata = if i.is_multiple_of(10) { meta } else { one_char };
        }
        if i == 7 {
            e.addr = u64::MAX; // an oom's device_free or an address of 2^64-1: 9-byte LONG1
        }
        e0.push(e);
    }
    let e2 = vec![entry(Action::Alloc, u64::MAX - (1 << 21), u64::MAX, deep)];

    let block = |address, size, state, frames| Block {
        address,
        size,
        requested_size: size.saturating_sub(3),
        state,
        frames,
    };
    let base = u64::MAX - (3 << 21) + 1;
    let segments = vec![
        Segment {
            device: 0,
            address: base,
            total_size: 1 << 21,
            allocated_size: 1 << 20,
            active_size: 3 << 19,
            requested_size: (1 << 20) - 3,
            stream: u64::MAX,
            segment_type: PoolKind::Small,
            segment_pool_id: (i64::MIN, i64::MAX),
            is_expandable: false,
            frames: mixed,
            blocks: vec![
                block(base, 1 << 20, BlockState::ActiveAllocated, one),
                block(
                    base + (1 << 20),
                    1 << 19,
                    BlockState::ActivePendingFree,
                    deep,
                ),
                block(
                    base + (3 << 19),
                    1 << 19,
                    BlockState::Inactive,
                    StackId::EMPTY,
                ),
            ],
        },
        Segment {
            device: 2,
            address: 0x3_0200_0000,
            total_size: 1000 * 512,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: true,
            frames: StackId::EMPTY,
            blocks: (0..1000)
                .map(|i| block(0x3_0200_0000 + i * 512, 512, BlockState::Inactive, one))
                .collect(),
        },
    ];
    // 4 typed keys + 995 others + roundup = exactly 1,000 items: CPython's dict batching then
    // ends with an empty `MARK SETITEMS`.
    let mut other: Vec<(String, String)> = vec![
        ("pinned_num_register_threads".into(), "1".into()),
        ("release_lock_on_cudamalloc".into(), "false".into()),
        ("graph_capture_record_stream_reuse".into(), "true".into()),
        ("none_value".into(), "None".into()),
        ("a_float".into(), "0.25".into()),
        ("a_string".into(), "Grüße, 世界".into()),
        ("huge".into(), "-9223372036854775808".into()),
        // Past i64 (the reader renders such an int as `int`, not its digits): kept as text.
        (
            "too_huge".into(),
            "340282366920938463463374607431768211455".into(),
        ),
    ];
    for i in other.len()..995 {
        other.push((format!("k{i}"), i.to_string()));
    }
    let mut roundup = [0u64; 16];
    for (i, r) in roundup.iter_mut().enumerate() {
        *r = [0, 1, 2, 4, 8, 1 << 40][i % 6];
    }
    Snapshot {
        segments,
        traces: vec![
            DeviceTrace {
                device: 0,
                entries: e0,
            },
            DeviceTrace {
                device: 2,
                entries: e2,
            },
        ],
        allocator_settings: Some(AllocatorSettings {
            alloc_conf: "expandable_segments:True,max_split_size_mb:128".into(),
            max_split_size: Some(u64::MAX - 5),
            garbage_collection_threshold: 0.6,
            expandable_segments: true,
            roundup_power2_divisions: roundup,
            other,
        }),
        external_annotations: vec![
            Annotation {
                name: "Optimizer.step#AdamW.step".into(),
                stage: AnnotationStage::Start,
                device: 0,
                time_us: Some(1_796_208_766_163_742),
            },
            Annotation {
                name: "régión ☃".into(),
                stage: AnnotationStage::End,
                device: 2,
                time_us: None,
            },
        ],
        stacks,
        ..Snapshot::default()
    }
}

#[test]
fn hostile_values_round_trip() {
    let s = hostile();
    for opts in [
        WriteOptions::default(),
        WriteOptions {
            gzip: Some(1),
            pytorch_defaults: false,
        },
    ] {
        let bytes = write(&s, &opts);
        let back = read(&bytes, "hostile");
        compare(&s, &back, true).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
        // Device 1 has no trace in the model: an empty list holds its place.
        assert_eq!(back.traces.len(), 3);
        assert!(back.traces[1].entries.is_empty());
        let e = &back.traces[0].entries;
        assert_eq!(e[7].addr, u64::MAX);
        assert_eq!(e[2].stream, u64::MAX);
        assert_eq!(e[3].stream, 1 << 63);
        assert_eq!(e[2].time_us, Some(i64::MIN));
        let deep = back.traces[2].entries[0].frames;
        assert_eq!(back.stacks.frames(deep).len(), 2_500);
        let settings = back.allocator_settings.as_ref().unwrap();
        assert_eq!(settings.max_split_size, Some(u64::MAX - 5));
        assert_eq!(settings.other.len(), 995);
    }
}

#[test]
fn cpython_reads_hostile_values_exactly() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 (with pickle) is not available");
        return;
    };
    let dir = scratch_dir("hostile");
    let out = dir.join("hostile.pickle");
    std::fs::write(&out, write(&hostile(), &WriteOptions::default())).unwrap();
    run_python(py, &[(out.clone(), out.clone(), "none")]);
    // The values CPython sees.
    let script = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
assert list(s) == ["segments", "device_traces", "allocator_settings", "external_annotations"], list(s)
t = s["device_traces"]
assert [len(x) for x in t] == [2001, 0, 1]
e = t[0]
assert e[7]["addr"] == 2**64 - 1 and e[8]["action"] == "oom" and "addr" not in e[8]
assert e[2]["stream"] == -1 and e[3]["stream"] == -2**63 and e[4]["stream"] == 2**63 - 1
assert e[2]["time_us"] == -2**63 and "time_us" not in e[1]
assert e[0]["frames"] == [] and len(e[3]["frames"]) == 2500
assert e[40]["action"] == "snapshot" and "frames" not in e[40]
assert e[0]["compile_context"] == "N/A" and e[0]["user_metadata"] == "{\"step\": 3, \"note\": \"ß\"}"
assert e[3]["compile_context"] == "N/A" and e[3]["user_metadata"] == ""
assert "compile_context" not in e[1] and "user_metadata" not in e[1]
m = e[2]["frames"]
assert m[0] is m[5] and m[0]["name"] == "関数_🦀" and m[0]["line"] == 2**32 - 1
assert m[1]["name"] == "é" and len(m[3]["name"]) == 40000 and m[4]["filename"] == "\0nul\x7f"
assert e[2]["frames"] is s["segments"][0]["frames"]
seg = s["segments"][0]
assert seg["segment_pool_id"] == (-2**63, 2**63 - 1) and seg["stream"] == -1
assert seg["address"] == 2**64 - 3 * 2**21 and seg["segment_type"] == "small"
assert [b["state"] for b in seg["blocks"]] == ["active_allocated", "active_pending_free", "inactive"]
assert s["segments"][1]["is_expandable"] is True and len(s["segments"][1]["blocks"]) == 1000
a = s["allocator_settings"]
assert len(a) == 1000 and a["max_split_size"] == 2**64 - 6
assert a["garbage_collection_threshold"] == 0.6 and a["expandable_segments"] is True
assert a["pinned_num_register_threads"] == 1 and a["release_lock_on_cudamalloc"] is False
assert a["none_value"] is None and a["a_float"] == 0.25 and a["a_string"] == "Grüße, 世界"
assert a["huge"] == -2**63 and a["too_huge"] == str(2**128 - 1)
assert a["roundup_power2_divisions"]["32768"] == 4 and a["roundup_power2_divisions"]["32"] == 1 << 40
assert s["external_annotations"][1] == {"stage": "END", "name": "régión ☃", "device": 2}
print("values ok")
"#;
    let o = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_snapshots() {
    let empty = Snapshot::default();
    let bytes = write(&empty, &WriteOptions::default());
    let back = read(&bytes, "empty");
    compare(&empty, &back, false).unwrap();
    // {"segments": [], "device_traces": [], "external_annotations": []}, one tiny frame.
    let mut expect = vec![0x80, 4, 0x95];
    expect.extend(61u64.to_le_bytes()); // what CPython writes for that dict
    expect.extend(b"}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94");
    expect.extend(b"\x8c\x14external_annotations\x94]\x94u.");
    assert_eq!(bytes, expect);

    let bare = WriteOptions {
        gzip: None,
        pytorch_defaults: false,
    };
    let bytes = write(&empty, &bare);
    assert!(!bytes.windows(8).any(|w| w == b"external"));
    read(&bytes, "bare empty");

    // Devices without entries, a segment without blocks.
    let s = Snapshot {
        traces: (0..3)
            .map(|device| DeviceTrace {
                device,
                entries: Vec::new(),
            })
            .collect(),
        segments: vec![Segment {
            device: 1,
            address: 1 << 32,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: StackId::EMPTY,
            blocks: Vec::new(),
        }],
        ..Snapshot::default()
    };
    let back = read(&write(&s, &WriteOptions::default()), "empty traces");
    compare(&s, &back, false).unwrap();
    assert_eq!(back.traces.len(), 3);
}

#[test]
fn errors_come_before_any_byte() {
    let mut s = hostile();
    s.traces.swap(0, 1);
    let mut out = Vec::new();
    let err = write_snapshot(&s, &mut out, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, EncodeError::Unrepresentable { .. }), "{err}");
    assert_eq!(
        err.to_string().split(':').next(),
        Some("traces[1].device"),
        "{err}"
    );
    assert!(out.is_empty());

    s.traces.truncate(1);
    s.traces[0].device = 1 << 20;
    let err = write_snapshot(&s, &mut out, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, EncodeError::Unrepresentable { .. }), "{err}");
    assert!(out.is_empty());

    let err = write_snapshot(
        &Snapshot::default(),
        &mut out,
        &WriteOptions {
            gzip: Some(10),
            pytorch_defaults: true,
        },
    )
    .unwrap_err();
    assert!(matches!(err, EncodeError::InvalidOption(_)), "{err}");
    assert!(out.is_empty());
}

/// A writer that fails after `left` bytes, and records the largest single write.
struct Sink {
    left: usize,
    largest: usize,
    writes: usize,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.left {
            return Err(std::io::Error::other("disk full"));
        }
        self.left -= buf.len();
        self.largest = self.largest.max(buf.len());
        self.writes += 1;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn io_errors_are_reported() {
    let mut sink = Sink {
        left: 100_000,
        largest: 0,
        writes: 0,
    };
    let err = write_snapshot(&hostile(), &mut sink, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, EncodeError::Io(_)), "{err}");
    assert_eq!(err.to_string(), "write failed: disk full");
}

#[test]
fn output_streams_in_frames() {
    let path = data_dir().join("analysis/gpt__baseline__full.pickle.gz");
    let s = read(&std::fs::read(&path).unwrap(), "gpt full");
    let mut sink = Sink {
        left: usize::MAX,
        largest: 0,
        writes: 0,
    };
    write_snapshot(&s, &mut sink, &WriteOptions::default()).unwrap();
    let total = usize::MAX - sink.left;
    assert!(
        total > 4 << 16,
        "{total} bytes: too small to need several frames"
    );
    // Frames of 64 KiB plus the last opcode that crossed the target, each written as it fills.
    assert!(
        sink.largest <= (64 << 10) + 1024,
        "largest write {}",
        sink.largest
    );
    assert!(
        sink.writes >= total / (65 << 10),
        "{} writes for {total} bytes",
        sink.writes
    );
}

// ---------------------------------------------------------------------------------------------
// Speed on the large corpus trace (numbers printed; no timing is asserted).

#[test]
fn write_speed_on_the_large_trace() {
    let path = Path::new("/work/shared/corpus/large/gpt__baseline__long400.pickle.gz");
    let Ok(gz) = std::fs::read(path) else {
        eprintln!("skipped: {} is not present", path.display());
        return;
    };
    let t = Instant::now();
    let s = read(&gz, "long400");
    let read_s = t.elapsed().as_secs_f64();
    let events: usize = s.traces.iter().map(|t| t.entries.len()).sum();

    let out_path = std::env::temp_dir().join(format!(
        "oomlens-encode-{}-long400.pickle",
        std::process::id()
    ));
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let file = std::fs::File::create(&out_path).unwrap();
        write_snapshot(&s, file, &WriteOptions::default()).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    let written = std::fs::read(&out_path).unwrap();

    let t = Instant::now();
    let gz_out = write(
        &s,
        &WriteOptions {
            gzip: Some(6),
            pytorch_defaults: true,
        },
    );
    let gz_s = t.elapsed().as_secs_f64();

    eprintln!(
        "long400: {events} events, {} segments; read {read_s:.3} s; plain write (best of 3, to {}) {best:.3} s = {:.1} M events/s, {:.0} MB/s; \
         {} bytes written vs {} unpacked bytes of the original ({:.1} %); gzip -6 write {gz_s:.3} s, {} bytes vs {} gz bytes of the original",
        s.segments.len(),
        out_path.display(),
        events as f64 / best / 1e6,
        written.len() as f64 / best / 1e6,
        written.len(),
        s.source.unpacked_bytes,
        100.0 * written.len() as f64 / s.source.unpacked_bytes as f64,
        gz_out.len(),
        gz.len(),
    );
    let back = read(&written, "long400 written");
    compare(&s, &back, false).unwrap();
    std::fs::remove_file(&out_path).unwrap();
}
