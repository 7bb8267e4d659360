#!/usr/bin/env python3
"""Makes two large synthetic snapshots from small corpus files, for a second opinion on speed:

  hf_gpt2_x100.pickle.gz     the hf_gpt2 baseline trace repeated to ~1M entries (Python stacks,
                             frame lists shared as PyTorch shares them)
  cpp_shared_900k.pickle.gz  900,000 entries with C++ + Python stacks (stacks="all", PyTorch's
                             default), 2,000 distinct stacks built from shared frame dicts

Usage: bench/synthetic.py OUT_DIR [CORPUS_DIR]   (CORPUS_DIR defaults to ../shared/corpus)
They are written with CPython's pickle (protocol 4), as _dump_snapshot does. Both traces are
physically consistent, as a real recording would be: in the hf_gpt2 file every repetition lives in
its own address range (the last one at the recorded addresses, so the dump's final `segments` fit it)
and ends by freeing every block and segment it still holds; the C++ file's blocks sit in one segment
that is allocated first and freed last.
"""
import gzip, os, pickle, sys

out_dir = sys.argv[1]
corpus = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../../shared/corpus")
os.makedirs(out_dir, exist_ok=True)

s = pickle.load(gzip.open(os.path.join(corpus, "snapshots/hf_gpt2__baseline__full.pickle.gz")))
t = s["device_traces"][0]
reps = 1_000_000 // len(t) + 1
out = []
for r in range(reps):
    shift = (reps - 1 - r) << 48  # the last repetition keeps the recorded addresses
    live, segs = {}, {}
    for e in t:
        d = dict(e)
        d["addr"] = e["addr"] + shift
        d["time_us"] = e.get("time_us", 0) + r * 10_000_000
        out.append(d)
        a = e["action"]
        if a == "alloc":
            live[d["addr"]] = d
        elif a == "free_completed":
            live.pop(d["addr"], None)
        elif a == "segment_alloc":
            segs[d["addr"]] = d["size"]
        elif a == "segment_free":
            segs.pop(d["addr"], None)
    if r == reps - 1:
        break
    end = out[-1]["time_us"]
    for addr, d in live.items():  # del model; torch.cuda.empty_cache()
        for a in ("free_requested", "free_completed"):
            out.append(dict(d, action=a, frames=[], time_us=end))
    for addr, size in segs.items():
        out.append(dict(t[0], action="segment_free", addr=addr, size=size, frames=[], time_us=end))
s["device_traces"] = [out]
with gzip.open(os.path.join(out_dir, "hf_gpt2_x%d.pickle.gz" % reps), "wb") as f:
    pickle.dump(s, f, protocol=4)

c = pickle.load(open(os.path.join(corpus, "allocator-traces/snap_small_cpp.pickle"), "rb"))
pool = [e["frames"] for e in c["device_traces"][0] if e.get("frames")]
shared = {}
def share(fr):
    return shared.setdefault((fr["name"], fr["filename"], fr["line"]), fr)
stacks = []
for j in range(2000):
    base = [share(fr) for fr in pool[j % len(pool)]]
    tail = share({"name": "site%d" % (j % 300), "filename": "/opt/job/train.py", "line": j % 300})
    stacks.append(base[:-4] + [tail] + base[-4:])
base = 0x7F0000000000
out = [{"action": "segment_alloc", "addr": base, "size": 300_000 * 65536, "stream": 0,
        "time_us": 1796209298817040, "compile_context": "N/A", "user_metadata": "", "frames": stacks[0]}]
for i in range(300_000):
    size = 512 * (1 + i % 64)
    fr = stacks[(i * 7) % len(stacks)]
    for a in ("alloc", "free_requested", "free_completed"):
        out.append({"action": a, "addr": base + i * 65536, "size": size, "stream": 0,
                    "time_us": 1796209298817041 + i, "compile_context": "N/A", "user_metadata": "",
                    "frames": fr})
out.append(dict(out[0], action="segment_free", time_us=1796209298817041 + 300_000))
c["device_traces"] = [out]
c["segments"] = []
with gzip.open(os.path.join(out_dir, "cpp_shared_900k.pickle.gz"), "wb") as f:
    pickle.dump(c, f, protocol=4)
print("written to", out_dir)
