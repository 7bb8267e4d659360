//! Hostile inputs for the pickle reader and the snapshot decoder.
//!
//! Every case must fail with a clear error (its kind asserted, and the message naming the opcode, the
//! byte offset or the field), in bounded time and memory, never with a panic or a stack overflow.
//! Each case runs on a thread of its own with a 1 MiB stack (so any recursion over the input's
//! nesting would overflow it) under a wall-clock budget; the cases about memory run in a child
//! process of this test binary under `ulimit -v` and check their own peak RSS.
//!
//! The byte literals made by CPython were printed by `engine/tests/data/corpus/generate.py`.
#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oomlens_engine::pickle::{Limits, PickleError, PickleErrorKind, from_reader, from_slice};
use oomlens_engine::snapshot::{ReadError, ReadOptions, read_snapshot, read_snapshot_bytes};

/// Wall-clock budget of one case. The inputs are sized to take well under a second in a debug
/// build; the budget leaves room for a loaded machine (tests run in parallel).
const BUDGET: Duration = Duration::from_secs(5);

/// Runs `f` on a thread with a 1 MiB stack and returns its result; fails the test if `f` panics
/// or has not finished within [`BUDGET`] (the thread is then left behind, burning CPU until the
/// test binary exits: what a hang looks like).
fn bounded<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(1 << 20)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(BUDGET) {
        Ok(v) => {
            let took = start.elapsed();
            if took > Duration::from_millis(100) {
                eprintln!("{name}: {took:?}");
            }
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: still running after {BUDGET:?} (unbounded time)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{name}: panicked"),
    }
}

/// The error `from_slice` with default limits gives on `bytes` (fails the test if it succeeds).
fn pickle_err(name: &str, bytes: Vec<u8>) -> PickleError {
    pickle_err_with(name, bytes, Limits::default())
}

fn pickle_err_with(name: &str, bytes: Vec<u8>, limits: Limits) -> PickleError {
    let label = name.to_string();
    bounded(name, move || match from_slice(&bytes, limits) {
        Ok(v) => panic!("{label}: accepted, gave {}", v.type_name()),
        Err(e) => e,
    })
}

