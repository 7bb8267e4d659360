#!/usr/bin/env python3
"""Makes engine/tests/data/corpus/variants/ and prints the expected numbers for
engine/tests/snapshot_corpus.rs and the hex literals of engine/tests/hostile.rs.

Run once from the repository root (python3 >= 3.8, nothing but the standard library):

    python3 engine/tests/data/corpus/generate.py

The corpus files beside this script are unchanged copies of /work/shared/corpus files (see
README.md here). Every number the Rust tests assert about them was printed by this script, which
reads them with Python's own `pickle`: the reference decoder.
"""
import gzip
import io
import json
import os
import pickle
import pickletools
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = os.path.join(HERE, "variants")
MASK = (1 << 64) - 1
ACTIONS = [
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom", "user_defined",
]
STATES = {"active_allocated": 0, "active_pending_free": 1, "active_awaiting_free": 1, "inactive": 2}
CORPUS = [
    "snap_small_cpp.pickle",
    "snap_small_python.pickle",
    "workload_default.pickle",
    "workload_expandable.pickle",
    "gpt__baseline__cap10.pickle.gz",
    "hf_gpt2__baseline__cap11.pickle.gz",
    "resnet50__baseline__cap10.pickle.gz",
    "gpt__expandable_segments__full.pickle.gz",
]


