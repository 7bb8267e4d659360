//! Unit tests of the pickle reader: every protocol, sharing, and each refusal and limit.
#![allow(clippy::unwrap_used)]

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn load(bytes: &[u8]) -> Result<Value, PickleError> {
    from_slice(bytes, Limits::default())
}

// pickle.dumps({"a": [1, -2, 2**40, 2**64-1, -(2**70)], "s": "héllo", "t": (1, 2), "f": 1.5,
//               "n": None, "b": True}, protocol=P) from CPython 3.11.
const P2: &str = "80027d71002858010000006171015d7102284b014afeffffff8a060000000000018a09ffffffffffffffff008a090000000000000000c0655801000000737103580600000068c3a96c6c6f710458010000007471054b014b028671065801000000667107473ff800000000000058010000006e71084e580100000062710988752e";
const P4: &str = "80049560000000000000007d94288c0161945d94284b014afeffffff8a060000000000018a09ffffffffffffffff008a090000000000000000c0658c0173948c0668c3a96c6c6f948c0174944b014b0286948c016694473ff80000000000008c016e944e8c01629488752e";
const P5: &str = "80059560000000000000007d94288c0161945d94284b014afeffffff8a060000000000018a09ffffffffffffffff008a090000000000000000c0658c0173948c0668c3a96c6c6f948c0174944b014b0286948c016694473ff80000000000008c016e944e8c01629488752e";

fn check_sample(v: &Value) {
    let Value::Dict(d) = v else {
        panic!("root is {v:?}")
    };
    let Value::List(a) = d.get("a").unwrap() else {
        panic!()
    };
    let ints: Vec<Option<i128>> = a.list_items().iter().map(Value::as_i128).collect();
    assert_eq!(
        ints,
        vec![
            Some(1),
            Some(-2),
            Some(1 << 40),
            Some(i128::from(u64::MAX)),
            Some(-(1i128 << 70))
        ]
    );
    assert_eq!(d.get("s").unwrap().as_str(), Some("héllo"));
    assert!(matches!(d.get("t").unwrap(), Value::Tuple(t) if t.items().len() == 2));
    assert!(matches!(d.get("f").unwrap(), Value::Float(x) if x == 1.5));
    assert!(matches!(d.get("n").unwrap(), Value::None));
    assert!(matches!(d.get("b").unwrap(), Value::Bool(true)));
}

#[test]
fn reads_protocols_2_4_5() {
    for p in [P2, P4, P5] {
        check_sample(&load(&hex(p)).unwrap());
    }
}

#[test]
fn memoized_objects_stay_shared() {
    // pickle.dumps({"x": shared, "y": shared}, protocol=4) with shared = [1]
    let v = load(&hex(
        "80049514000000000000007d94288c0178945d944b01618c0179946802752e",
    ))
    .unwrap();
    let Value::Dict(d) = v else { panic!() };
    let (Value::List(x), Value::List(y)) = (d.get("x").unwrap(), d.get("y").unwrap()) else {
        panic!()
    };
    assert!(Rc::ptr_eq(&x, &y));
}

#[test]
fn refuses_code_execution_opcodes_with_name_and_offset() {
    // PROTO 2, GLOBAL 'os\nsystem\n'
    let err = load(b"\x80\x02cos\nsystem\n").unwrap_err();
    assert_eq!(err.kind, PickleErrorKind::Refused("GLOBAL"));
    assert_eq!(err.offset, 2);
    for (op, name) in [
        (0x93u8, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'Q', "BINPERSID"),
    ] {
        let err = load(&[0x80, 4, b'N', op]).unwrap_err();
        assert_eq!(err.kind, PickleErrorKind::Refused(name), "{name}");
        assert_eq!(err.offset, 3);
        assert!(err.to_string().contains(name) && err.to_string().contains("byte 3"));
    }
    let err = load(&[0x80, 4, 0xff]).unwrap_err();
    assert_eq!(err.kind, PickleErrorKind::UnknownOpcode(0xff));
}

#[test]
fn deep_nesting_fails_cleanly() {
    // 200,000 nested lists: ']' × n, then 'a' × (n-1), then STOP.
    let n = 200_000;
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b']', n));
    b.extend(std::iter::repeat_n(b'a', n - 1));
    b.push(b'.');
    let err = load(&b).unwrap_err();
    assert!(
        matches!(
            err.kind,
            PickleErrorKind::Limit {
                what: "nesting depth",
                ..
            }
        ),
        "{err}"
    );
    // Marks nested 200,000 deep are bounded too, without recursion.
    let mut b = vec![0x80, 4];
    b.extend(std::iter::repeat_n(b'(', n));
    b.extend(std::iter::repeat_n(b'l', n));
    b.push(b'.');
    assert!(load(&b).is_err());
}