/// The error `read_snapshot_bytes` gives on `bytes` (fails the test if it succeeds).
fn snapshot_err(name: &str, bytes: Vec<u8>, opts: ReadOptions) -> ReadError {
    let label = name.to_string();
    bounded(name, move || match read_snapshot_bytes(&bytes, &opts) {
        Ok(s) => panic!(
            "{label}: accepted, {} segments, {} traces",
            s.segments.len(),
            s.traces.len()
        ),
        Err(e) => e,
    })
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn corpus(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Asserts that `err` is a refusal of `opcode` at `offset`, and that its message says both.
fn assert_refused(err: &PickleError, opcode: &str, offset: u64) {
    assert_eq!(err.kind, PickleErrorKind::Refused(leak(opcode)), "{err}");
    assert_eq!(err.offset, offset, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(opcode), "{msg}");
    assert!(msg.contains(&format!("byte {offset}")), "{msg}");
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// The pickle error inside a snapshot error (the decoder wraps it).
fn inner_pickle(err: &ReadError) -> &PickleError {
    match err {
        ReadError::Pickle(p) => p,
        other => panic!("expected a pickle error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// A tiny protocol-4 pickle writer, to build hostile inputs of any shape.

/// A Python value (or raw opcodes) to write.
enum Py {
    None,
    Int(i64),
    Str(String),
    List(Vec<Py>),
    Dict(Vec<(String, Py)>),
    Tuple(Vec<Py>),
    /// Writes the value, then `LONG_BINPUT index`.
    Put(u32, Box<Py>),
    /// `LONG_BINGET index`.
    Get(u32),
}

fn s(v: &str) -> Py {
    Py::Str(v.to_string())
}

fn d(pairs: Vec<(&str, Py)>) -> Py {
    Py::Dict(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

impl Py {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Py::None => out.push(b'N'),
            Py::Int(i) => {
                if let Ok(b) = u8::try_from(*i) {
                    out.extend([b'K', b]);
                } else if let Ok(j) = i32::try_from(*i) {
                    out.push(b'J');
                    out.extend(j.to_le_bytes());
                } else {
                    out.extend([0x8a, 8]);
                    out.extend(i.to_le_bytes());
                }
            }
            Py::Str(t) => {
                if t.len() < 256 {
                    out.extend([0x8c, t.len() as u8]);
                } else {
                    out.push(b'X');
                    out.extend((t.len() as u32).to_le_bytes());
                }
                out.extend(t.as_bytes());
            }
            Py::List(items) => {
                out.extend(b"](");
                for i in items {
                    i.write(out);
                }
                out.push(b'e');
            }
            Py::Dict(pairs) => {
                out.extend(b"}(");
                for (k, v) in pairs {
                    Py::Str(k.clone()).write(out);
                    v.write(out);
                }
                out.push(b'u');
            }
            Py::Tuple(items) => {
                out.push(b'(');
                for i in items {
                    i.write(out);
                }
                out.push(b't');
            }
            Py::Put(i, v) => {
                v.write(out);
                out.push(b'r');
                out.extend(i.to_le_bytes());
            }
            Py::Get(i) => {
                out.push(b'j');
                out.extend(i.to_le_bytes());
            }
        }
    }

    /// The whole pickle: `PROTO 4`, the value, `STOP`.
    fn pickle(&self) -> Vec<u8> {
        let mut out = vec![0x80, 4];
        self.write(&mut out);
        out.push(b'.');
        out
    }
}

fn block(size: Py) -> Py {
    d(vec![
        ("size", size),
        ("requested_size", Py::Int(0)),
        ("state", s("inactive")),
    ])
}

fn segment(address: i64, blocks: Vec<Py>) -> Py {
    d(vec![
        ("device", Py::Int(0)),
        ("address", Py::Int(address)),
        ("total_size", Py::Int(512 * blocks.len() as i64)),
        ("stream", Py::Int(0)),
        ("segment_type", s("small")),
        ("blocks", Py::List(blocks)),
    ])
}

fn entry(action: &str, addr: i64, size: Py) -> Py {
    d(vec![
        ("action", s(action)),
        ("addr", Py::Int(addr)),
        ("size", size),
        ("stream", Py::Int(0)),
    ])
}

// ---------------------------------------------------------------------------------------------
// Opcodes that import, call or build objects.

/// Every refused opcode, by byte and name.
const REFUSED: [(u8, &str); 15] = [
    (b'c', "GLOBAL"),
    (0x93, "STACK_GLOBAL"),
    (b'R', "REDUCE"),
    (b'b', "BUILD"),
    (b'i', "INST"),
    (b'o', "OBJ"),
    (0x81, "NEWOBJ"),
    (0x92, "NEWOBJ_EX"),
    (b'P', "PERSID"),
    (b'Q', "BINPERSID"),
    (0x82, "EXT1"),
    (0x83, "EXT2"),
    (0x84, "EXT4"),
    (0x97, "NEXT_BUFFER"),
    (0x98, "READONLY_BUFFER"),
];

/// Every byte that is an opcode of some protocol (pickletools.opcodes).
const KNOWN: &[u8] = b"(.012FIJKLMNPQRSTUVXabcd}eghijl]opqrst)uGBC\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98";

#[test]
fn refused_opcodes_name_themselves_and_their_offset() {
    for (op, name) in REFUSED {
        // PROTO 4, NONE, NONE, then the opcode (and arguments it would want, which are never read).
        let mut bytes = vec![0x80, 4, b'N', b'N', op];
        bytes.extend(b"os\nsystem\n");
        let err = pickle_err(name, bytes);
        assert_refused(&err, name, 4);
        assert!(err.to_string().contains("refused opcode"), "{err}");
    }
}

#[test]
fn refused_opcodes_inside_a_real_snapshot_pickle() {
    // A real dump (PyTorch 2.11, protocol 4). Splice each opcode in right after the first
    // `"free_requested"` string (SHORT_BINUNICODE + MEMOIZE at byte 5827 per pickletools): deep in
    // device_traces[0], while the trace is being streamed.
    let real = corpus("snap_small_python.pickle");
    let needle = b"\x8c\x0efree_requested\x94";
    let at = real
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len();
    assert_eq!(at, 5827 + 17);
    for (op, name) in REFUSED {
        let mut bytes = real[..at].to_vec();
        bytes.push(op);
        if op == b'c' {
            bytes.extend(b"os\nsystem\n");
        }
        bytes.extend(&real[at..]);
        let err = snapshot_err(name, bytes.clone(), ReadOptions::default());
        assert_refused(inner_pickle(&err), name, at as u64);
        assert!(
            err.to_string().starts_with("pickle: refused opcode"),
            "{err}"
        );
        // The same through gzip: the offset is in the unpacked bytes.
        let err = snapshot_err(name, gzip(&bytes), ReadOptions::default());
        assert_refused(inner_pickle(&err), name, at as u64);
        // And the generic tree reader.
        assert_refused(&pickle_err(name, bytes), name, at as u64);
    }
}

/// `pickle.dumps(Payload())` by CPython 3.11 (protocol 4), where
/// `Payload.__reduce__ = lambda self: (os.system, ("echo pwned",))`: `STACK_GLOBAL` at byte 28.
const OS_SYSTEM_P4: &str = "80049525000000000000008c05706f736978948c0673797374656d9493948c0a6563686f2070776e656494859452942e";
/// The same with protocol 0: `GLOBAL 'posix system'` at byte 0.
const OS_SYSTEM_P0: &str =
    "63706f7369780a73797374656d0a70300a28566563686f2070776e65640a70310a7470320a5270330a2e";
/// The same with protocol 2: `GLOBAL` at byte 2.
const OS_SYSTEM_P2: &str =
    "800263706f7369780a73797374656d0a7100580a0000006563686f2070776e656471018571025271032e";
/// `pickle.dumps(snap, protocol=4)` of a small snapshot dict whose last trace entry has
/// `"size": Payload()`: `STACK_GLOBAL` at byte 446 of 474 (pickletools).
const SNAPSHOT_WITH_PAYLOAD: &str = concat!(
    "800495cf010000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c0761",
    "646472657373944d00108c0a746f74616c5f73697a65944d00048c0e616c6c6f63617465645f73697a65944d",
    "00028c0b6163746976655f73697a65944d00028c0e7265717565737465645f73697a65944df4018c06737472",
    "65616d944b008c0c7365676d656e745f74797065948c05736d616c6c948c0f7365676d656e745f706f6f6c5f",
    "6964944b004b0086948c0d69735f657870616e6461626c6594898c066672616d6573945d948c06626c6f636b",
    "73945d94287d942868054d00108c0473697a65944d000268094df4018c057374617465948c10616374697665",
    "5f616c6c6f63617465649468105d94757d942868054d001268154d000268094b0068168c08696e6163746976",
    "659468105d94756575618c0d6465766963655f747261636573945d945d94287d94288c06616374696f6e948c",
    "0d7365676d656e745f616c6c6f63948c0461646472944d001068154d0004680a4b00757d942868208c05616c",
    "6c6f639468224d001068154df401680a4b00757d94286820682468224d001268158c05706f736978948c0673",
    "797374656d9493948c0a6563686f2070776e65649485945294680a4b00756561752e",
);

#[test]
fn os_system_payload_is_refused() {
    let err = pickle_err("os.system p4", hex(OS_SYSTEM_P4));
    assert_refused(&err, "STACK_GLOBAL", 28);
    let err = pickle_err("os.system p2", hex(OS_SYSTEM_P2));
    assert_refused(&err, "GLOBAL", 2);
    let err = pickle_err("os.system p0", hex(OS_SYSTEM_P0));
    assert_refused(&err, "GLOBAL", 0);
    // As a snapshot: protocol 4 and 2 are sniffed as pickles and refused; protocol 0 starting with
    // `c` is neither pickle nor JSON to the sniffer.
    let err = snapshot_err(
        "os.system p4 snap",
        hex(OS_SYSTEM_P4),
        ReadOptions::default(),
    );
    assert_refused(inner_pickle(&err), "STACK_GLOBAL", 28);
    let err = snapshot_err(
        "os.system p2 snap",
        hex(OS_SYSTEM_P2),
        ReadOptions::default(),
    );
    assert_refused(inner_pickle(&err), "GLOBAL", 2);
    let err = snapshot_err(
        "os.system p0 snap",
        hex(OS_SYSTEM_P0),
        ReadOptions::default(),
    );
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    assert!(err.to_string().contains("0x63"), "{err}");
}

#[test]
fn os_system_payload_deep_in_a_snapshot_is_refused() {
    let bytes = hex(SNAPSHOT_WITH_PAYLOAD);
    assert_eq!(bytes.len(), 474);
    assert_eq!(bytes[446], 0x93, "STACK_GLOBAL where pickletools put it");
    // While streaming device_traces[0][2], typed decoding.
    let err = snapshot_err("payload in snapshot", bytes.clone(), ReadOptions::default());
    assert_refused(inner_pickle(&err), "STACK_GLOBAL", 446);
    let err = snapshot_err(
        "payload in snapshot gz",
        gzip(&bytes),
        ReadOptions::default(),
    );
    assert_refused(inner_pickle(&err), "STACK_GLOBAL", 446);
    assert_refused(&pickle_err("payload tree", bytes), "STACK_GLOBAL", 446);
}

#[test]
fn unknown_opcodes_are_named_by_byte_and_offset() {
    let mut n = 0;
    for op in 0..=255u8 {
        if KNOWN.contains(&op) {
            continue;
        }
        n += 1;
        let err = pickle_err("unknown", vec![0x80, 4, b'N', op, b'.']);
        assert_eq!(err.kind, PickleErrorKind::UnknownOpcode(op));
        assert_eq!(err.offset, 3);
        let msg = err.to_string();
        assert!(msg.contains(&format!("unknown opcode 0x{op:02x}")), "{msg}");
        assert!(msg.contains("byte 3"), "{msg}");
    }
    assert_eq!(n, 256 - KNOWN.len());
    // Text opcodes of protocol 0 that a snapshot never holds: refused as unsupported, named.
    for (op, name) in [(b'S', "STRING"), (b'V', "UNICODE")] {
        let err = pickle_err(name, vec![0x80, 2, op, b'x', b'\n', b'.']);
        assert_eq!(err.kind, PickleErrorKind::Unsupported(leak(name)));
        assert!(err.to_string().contains(name) && err.to_string().contains("byte 2"));
    }
    let err = pickle_err("proto 6", vec![0x80, 6, b'N', b'.']);
    assert_eq!(err.kind, PickleErrorKind::Protocol(6));
}

// ---------------------------------------------------------------------------------------------
// Nesting.

const DEEP: usize = 200_000;

/// Asserts a nesting-depth error at `offset` with the default limit of 256.
fn assert_depth(err: &PickleError, offset: u64) {
    assert_eq!(
        err.kind,
        PickleErrorKind::Limit {
            what: "nesting depth",
            limit: 256
        },
        "{err}"
    );
    assert_eq!(err.offset, offset, "{err}");
    assert!(
        err.to_string()
            .contains("nesting depth exceeds the limit of 256"),
        "{err}"
    );
}

/// `]` × n then `a` × (n-1): each APPEND stores the top list in the one below. The k-th APPEND
/// (from 0) makes a list of depth k+2, so the 256th (k = 255) breaks the limit.
fn deep_lists() -> Vec<u8> {
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b']', DEEP));
    b.extend(std::iter::repeat_n(b'a', DEEP - 1));
    b.push(b'.');
    b
}

/// `(]` × n then `e` × n: APPENDS, one mark each.
fn deep_marked_lists() -> Vec<u8> {
    let mut b = vec![0x80, 4];
    for _ in 0..DEEP {
        b.extend(b"(]");
    }
    b.extend(std::iter::repeat_n(b'e', DEEP));
    b.push(b'.');
    b
}

/// `}` then (`K 1`, `}`) × n then `s` × n: SETITEM of each dict under key 1 of the one below.
fn deep_dicts() -> Vec<u8> {
    let mut b = vec![0x80, 4, b'}'];
    for _ in 0..DEEP {
        b.extend(b"K\x01}");
    }
    b.extend(std::iter::repeat_n(b's', DEEP));
    b.push(b'.');
    b
}

/// `)` then TUPLE1 × n.
fn deep_tuples() -> Vec<u8> {
    let mut b = vec![0x80, 4, b')'];
    b.extend(std::iter::repeat_n(0x85, DEEP));
    b.push(b'.');
    b
}

/// MARK × n then TUPLE × n.
fn deep_marked_tuples() -> Vec<u8> {
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b'(', DEEP));
    b.extend(std::iter::repeat_n(b't', DEEP));
    b.push(b'.');
    b
}

#[test]
fn nesting_200k_deep_is_refused_without_recursion() {
    let n = DEEP as u64;
    let cases: [(&str, Vec<u8>, u64); 5] = [
        ("lists", deep_lists(), 2 + n + 255),
        ("marked lists", deep_marked_lists(), 2 + 2 * n + 255),
        ("dicts", deep_dicts(), 3 + 3 * n + 255),
        // TUPLE1 number k (from 0) makes depth k+2.
        ("tuples", deep_tuples(), 3 + 255),
        // The first TUPLE is the empty tuple (depth 1), TUPLE number k makes depth k+1.
        ("marked tuples", deep_marked_tuples(), 2 + n + 256),
    ];
    for (name, bytes, offset) in cases {
        let err = pickle_err(name, bytes.clone());
        assert_depth(&err, offset);
        let err = snapshot_err(name, bytes, ReadOptions::default());
        assert_depth(inner_pickle(&err), offset);
    }
}

#[test]
fn nesting_inside_device_traces_is_refused() {
    // {"device_traces": [[[[…]]]]}: nested lists where trace lists (streamed) are expected.
    let mut b = vec![0x80, 4, b'}'];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(std::iter::repeat_n(b']', DEEP));
    b.extend(std::iter::repeat_n(b'a', DEEP - 1));
    b.extend(b"s.");
    let err = snapshot_err("deep traces", b, ReadOptions::default());
    // PROTO (2) + EMPTY_DICT (1) + the key (2 + 13), then the lists: APPEND number 255 fails.
    assert_depth(inner_pickle(&err), 3 + 15 + DEEP as u64 + 255);
}

#[test]
fn open_marks_and_stack_are_bounded() {
    // Five million MARKs: more than the stack bound of 2^22.
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b'(', 5_000_000));
    let err = pickle_err("marks", b);
    assert!(
        matches!(
            err.kind,
            PickleErrorKind::Limit {
                what: "number of open marks",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.offset, 2 + (1 << 22));
    // MARK × 200k then STOP: a clear malformed-pickle error.
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b'(', DEEP));
    b.extend(b"N.");
    let err = pickle_err("marks then stop", b);
    assert!(matches!(err.kind, PickleErrorKind::Malformed(_)), "{err}");
    assert!(err.to_string().contains("STOP"), "{err}");
    // A smaller stack bound: NONE × 100 with max_stack 64.
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b'N', 100));
    let limits = Limits {
        max_stack: 64,
        ..Limits::default()
    };
    let err = pickle_err_with("stack", b, limits);
    assert_eq!(
        err.kind,
        PickleErrorKind::Limit {
            what: "stack size",
            limit: 64
        }
    );
    assert_eq!(err.offset, 2 + 64);
}

