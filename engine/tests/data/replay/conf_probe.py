import json, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
CASES = [
 "", "expandable_segments:True", "expandable_segments:False", "expandable_segments:true",
 "expandable_segments:1", "max_split_size_mb:128", "max_split_size_mb:20", "max_split_size_mb:19",
 "max_split_size_mb:abc", "max_split_size_mb:128abc", "max_split_size_mb:-5", "max_split_size_mb",
 "max_split_size_mb:", "max_split_size_mb:100,", "max_split_size_mb:100,,expandable_segments:True",
 " max_split_size_mb : 100 , expandable_segments : True ", "foo:1", "foo:[1,2]",
 "garbage_collection_threshold:0.6", "garbage_collection_threshold:1", "garbage_collection_threshold:0",
 "garbage_collection_threshold:1e-1", "garbage_collection_threshold:abc",
 "roundup_power2_divisions:4", "roundup_power2_divisions:3", "roundup_power2_divisions:0",
 "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", "roundup_power2_divisions:[>:8]",
 "roundup_power2_divisions:[2:4]", "roundup_power2_divisions:[3:4]", "roundup_power2_divisions:[2:3]",
 "roundup_power2_divisions:[1:2,65536:16]", "roundup_power2_divisions:[1:2", "roundup_power2_divisions:[1:2,]",
 "max_non_split_rounding_mb:64", "max_non_split_rounding_mb:10", "large_segment_size_mb:12",
 "large_segment_size_mb:10", "large_segment_size_mb:40,max_split_size_mb:30",
 "max_split_size_mb:30,large_segment_size_mb:40", "large_segment_size_mb:64,max_non_split_rounding_mb:30",
 "backend:native", "backend:cudaMallocAsync", "backend:foo", "backend:native,max_split_size_mb:100",
 "per_process_memory_fraction:0.5", "per_process_memory_fraction:1.5", "per_process_memory_fraction:1",
 "release_lock_on_cudamalloc:True", "pinned_use_cuda_host_register:True", "pinned_num_register_threads:8",
 "pinned_num_register_threads:3", "graph_capture_record_stream_reuse:True", "pinned_use_background_threads:True",
 "pinned_reserve_segment_size_mb:0", "expandable_segments:True:False", "max_split_size_mb:100:200",
 "[", "]", ",", ":", "max_split_size_mb;100", "MAX_SPLIT_SIZE_MB:100", "throw_on_cudamalloc_oom:True",
]
CODE = r'''
import json, torch
try:
    torch.cuda.init()
    x = torch.empty(1024, device="cuda")
    s = torch.cuda.memory._snapshot()["allocator_settings"]
    print("OK " + json.dumps(s, sort_keys=True))
except BaseException as e:
    print("ERR " + type(e).__name__ + " " + json.dumps(str(e).split("\nException raised from")[0]))
'''
def run(c):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=c)
    p = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    out = [l for l in p.stdout.splitlines() if l.startswith(("OK ", "ERR "))]
    return {"conf": c, "result": out[-1] if out else None, "rc": p.returncode, "stderr": p.stderr[-800:]}
with ThreadPoolExecutor(8) as ex:
    res = list(ex.map(run, CASES))
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "conf_probe.json"), "w"), indent=1)
for r in res:
    print(repr(r["conf"]), "=>", (r["result"] or "")[:300], "| rc", r["rc"], "|", r["stderr"][-200:].replace("\n", " ") if r["result"] is None or "Warn" in r["stderr"] else "")