#[test]
fn length_larger_than_input_is_truncated_not_allocated() {
    // BINUNICODE8 claiming 200 MiB, with 3 bytes present.
    let mut b = vec![0x80, 4, 0x8d];
    b.extend((200u64 << 20).to_le_bytes());
    b.extend(b"abc");
    let err = load(&b).unwrap_err();
    assert!(matches!(err.kind, PickleErrorKind::Truncated(_)), "{err}");
    // Past the string limit it fails before reading.
    let mut b = vec![0x80, 4, 0x8d];
    b.extend(u64::MAX.to_le_bytes());
    let err = load(&b).unwrap_err();
    assert!(
        matches!(
            err.kind,
            PickleErrorKind::Limit {
                what: "string length",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn memo_bombs_are_bounded() {
    // LONG_BINPUT at index 4 billion must not allocate a 4-billion-slot memo: it is kept in the
    // sparse part, and the value can be read back.
    let mut b = vec![0x80, 4, b'K', 7, b'r'];
    b.extend(4_000_000_000u32.to_le_bytes());
    b.extend([b'0', b'j']);
    b.extend(4_000_000_000u32.to_le_bytes());
    b.push(b'.');
    assert_eq!(load(&b).unwrap().as_i128(), Some(7));
    // GET of a missing entry.
    let err = load(&[0x80, 4, b'h', 7, b'.']).unwrap_err();
    assert_eq!(err.kind, PickleErrorKind::MemoMissing(7));
}

#[test]
fn cycles_are_refused() {
    // l = []; l.append(l): EMPTY_LIST MEMOIZE BINGET 0 APPEND STOP
    let err = load(&[0x80, 4, b']', 0x94, b'h', 0, b'a', b'.']).unwrap_err();
    assert!(err.to_string().contains("inside itself"), "{err}");
    // a = []; b = [a]; a.append(b): the second append mutates a sealed list.
    let b = [0x80, 4, b']', 0x94, b']', b'h', 0, b'a', b'a', b'.'];
    let err = load(&b).unwrap_err();
    assert!(err.to_string().contains("modified after"), "{err}");
}

#[test]
fn malformed_stacks_error() {
    assert!(load(&[0x80, 4, b'a']).is_err());
    assert!(load(&[0x80, 4, b'e']).is_err());
    assert!(load(&[0x80, 4, b'N', b'N', b'.']).is_err());
    assert!(load(&[0x80, 4]).is_err());
    assert!(
        load(&[0x80, 9])
            .unwrap_err()
            .to_string()
            .contains("protocol 9")
    );
    assert!(load(&[]).is_err());
}

#[test]
fn protocol_0_text_opcodes() {
    // pickle.dumps({'a': 1}, protocol=0) == b'(dp0\nVa\np1\nI1\ns.' uses UNICODE (unsupported);
    // ints, longs, floats, GET/PUT and DICT/LIST are read.
    let v = load(b"(dp0\nI7\np1\nL123456789012345678901234L\nsg1\nF2.5\ns.").unwrap();
    let Value::Dict(d) = v else { panic!() };
    let pairs = d.dict_pairs();
    assert_eq!(pairs[0].0.as_i128(), Some(7));
    assert_eq!(pairs[0].1.as_i128(), Some(123_456_789_012_345_678_901_234));
    assert!(matches!(pairs[1].1, Value::Float(x) if x == 2.5));
}

// s = "k"; pickle.dumps([s, (s, s), {s: s}, [s]], protocol=4): one string object, fetched from
// the memo by BINGET into a list, a tuple, a dict key and value and a nested list (the reader
// pushes it by reference and must store the string itself everywhere).
const SHARED_STR: &str =
    "8004951b000000000000005d94288c016b946801680186947d9468016801735d94680161652e";

#[test]
fn memoized_string_is_stored_as_itself_everywhere() {
    let v = match load(&hex(SHARED_STR)) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    };
    let text = format!("{v:?}");
    assert!(!text.contains("memoized"), "{text}");
    let Value::List(l) = &v else { panic!("{v:?}") };
    let items = l.list_items();
    assert_eq!(items[0].as_str(), Some("k"));
    let Value::Tuple(t) = &items[1] else { panic!() };
    assert!(t.items().iter().all(|x| x.as_str() == Some("k")));
    let Value::Dict(d) = &items[2] else { panic!() };
    assert_eq!(
        d.get("k")
            .and_then(|x| x.as_str().map(str::to_owned))
            .as_deref(),
        Some("k")
    );
    let Value::List(inner) = &items[3] else {
        panic!()
    };
    assert_eq!(inner.list_items()[0].as_str(), Some("k"));
    // The root itself fetched from the memo: `"k"` memoized, popped, `BINGET 0`, `STOP`.
    let root = load(&hex("80048c016b943068002e")).map(|v| v.as_str().map(str::to_owned));
    assert!(matches!(root, Ok(Some(ref s)) if s == "k"), "{root:?}");
}