#[test]
fn json_nesting_200k_deep_is_refused() {
    let mut text = "[".repeat(DEEP);
    text.push_str(&"]".repeat(DEEP));
    let err = snapshot_err("json lists", text.into_bytes(), ReadOptions::default());
    assert!(matches!(err, ReadError::Json(_)), "{err:?}");
    assert!(err.to_string().contains("recursion limit"), "{err}");
    let text = "{\"segments\":".repeat(DEEP);
    let err = snapshot_err("json dicts", text.into_bytes(), ReadOptions::default());
    assert!(matches!(err, ReadError::Json(_)), "{err:?}");
}

/// BUG (found by this suite): the depth of a tuple is recomputed by walking all of its elements,
/// each time it is stored, and a pickle may share one tuple many times (DUP or the memo). Tuples
/// of tuples that are each `(t, t)` make that walk exponential: 40 levels (84 bytes) is 2^40 steps.
/// Expected: a result or an error at once (a tuple's depth computed once, like a list's).
#[test]
fn shared_tuple_dag_is_linear() {
    // PROTO 4, NONE, then (DUP, TUPLE2) × 40, STOP: t_k = (t_{k-1}, t_{k-1}).
    let mut b = vec![0x80, 4, b'N'];
    for _ in 0..40 {
        b.extend([b'2', 0x86]);
    }
    b.push(b'.');
    let label = "tuple dag";
    let result = bounded(label, move || from_slice(&b, Limits::default()).map(|_| ()));
    // Depth 41 is within the limit, so the pickle is fine: it must be read.
    assert!(result.is_ok(), "{result:?}");
    // The same with the memo instead of DUP: t = (t, t) via MEMOIZE / BINGET (POP keeps the stack
    // to the one value STOP takes).
    let mut b = vec![0x80, 4, b'N', 0x94, b'0'];
    for i in 0..40u8 {
        b.extend([b'h', i, b'h', i, 0x86, 0x94, b'0']);
    }
    b.extend([b'h', 40, b'.']);
    let result = bounded("tuple dag memo", move || {
        from_slice(&b, Limits::default()).map(|_| ())
    });
    assert!(result.is_ok(), "{result:?}");
}

