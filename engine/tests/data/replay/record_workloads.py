"""Records small allocator workloads with per-op ground truth (torch 2.11, one GPU).
Each workload runs in its own process: PYTORCH_CUDA_ALLOC_CONF must be set before CUDA starts."""
import json, os, random, subprocess, sys, gzip, shutil

WORKLOADS = [
    # name, alloc_conf, limit GiB, seed, record_stream probability
    ("gc05", "garbage_collection_threshold:0.5", 3, 11, 0.05),
    ("maxsplit64", "max_split_size_mb:64", 3, 12, 0.0),
    ("roundup", "roundup_power2_divisions:[1:2,64:4,>:8],max_non_split_rounding_mb:40,max_split_size_mb:100", 3, 13, 0.0),
    ("lseg12", "large_segment_size_mb:12", 3, 14, 0.0),
    ("recstream", "", 3, 15, 0.15),
    ("exp_recstream", "expandable_segments:True", 3, 16, 0.15),
]
# Second batch (RECORD_BATCH=2): expandable segments combined with the other settings.
WORKLOADS_2 = [
    ("exp_lseg12", "expandable_segments:True,large_segment_size_mb:12", 5, 21, 0.05),
    ("exp_maxsplit64", "expandable_segments:True,max_split_size_mb:64", 5, 22, 0.0),
    ("exp_gc05", "expandable_segments:True,garbage_collection_threshold:0.5", 5, 23, 0.1),
    ("maxsplit_gc_recstream", "max_split_size_mb:64,garbage_collection_threshold:0.7", 5, 24, 0.15),
]
if os.environ.get("RECORD_BATCH") == "2":
    WORKLOADS = WORKLOADS_2

CHILD = r'''
import json, random, sys, torch
name, limit_gib, seed, p_rs, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
GIB = 1 << 30
total = torch.cuda.get_device_properties(0).total_memory
limit = int(limit_gib * GIB)
torch.cuda.set_per_process_memory_fraction(limit / total, 0)
torch.cuda.memory._record_memory_history(max_entries=1000000, context=None)
rng = random.Random(seed)
side = torch.cuda.Stream()
default = torch.cuda.current_stream()
live = []
steps = []
def stat():
    s = torch.cuda.memory_stats()
    return [s["allocated_bytes.all.current"], s["reserved_bytes.all.current"],
            s["active_bytes.all.current"], s["requested_bytes.all.current"]]
def size():
    r = rng.random()
    if r < 0.40: return rng.randint(1, 1 << 20)
    if r < 0.65: return rng.randint((1 << 20) + 1, 10 << 20)
    if r < 0.90: return rng.randint(10 << 20, 120 << 20)
    return rng.randint(120 << 20, 400 << 20)
oom = None
for i in range(5000):
    r = rng.random()
    if i > 0 and i % 90 == 0:
        torch.cuda.empty_cache()
        steps.append(["empty_cache", 0, 0, 0] + stat())
        continue
    if r < 0.58 or not live:
        n = size()
        st = side if rng.random() < 0.1 else default
        try:
            with torch.cuda.stream(st):
                t = torch.empty(n, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as e:
            steps.append(["OOM", 0, n, st.cuda_stream] + stat())
            oom = {"step": len(steps) - 1, "n": n, "msg": str(e)}
            break
        if st is default and rng.random() < p_rs:
            with torch.cuda.stream(side):
                torch.cuda._sleep(rng.choice([100000, 2000000, 20000000]))
            t.record_stream(side)
        live.append((t, t.data_ptr(), n))
        steps.append(["alloc", t.data_ptr(), n, st.cuda_stream] + stat())
    else:
        j = rng.randrange(len(live))
        t, p, n = live.pop(j)
        del t
        steps.append(["free", p, n, 0] + stat())
torch.cuda.memory._dump_snapshot(out + ".pickle")
json.dump({"name": name, "limit": limit, "total": total, "oom": oom, "steps": steps,
           "final_stats": torch.cuda.memory_stats(),
           "alloc_conf": torch.cuda.memory._snapshot()["allocator_settings"]}, open(out + "_truth.json", "w"))
print(name, "steps", len(steps), "oom", oom is not None)
'''
out_dir = os.environ.get("OUT", ".")
work = "/tmp/wl"
os.makedirs(work, exist_ok=True)
procs = []
for name, conf, lim, seed, prs in WORKLOADS:
    env = dict(os.environ)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    procs.append((name, subprocess.Popen([sys.executable, "-c", CHILD, name, str(lim), str(seed), str(prs),
                                          os.path.join(work, "wl_" + name)], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
for name, p in procs:
    o, _ = p.communicate(timeout=500)
    print(name, "rc", p.returncode, o[-1500:])
# bundle everything into one tar.gz (at most 8 files come back)
subprocess.run(["tar", "czf", os.path.join(out_dir, "workloads.tar.gz"), "-C", work, "."], check=True)