def raw(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def load(path):
    return pickle.loads(raw(path))


def fnv(h, x):
    return ((h ^ (x & MASK)) * 0x100000001B3) & MASK


def frame_key(frames):
    return tuple((f.get("name", ""), f.get("filename", ""), f.get("line", 0)) for f in frames)


def entries_checksum(snap):
    """FNV-1a over (action code, addr, size, stream, time_us, frame count) of every entry; for
    `oom` the addr is `device_free` (what the Rust model stores in `addr`)."""
    h = 0xCBF29CE484222325
    for trace in snap["device_traces"]:
        for e in trace:
            code = ACTIONS.index(e["action"]) if e["action"] in ACTIONS else 99
            addr = e["device_free"] if e["action"] == "oom" else e.get("addr", 0)
            for x in (code, addr, e.get("size", 0), e.get("stream", 0), e.get("time_us", 0),
                      len(e.get("frames") or [])):
                h = fnv(h, x)
    return h


def segments_checksum(segments):
    h = 0xCBF29CE484222325
    for s in segments:
        for x in (s["address"], s["total_size"], s["allocated_size"], s["active_size"],
                  s["requested_size"], s["stream"], int(s.get("is_expandable", False)),
                  len(s["blocks"])):
            h = fnv(h, x)
        for b in s["blocks"]:
            for x in (b["address"], b["size"], b["requested_size"], STATES[b["state"]],
                      len(b.get("frames") or [])):
                h = fnv(h, x)
    return h


def all_stacks(snap):
    """Every non-empty frame list of the snapshot, as content keys."""
    keys = set()
    for s in snap["segments"]:
        if s.get("frames"):
            keys.add(frame_key(s["frames"]))
        for b in s["blocks"]:
            if b.get("frames"):
                keys.add(frame_key(b["frames"]))
    for trace in snap["device_traces"]:
        for e in trace:
            if e.get("frames"):
                keys.add(frame_key(e["frames"]))
    return keys


def describe(name):
    snap = load(os.path.join(HERE, name))
    entries = [e for t in snap["device_traces"] for e in t]
    counts = {a: 0 for a in ACTIONS}
    for e in entries:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    with_frames = [i for i, e in enumerate(entries) if e.get("frames")]
    ids = {}
    shared_pair = None
    for i in with_frames:
        j = ids.setdefault(id(entries[i]["frames"]), i)
        if j != i and shared_pair is None:
            shared_pair = (j, i)
    ooms = [(i, e["size"], e["device_free"]) for i, e in enumerate(entries) if e["action"] == "oom"]
    st = snap.get("allocator_settings", {})
    print(f"// {name}")
    print(f"    segments: {len(snap['segments'])},")
    print(f"    blocks: {sum(len(s['blocks']) for s in snap['segments'])},")
    print(f"    total_size: {sum(s['total_size'] for s in snap['segments'])},")
    print(f"    trace_lens: &{[len(t) for t in snap['device_traces']]},")
    print(f"    actions: &{[(a, n) for a, n in counts.items() if n]},".replace("'", '"').replace("(", "(").replace("[", "[").replace("), (", "), ("))
    print(f"    ooms: {len(ooms)}, first_oom: {ooms[0] if ooms else None}, last_oom: {ooms[-1] if ooms else None},")
    print(f"    entries_with_frames: {len(with_frames)}, distinct_frame_objects: {len(ids)},")
    entry_stacks = {frame_key(entries[i]["frames"]) for i in with_frames}
    print(f"    distinct_stacks: {len(all_stacks(snap))}, distinct_entry_stacks: {len(entry_stacks)}, "
          f"shared_pair: {shared_pair},")
    print(f"    unpacked_bytes: {len(raw(os.path.join(HERE, name)))},")
    print(f"    alloc_conf: {st.get('PYTORCH_CUDA_ALLOC_CONF')!r}, expandable: {st.get('expandable_segments')}, "
          f"max_split_size: {st.get('max_split_size')}, gc: {st.get('garbage_collection_threshold')},")
    print(f"    expandable_segments: {sum(1 for s in snap['segments'] if s.get('is_expandable'))},")
    print(f"    annotations: {len(snap.get('external_annotations', []))},")
    print(f"    entries_checksum: {entries_checksum(snap):#x}, segments_checksum: {segments_checksum(snap['segments']):#x},")
    # Blocks tile their segment in every corpus file (checked here so the Rust test's claim holds).
    for s in snap["segments"]:
        addr = s["address"]
        for b in s["blocks"]:
            assert b["address"] == addr, (name, hex(s["address"]))
            addr += b["size"]
        assert addr == s["address"] + s["total_size"], name
    return snap


def write(name, data):
    with open(os.path.join(VARIANTS, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, mtime=0)


def variants(base_name, stem):
    snap = load(os.path.join(HERE, base_name))
    for proto in (0, 1, 2, 3, 5):
        data = pickle.dumps(snap, protocol=proto)
        write(f"{stem}.p{proto}.pickle", data)
        write(f"{stem}.p{proto}.pickle.gz", gz(data))
    # The tuple `segment_pool_id` becomes a JSON list.
    text = json.dumps(snap).encode()
    write(f"{stem}.json", text)
    write(f"{stem}.json.gz", gz(text))


def special():
    frame = {"filename": "/job/train.py", "name": "step", "line": 42}
    # LONG1 of 9 bytes: addresses >= 2**63 (here 2**64-1 and 2**64-2**21).
    big = 2**64 - 2**21
    snap = {
        "segments": [{
            "device": 0, "address": big, "total_size": 2**21, "allocated_size": 2**21,
            "active_size": 2**21, "requested_size": 2**21 - 1, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [frame],
            "blocks": [{"address": big, "size": 2**21, "requested_size": 2**21 - 1,
                        "state": "active_allocated", "frames": [frame]}],
        }],
        "device_traces": [[
            {"action": "alloc", "addr": 2**64 - 1, "size": 512, "stream": -1,
             "time_us": 1796208761687569, "frames": [frame]},
        ]],
    }
    data = pickle.dumps(snap, protocol=4)
    write("long1_u64max.pickle", data)
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data) if op.name == "LONG1"]
    assert any(arg == 2**64 - 1 for _, arg in ops), ops

    # Legacy list root: a bare list of segments.
    small = load(os.path.join(HERE, "snap_small_python.pickle"))
    write("legacy_list_root.pickle", pickle.dumps(small["segments"], protocol=4))

    # PyTorch 2.0 style: blocks without `address`, the allocation stack in history[0].
    base = 0x7F0000000000
    hist_frames = [{"filename": "/job/model.py", "name": "forward", "line": 7}, frame]
    v20 = {
        "segments": [
            {"device": 0, "address": base, "total_size": 2097152, "allocated_size": 1536,
             "active_size": 1536, "requested_size": 1300, "stream": 0, "segment_type": "small",
             "blocks": [
                 {"size": 512, "requested_size": 500, "state": "active_allocated",
                  "history": [{"addr": base, "real_size": 500, "frames": hist_frames}]},
                 {"size": 1024, "state": "active_allocated",
                  "history": [{"addr": base + 512, "real_size": 800, "frames": [frame]}]},
                 {"size": 2097152 - 1536, "requested_size": 0, "state": "inactive", "history": []},
             ]},
            {"device": 0, "address": base + 2**30, "total_size": 20971520, "allocated_size": 0,
             "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
             "blocks": [{"size": 20971520, "requested_size": 0, "state": "inactive"}]},
        ],
        "device_traces": [[
            {"action": "segment_alloc", "addr": base, "size": 2097152, "stream": 0,
             "frames": hist_frames},
            {"action": "alloc", "addr": base, "size": 500, "stream": 0, "frames": hist_frames},
            {"action": "oom", "device_free": 123456, "size": 2**40, "stream": 0, "frames": []},
        ]],
    }
    write("pytorch20_history.pickle", pickle.dumps(v20, protocol=2))


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def hostile():
    print("// hostile: pickle.dumps(Payload()) (protocol 4), Payload.__reduce__ = (os.system, ('echo pwned',))")
    p4 = pickle.dumps(Payload(), protocol=4)
    print("OS_SYSTEM_P4 =", p4.hex())
    print("  ops:", [(pos, op.name) for op, _, pos in pickletools.genops(p4)])
    p0 = pickle.dumps(Payload(), protocol=0)
    print("OS_SYSTEM_P0 =", p0.hex())
    p2 = pickle.dumps(Payload(), protocol=2)
    print("OS_SYSTEM_P2 =", p2.hex(), [(pos, op.name) for op, _, pos in pickletools.genops(p2)][:4])
    # The payload deep inside a snapshot-like dict: the size of a block and of a trace entry.
    snap = {
        "segments": [{"device": 0, "address": 4096, "total_size": 1024, "allocated_size": 512,
                      "active_size": 512, "requested_size": 500, "stream": 0,
                      "segment_type": "small", "segment_pool_id": (0, 0),
                      "is_expandable": False, "frames": [],
                      "blocks": [{"address": 4096, "size": 512, "requested_size": 500,
                                  "state": "active_allocated", "frames": []},
                                 {"address": 4608, "size": 512, "requested_size": 0,
                                  "state": "inactive", "frames": []}]}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 1024, "stream": 0},
            {"action": "alloc", "addr": 4096, "size": 500, "stream": 0},
            {"action": "alloc", "addr": 4608, "size": Payload(), "stream": 0},
        ]],
    }
    data = pickle.dumps(snap, protocol=4)
    ops = [(pos, op.name) for op, _, pos in pickletools.genops(data)]
    first = [pos for pos, name in ops if name == "STACK_GLOBAL"]
    print("SNAPSHOT_WITH_PAYLOAD =", data.hex())
    print("  STACK_GLOBAL at", first, "of", len(data), "bytes")


def main():
    os.makedirs(VARIANTS, exist_ok=True)
    for name in CORPUS:
        describe(name)
    variants("snap_small_python.pickle", "snap_small_python")
    variants("snap_small_cpp.pickle", "snap_small_cpp")
    special()
    hostile()
    # C++ frames of snap_small_cpp: the stack of its alloc entry.
    cpp = load(os.path.join(HERE, "snap_small_cpp.pickle"))
    alloc = next(e for e in cpp["device_traces"][0] if e["action"] == "alloc")
    fr = alloc["frames"]
    print("// snap_small_cpp alloc entry: frames", len(fr),
          "line0", sum(1 for f in fr if f["line"] == 0),
          "first", fr[0], "py", [f for f in fr if f["filename"].endswith(".py")][:1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