// ---------------------------------------------------------------------------------------------
// Length fields larger than the input.

fn with_len(op: u8, len_bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0x80, 4, op];
    b.extend(len_bytes);
    b.extend(payload);
    b
}

fn assert_truncated(err: &PickleError, opcode: &str) {
    assert!(matches!(err.kind, PickleErrorKind::Truncated(_)), "{err:?}");
    assert_eq!(err.offset, 2, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(opcode) && msg.contains("byte 2"), "{msg}");
    assert!(msg.contains("needs more bytes than the input has"), "{msg}");
}

fn assert_string_limit(err: &PickleError) {
    assert_eq!(
        err.kind,
        PickleErrorKind::Limit {
            what: "string length",
            limit: 1 << 28
        },
        "{err}"
    );
    assert_eq!(err.offset, 2);
    assert!(err.to_string().contains("byte 2"), "{err}");
}

#[test]
fn length_fields_larger_than_the_input() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // 200 MB announced (under the string limit), 3 bytes there.
        (
            "BINUNICODE",
            with_len(b'X', &200_000_000u32.to_le_bytes(), b"abc"),
        ),
        ("BINUNICODE", with_len(b'X', &100u32.to_le_bytes(), b"abc")),
        (
            "BINUNICODE8",
            with_len(0x8d, &100_000_000u64.to_le_bytes(), b"abc"),
        ),
        (
            "BINBYTES8",
            with_len(0x8e, &100_000_000u64.to_le_bytes(), b"abc"),
        ),
        (
            "BINBYTES",
            with_len(b'B', &100_000_000u32.to_le_bytes(), b"abc"),
        ),
        ("SHORT_BINBYTES", with_len(b'C', &[200], b"abc")),
        (
            "LONG4",
            with_len(0x8b, &100_000_000u32.to_le_bytes(), b"\x01\x02"),
        ),
        ("LONG1", with_len(0x8a, &[9], b"\xff\xff")),
        ("SHORT_BINUNICODE", with_len(0x8c, &[5], b"ab")),
        // The length byte itself missing, at the very end.
        ("SHORT_BINUNICODE", vec![0x80, 4, 0x8c]),
        // A length field cut short.
        ("BINUNICODE8", with_len(0x8d, &[1, 0, 0], b"")),
        ("BINUNICODE", with_len(b'X', &[1, 0], b"")),
        ("LONG4", with_len(0x8b, &[1], b"")),
        ("BINFLOAT", with_len(b'G', &[0x3f, 0xf0], b"")),
        ("LONG_BINGET", with_len(b'j', &[1], b"")),
        ("FRAME", with_len(0x95, &[1, 0, 0], b"")),
    ];
    for (op, bytes) in cases {
        let err = pickle_err(op, bytes.clone());
        assert_truncated(&err, op);
        let err = snapshot_err(op, bytes.clone(), ReadOptions::default());
        assert_truncated(inner_pickle(&err), op);
        let err = snapshot_err(op, gzip(&bytes), ReadOptions::default());
        assert_truncated(inner_pickle(&err), op);
    }
    // Lengths beyond the string limit fail before reading anything.
    for (op, bytes) in [
        (
            "BINUNICODE",
            with_len(b'X', &u32::MAX.to_le_bytes(), b"abc"),
        ),
        (
            "BINUNICODE8",
            with_len(0x8d, &u64::MAX.to_le_bytes(), b"abc"),
        ),
        (
            "BINBYTES8",
            with_len(0x8e, &(1u64 << 40).to_le_bytes(), b"abc"),
        ),
        (
            "LONG4",
            with_len(0x8b, &0x7fff_ffffu32.to_le_bytes(), b"abc"),
        ),
    ] {
        assert_string_limit(&pickle_err(op, bytes));
    }
    // A truncated pickle without STOP.
    let err = pickle_err("no stop", vec![0x80, 4, b'N']);
    assert!(matches!(err.kind, PickleErrorKind::Truncated(_)), "{err}");
    assert!(err.to_string().contains("STOP"), "{err}");
}

#[test]
fn invalid_utf8_is_named() {
    for (op, bytes) in [
        ("SHORT_BINUNICODE", with_len(0x8c, &[2], b"\xff\xfe.")),
        (
            "BINUNICODE",
            with_len(b'X', &2u32.to_le_bytes(), b"\xc3\x28."),
        ),
    ] {
        let err = pickle_err(op, bytes);
        assert!(matches!(err.kind, PickleErrorKind::Malformed(_)), "{err:?}");
        assert!(
            err.to_string().contains(op) && err.to_string().contains("UTF-8"),
            "{err}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The memo.

#[test]
fn memo_index_bounds() {
    // LONG_BINPUT 0xffffffff: far beyond the memo. Legal (CPython accepts it); it is kept in the
    // sparse part of the memo, so it costs one entry, not four billion slots.
    let b = vec![0x80, 4, b'N', b'r', 0xff, 0xff, 0xff, 0xff, b'.'];
    let v = bounded("huge put", move || {
        from_slice(&b, Limits::default()).map(|v| v.type_name())
    });
    assert_eq!(v, Ok("None"));

    // BINGET of an entry never stored.
    let err = pickle_err("missing get", vec![0x80, 4, b'N', 0x94, b'h', 7, b'.']);
    assert_eq!(err.kind, PickleErrorKind::MemoMissing(7));
    assert_eq!(err.offset, 4);
    assert!(
        err.to_string()
            .contains("memo entry 7 is not defined (byte 4)"),
        "{err}"
    );
    let err = pickle_err(
        "missing long get",
        vec![0x80, 4, b'j', 0xff, 0xff, 0xff, 0xff, b'.'],
    );
    assert_eq!(err.kind, PickleErrorKind::MemoMissing(u64::from(u32::MAX)));
    // GET (text) of a missing entry, and a memo store on an empty stack.
    let err = pickle_err("missing text get", b"\x80\x02g12\n.".to_vec());
    assert_eq!(err.kind, PickleErrorKind::MemoMissing(12));
    let err = pickle_err("put on empty", vec![0x80, 4, 0x94]);
    assert!(matches!(err.kind, PickleErrorKind::Malformed(_)), "{err}");
    // A memo bound of 8 entries.
    let mut b = vec![0x80, 4, b'N'];
    b.extend([0x94; 9]);
    let limits = Limits {
        max_memo: 8,
        ..Limits::default()
    };
    let err = pickle_err_with("memo limit", b, limits);
    assert!(
        matches!(
            err.kind,
            PickleErrorKind::Limit {
                what: "memo size",
                limit: 8
            }
        ),
        "{err}"
    );
    assert_eq!(err.offset, 3 + 8);
}

/// BUG (found by this suite): the decoder caches decoded frame dicts by their address
/// (`frame_cache: HashMap<*const Container, Frame>`, engine/src/snapshot/decode.rs), trusting the
/// memo to keep every cached dict alive. A `LONG_BINPUT` to a memo index already in use drops
/// the old dict; the next dict allocated at the same address then gets the cached frame of the
/// freed one. Here `device_traces = [[e1, e2]]`: `e1.frames = [F1]` with F1 memoized at 5, then
/// memo 5 is overwritten (F1 freed), F2 built and memoized at 6, `e2.frames = [F2]`.
/// Expected: names `["first", "second"]`; got (glibc malloc reuses F1's block for F2):
/// `["first", "first"]` — a silently wrong stack, not a crash.
#[test]
fn frame_cache_survives_a_memo_overwrite() {
    let frame = |name: &str| {
        d(vec![
            ("name", s(name)),
            ("filename", s("x.py")),
            ("line", Py::Int(1)),
        ])
    };
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"]]");
    let e1 = d(vec![
        ("action", s("alloc")),
        ("addr", Py::Int(0)),
        ("size", Py::Int(1)),
        (
            "frames",
            Py::List(vec![Py::Put(5, Box::new(frame("first")))]),
        ),
    ]);
    e1.write(&mut b);
    b.push(b'a');
    b.extend([b'N', b'r', 5, 0, 0, 0, b'0']);
    // F2 is built inside e2 (a dict built loose beside the unfilled trace list would be read as
    // a trace entry: records are recognised by where they stand).
    let e2 = d(vec![
        ("action", s("alloc")),
        ("addr", Py::Int(0)),
        ("size", Py::Int(1)),
        (
            "frames",
            Py::List(vec![Py::Put(6, Box::new(frame("second")))]),
        ),
    ]);
    e2.write(&mut b);
    b.extend(b"aau.");
    let s = bounded("memo overwrite", move || {
        let s = read_snapshot_bytes(&b, &ReadOptions::default()).unwrap();
        s.traces[0]
            .entries
            .iter()
            .map(|e| s.stacks.str(s.stacks.frames(e.frames)[0].name).to_string())
            .collect::<Vec<String>>()
    });
    assert_eq!(s, ["first", "second"]);
}

/// `PROTO 4, NONE`, then `LONG_BINPUT k·65536` for k = 1…4096, `STOP`: 20 KB of input. Each
/// store is within `memo.len() + 65536`, so the memo grows 65,536 slots (1 MiB) per 5-byte
/// opcode, up to the 2^28 entries of the default limit: 4 GiB.
fn sparse_memo_bomb() -> Vec<u8> {
    let mut b = vec![0x80, 4, b'N'];
    for k in 1..=4096u32 {
        b.push(b'r');
        b.extend((k << 16).to_le_bytes());
    }
    b.push(b'.');
    b
}

/// BUG (found by this suite): see [`sparse_memo_bomb`]. Expected: an error (or success) with
/// memory in proportion to the input (here well under 256 MiB); got: a 4 GiB memo from 20 KB,
/// which under the child's `ulimit -v` of 2 GiB aborts with "memory allocation of … failed".
#[test]
fn sparse_memo_puts_use_bounded_memory() {
    run_child("child_sparse_memo_bomb", 256);
}

#[test]
#[ignore = "run by sparse_memo_puts_use_bounded_memory in a child process"]
fn child_sparse_memo_bomb() {
    if !is_child() {
        return;
    }
    let r = from_slice(&sparse_memo_bomb(), Limits::default());
    eprintln!("sparse memo bomb: {:?}", r.map(|_| ()));
    report_peak();
}

/// A snapshot whose `segments` list is one memoized segment dict of 10,000 blocks, referenced
/// 100,000 times (750 KB of pickle that would decode to 10^9 blocks).
fn segments_memo_bomb() -> Vec<u8> {
    let blocks = (0..10_000).map(|_| block(Py::Int(512))).collect();
    let mut refs = vec![Py::Put(1, Box::new(segment(1 << 20, blocks)))];
    refs.extend((1..100_000).map(|_| Py::Get(1)));
    d(vec![
        ("segments", Py::List(refs)),
        ("device_traces", Py::List(vec![])),
    ])
    .pickle()
}

#[test]
fn shared_segment_memo_bomb_fails_on_the_record_budget() {
    let bytes = segments_memo_bomb();
    assert!(bytes.len() < 1 << 20, "{}", bytes.len());
    let err = snapshot_err("segments memo bomb", bytes, ReadOptions::default());
    let ReadError::Field { path, message } = &err else {
        panic!("expected a field error, got {err:?}")
    };
    assert!(path.starts_with("segments["), "{path}");
    assert!(message.contains("memo bomb"), "{message}");
    assert!(
        message.contains("more records than the input can hold"),
        "{message}"
    );
}

#[test]
fn shared_segment_memo_bomb_uses_bounded_memory() {
    run_child("child_segments_memo_bomb", 256);
}

#[test]
#[ignore = "run by shared_segment_memo_bomb_uses_bounded_memory in a child process"]
fn child_segments_memo_bomb() {
    if !is_child() {
        return;
    }
    let r = read_snapshot_bytes(&segments_memo_bomb(), &ReadOptions::default());
    assert!(r.is_err());
    report_peak();
}

#[test]
fn trace_entry_memo_bomb_is_refused_at_once() {
    // One memoized trace entry referenced 100,000 times in one APPENDS. A trace entry is decoded
    // when it is filled and the memo keeps it as consumed, so the first reference already fails.
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("segments".into()).write(&mut b);
    b.extend(b"]");
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"](](");
    Py::Put(0, Box::new(entry("alloc", 4096, Py::Int(512)))).write(&mut b);
    b.extend(std::iter::repeat_n([b'h', 0], 100_000).flatten());
    b.extend(b"eeu.");
    let opts = ReadOptions {
        max_records_base: 10_000,
        ..ReadOptions::default()
    };
    let err = snapshot_err("trace memo bomb", b, opts);
    let msg = err.to_string();
    assert!(msg.contains("already read"), "{msg}");
    assert!(msg.contains("device_traces[0][1]"), "{msg}");
}

#[test]
fn trace_entry_referenced_twice_is_refused() {
    // device_traces = [[e, e]] with e memoized: APPEND form (one at a time).
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"]]");
    Py::Put(0, Box::new(entry("alloc", 4096, Py::Int(512)))).write(&mut b);
    b.push(b'a');
    b.extend([b'j', 0, 0, 0, 0, b'a']);
    b.extend(b"au.");
    let err = snapshot_err("entry twice, APPEND", b, ReadOptions::default());
    let msg = err.to_string();
    assert!(msg.contains("device_traces[0][1]"), "{msg}");
    assert!(msg.contains("already read"), "{msg}");
    // A shared entry across two devices.
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"](]");
    Py::Put(0, Box::new(entry("alloc", 4096, Py::Int(512)))).write(&mut b);
    b.extend([b'a', b']', b'j', 0, 0, 0, 0, b'a', b'e', b'u', b'.']);
    let err = snapshot_err("entry on two devices", b, ReadOptions::default());
    let msg = err.to_string();
    assert!(msg.contains("device_traces[1][0]"), "{msg}");
    assert!(msg.contains("already read"), "{msg}");
}

#[test]
fn streamed_entry_referenced_as_a_segment_is_refused() {
    // {"device_traces": [[e]], "segments": [e]}: e was taken (and freed) while streaming.
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"]]");
    Py::Put(0, Box::new(entry("alloc", 4096, Py::Int(512)))).write(&mut b);
    b.extend(b"aa");
    Py::Str("segments".into()).write(&mut b);
    b.extend([b']', b'j', 0, 0, 0, 0, b'a', b'u', b'.']);
    let err = snapshot_err("entry as segment", b, ReadOptions::default());
    let (path, message) = field(&err);
    assert_eq!(path, "segments[0]");
    assert!(message.contains("already read"), "{message}");
}

/// The same logical input — `device_traces = [[e, e]]`, one memoized entry referenced twice —
/// written with one APPENDS instead of two APPENDs is refused the same way.
#[test]
fn trace_entry_referenced_twice_in_one_appends() {
    let mut b = vec![0x80, 4, b'}', b'('];
    Py::Str("device_traces".into()).write(&mut b);
    b.extend(b"]](");
    Py::Put(0, Box::new(entry("alloc", 4096, Py::Int(512)))).write(&mut b);
    b.extend([b'j', 0, 0, 0, 0, b'e', b'a', b'u', b'.']);
    let err = snapshot_err("entry twice, APPENDS", b, ReadOptions::default());
    let msg = err.to_string();
    assert!(msg.contains("device_traces[0][1]"), "{msg}");
    assert!(msg.contains("already read"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Gzip.

/// `data` × `times` as one gzip file of concatenated members (RFC 1952 allows any number), each
/// compressed once with `GzEncoder`: a debug build of the compressor needs ~17 s for 64 MiB, so
/// the test compresses 64 KiB once and repeats it. `MultiGzDecoder`, `gzip -d` and CPython's
/// `gzip` inflate the whole.
fn gzip_repeated(head: &[u8], data: &[u8], times: usize) -> Vec<u8> {
    let mut out = gzip(head);
    let member = gzip(data);
    for _ in 0..times {
        out.extend(&member);
    }
    out
}

/// A pickle header, then 64 MiB of no-op `FRAME` opcodes (9 bytes each), gzip'd to ~100 KB.
fn gzip_bomb() -> Vec<u8> {
    gzip_repeated(&[0x80, 4], &b"\x95\0\0\0\0\0\0\0\0".repeat(7281), 1024)
}

fn eight_mib() -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.limits.max_input_bytes = 8 << 20;
    opts
}

#[test]
fn gzip_bomb_stops_at_the_input_limit() {
    let bomb = gzip_bomb();
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let err = snapshot_err("gzip bomb", bomb, eight_mib());
    let msg = err.to_string();
    assert!(msg.contains("exceeds the limit of 8388608"), "{msg}");
    let p = inner_pickle(&err);
    assert!(p.offset <= 8 << 20, "{p}");
}

#[test]
fn gzip_of_64_mib_of_zeros() {
    // What the brief asked for literally: 64 MiB of zeros through GzEncoder. Zeros are no pickle,
    // so the sniffer refuses them after the first block is inflated.
    let zeros = vec![0u8; 1 << 16];
    let bomb = gzip_repeated(&[], &zeros, 1024);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let err = snapshot_err("gzip zeros", bomb, eight_mib());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    assert!(err.to_string().contains("0x00"), "{err}");
    // After a pickle header, the zeros are an unknown opcode at byte 2.
    let bomb = gzip_repeated(&[0x80, 4], &zeros, 1024);
    let err = snapshot_err("gzip zeros pickle", bomb, eight_mib());
    assert_eq!(inner_pickle(&err).kind, PickleErrorKind::UnknownOpcode(0));
    assert_eq!(inner_pickle(&err).offset, 2);
}

#[test]
fn gzip_bomb_uses_bounded_memory() {
    run_child("child_gzip_bomb", 128);
}

#[test]
#[ignore = "run by gzip_bomb_uses_bounded_memory in a child process"]
fn child_gzip_bomb() {
    if !is_child() {
        return;
    }
    let bomb = gzip_bomb();
    let r = read_snapshot(bomb.as_slice(), &eight_mib());
    assert!(r.is_err());
    report_peak();
}

#[test]
fn truncated_gzip() {
    let real = corpus("gpt__baseline__cap10.pickle.gz");
    let err = snapshot_err("gzip, one byte", real[..1].to_vec(), ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    for cut in [2, 10, 100, real.len() / 2, real.len() - 20] {
        let err = snapshot_err(
            "truncated gzip",
            real[..cut].to_vec(),
            ReadOptions::default(),
        );
        let msg = err.to_string();
        assert!(
            matches!(&err, ReadError::Io(_))
                || matches!(&err, ReadError::Pickle(p) if matches!(p.kind, PickleErrorKind::Io(_))),
            "{cut}: {err:?}"
        );
        assert!(msg.contains("read failed"), "{msg}");
    }
    // Cut inside the 8-byte trailer (CRC32, ISIZE) only: the pickle's STOP comes before it and
    // the reader stops there, so the trailer is never checked (CPython's
    // `pickle.load(gzip.open(f))` does the same). Accepted, and documented here.
    let snap = bounded("gzip without trailer", move || {
        read_snapshot_bytes(&real[..real.len() - 4], &ReadOptions::default())
            .map(|s| s.segments.len())
    });
    assert_eq!(snap.unwrap(), 146);
}

#[test]
fn gzip_of_garbage_and_garbage_after_the_magic() {
    // A valid gzip of bytes that are no snapshot.
    let garbage: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .collect();
    let err = snapshot_err("gzip of garbage", gzip(&garbage), ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    // The gzip magic followed by garbage: the gzip layer fails.
    let mut bad = vec![0x1f, 0x8b];
    bad.extend(&garbage[..100]);
    let err = snapshot_err("garbage after magic", bad, ReadOptions::default());
    assert!(matches!(err, ReadError::Io(_)), "{err:?}");
    assert!(err.to_string().starts_with("read failed"), "{err}");
    // Just the magic.
    let err = snapshot_err("magic only", vec![0x1f, 0x8b], ReadOptions::default());
    assert!(
        matches!(err, ReadError::Io(_) | ReadError::NotSnapshot(_)),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Wrong types, wrong roots.

fn field(err: &ReadError) -> (&str, &str) {
    match err {
        ReadError::Field { path, message } => (path, message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn json_with_wrong_field_types_names_the_path() {
    let text = r#"{"segments": [{"device": 0, "address": 4096, "total_size": 1024,
        "blocks": [{"size": 512, "state": "inactive"}, {"size": "512", "state": "inactive"}]}],
        "device_traces": [[]]}"#;
    let err = snapshot_err("json size", text.into(), ReadOptions::default());
    assert_eq!(
        field(&err),
        ("segments[0].blocks[1].size", "expected int, found str")
    );
    assert_eq!(
        err.to_string(),
        "segments[0].blocks[1].size: expected int, found str"
    );
    let text =
        r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": 1.5, "size": 3}]]}"#;
    let err = snapshot_err("json addr", text.into(), ReadOptions::default());
    assert_eq!(
        field(&err),
        ("device_traces[0][0].addr", "expected int, found float")
    );
    let text = r#"{"segments": {"a": 1}}"#;
    let err = snapshot_err("json segments dict", text.into(), ReadOptions::default());
    assert_eq!(field(&err), ("segments", "expected list, found dict"));
    let text = r#"{"segments": [], "allocator_settings": {"expandable_segments": "yes"}}"#;
    let err = snapshot_err("json settings", text.into(), ReadOptions::default());
    assert_eq!(
        field(&err),
        (
            "allocator_settings.expandable_segments",
            "expected bool, found str"
        )
    );
    let text = r#"{"segments": [{"address": 0, "blocks": [{"size": 512, "state": "gone"}]}]}"#;
    let err = snapshot_err("json state", text.into(), ReadOptions::default());
    assert_eq!(field(&err).0, "segments[0].blocks[0].state");
    let text = r#"{"segments": [{"address": -5}]}"#;
    let err = snapshot_err("json negative", text.into(), ReadOptions::default());
    assert_eq!(field(&err).0, "segments[0].address");
    assert!(field(&err).1.contains("out of range"), "{err}");
    // Broken JSON.
    let err = snapshot_err(
        "json broken",
        b"{\"segments\": [".to_vec(),
        ReadOptions::default(),
    );
    assert!(matches!(err, ReadError::Json(_)), "{err:?}");
}

#[test]
fn pickle_with_wrong_field_types_names_the_path() {
    // segments[3].blocks[12].size is a str.
    let segs = (0..4)
        .map(|i| {
            let blocks = (0..16)
                .map(|j| {
                    if i == 3 && j == 12 {
                        block(s("512"))
                    } else {
                        block(Py::Int(512))
                    }
                })
                .collect();
            segment(i64::from(i) << 30, blocks)
        })
        .collect();
    let bytes = d(vec![
        ("segments", Py::List(segs)),
        ("device_traces", Py::List(vec![])),
    ])
    .pickle();
    let err = snapshot_err("pickle size", bytes, ReadOptions::default());
    assert_eq!(
        err.to_string(),
        "segments[3].blocks[12].size: expected int, found str"
    );
    assert_eq!(
        field(&err),
        ("segments[3].blocks[12].size", "expected int, found str")
    );

    // A trace entry's size: found while streaming, so it also carries the byte offset.
    let trace = vec![
        entry("segment_alloc", 4096, Py::Int(1024)),
        entry("alloc", 4096, Py::Int(512)),
        entry("alloc", 4608, Py::None),
    ];
    let bytes = d(vec![
        ("segments", Py::List(vec![])),
        ("device_traces", Py::List(vec![Py::List(trace)])),
    ])
    .pickle();
    let err = snapshot_err("pickle entry size", bytes, ReadOptions::default());
    let msg = err.to_string();
    assert!(
        msg.contains("device_traces[0][2].size: expected int, found None"),
        "{msg}"
    );
    assert!(msg.contains("(byte "), "{msg}");

    // Frames of the wrong shape.
    let bad_frames = d(vec![
        ("action", s("alloc")),
        ("addr", Py::Int(0)),
        ("size", Py::Int(1)),
        ("frames", Py::List(vec![Py::Int(3)])),
    ]);
    let bytes = d(vec![(
        "device_traces",
        Py::List(vec![Py::List(vec![bad_frames])]),
    )])
    .pickle();
    let err = snapshot_err("pickle frames", bytes, ReadOptions::default());
    assert!(
        err.to_string()
            .contains("device_traces[0][0].frames[0]: expected dict, found int"),
        "{err}"
    );

    // An entry without an action.
    let bytes = d(vec![(
        "device_traces",
        Py::List(vec![Py::List(vec![d(vec![("addr", Py::Int(0))])])]),
    )])
    .pickle();
    let err = snapshot_err("pickle no action", bytes, ReadOptions::default());
    assert!(
        err.to_string()
            .contains("device_traces[0][0]: trace entry has no `action`"),
        "{err}"
    );

    // segment_pool_id not a pair.
    let seg = d(vec![
        ("address", Py::Int(0)),
        ("segment_pool_id", Py::Tuple(vec![Py::Int(1)])),
    ]);
    let bytes = d(vec![("segments", Py::List(vec![seg]))]).pickle();
    let err = snapshot_err("pool id", bytes, ReadOptions::default());
    assert_eq!(field(&err).0, "segments[0].segment_pool_id");
}

#[test]
fn empty_text_and_wrong_roots() {
    let err = snapshot_err("empty", vec![], ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    assert!(err.to_string().contains("empty"), "{err}");
    let err = pickle_err("empty pickle", vec![]);
    assert!(matches!(err.kind, PickleErrorKind::Truncated(_)), "{err}");

    let text = b"Traceback (most recent call last):\n  File \"train.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory.\n";
    let err = snapshot_err("text", text.to_vec(), ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    assert!(err.to_string().contains("0x54"), "{err}");
    let err = snapshot_err("text gz", gzip(text), ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    let err = snapshot_err("whitespace", b"   \n\t".to_vec(), ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");

    // A pickle whose root is an int.
    let err = snapshot_err(
        "int root",
        vec![0x80, 4, b'K', 5, b'.'],
        ReadOptions::default(),
    );
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    assert!(err.to_string().contains("int"), "{err}");
    // A dict with neither segments nor device_traces, and JSON of a number.
    let bytes = d(vec![("hello", Py::Int(1))]).pickle();
    let err = snapshot_err("foreign dict", bytes, ReadOptions::default());
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    let err = snapshot_err(
        "json str root",
        b"  \"segments\"".to_vec(),
        ReadOptions::default(),
    );
    assert!(matches!(err, ReadError::NotSnapshot(_)), "{err:?}");
    // Data after STOP in a pickle is not read; a second STOP-less value is an error.
    let err = pickle_err("two values", vec![0x80, 4, b'N', b'N', b'.']);
    assert!(matches!(err.kind, PickleErrorKind::Malformed(_)), "{err}");
}

#[test]
fn malformed_stack_operations() {
    for (name, bytes) in [
        ("APPEND on dict", vec![0x80, 4, b'}', b'N', b'a', b'.']),
        (
            "SETITEM on list",
            vec![0x80, 4, b']', b'N', b'N', b's', b'.'],
        ),
        ("SETITEMS odd", vec![0x80, 4, b'}', b'(', b'N', b'u', b'.']),
        ("APPENDS no mark", vec![0x80, 4, b']', b'N', b'e', b'.']),
        ("POP empty", vec![0x80, 4, b'0']),
        ("TUPLE3 short", vec![0x80, 4, b'N', 0x87]),
        ("DUP empty", vec![0x80, 4, b'2']),
        // Storing a list in itself (a cycle): ], MEMOIZE, BINGET 0, APPEND.
        ("cycle", vec![0x80, 4, b']', 0x94, b'h', 0, b'a', b'.']),
        // Filling a list after it was stored in another.
        (
            "sealed",
            vec![
                0x80, 4, b']', 0x94, b']', b'h', 0, b'a', b'h', 0, b'N', b'a', b'.',
            ],
        ),
    ] {
        let err = pickle_err(name, bytes);
        assert!(
            matches!(err.kind, PickleErrorKind::Malformed(_)),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains("(byte "), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes, for memory bounds.

const CHILD_ENV: &str = "OOMLENS_HOSTILE_CHILD";

fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs the ignored test `name` of this binary in a child process under `ulimit -v 2 GiB` and
/// asserts that it passed and that its peak RSS stayed under `max_mib`.
fn run_child(name: &str, max_mib: u64) {
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" \"$@\"")
        .arg(&exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed ({}) in {:?}:\n{stdout}\n{stderr}",
        out.status,
        start.elapsed()
    );
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak-rss-kib: "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{name}: no peak reported:\n{stdout}\n{stderr}"));
    eprintln!(
        "{name}: peak RSS {} MiB in {:?}",
        peak / 1024,
        start.elapsed()
    );
    assert!(
        peak / 1024 < max_mib,
        "{name}: peak RSS {} MiB over {max_mib} MiB",
        peak / 1024
    );
    assert!(
        start.elapsed() < BUDGET * 2,
        "{name}: {:?}",
        start.elapsed()
    );
}

/// Prints this process's peak RSS (VmHWM) for [`run_child`].
fn report_peak() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    eprintln!("peak-rss-kib: {kib}");
}

#[test]
fn from_reader_reports_io_errors() {
    struct Failing(usize);
    impl std::io::Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.0 -= 1;
            buf[0] = b'N';
            Ok(1)
        }
    }
    let err = bounded("io", || {
        let r = (&[0x80u8, 4][..]).chain(Failing(3));
        from_reader(r, Limits::default()).map(|_| ()).unwrap_err()
    });
    assert!(matches!(err.kind, PickleErrorKind::Io(_)), "{err:?}");
    assert!(err.to_string().contains("disk on fire"), "{err}");
    assert_eq!(err.offset, 5);
}
