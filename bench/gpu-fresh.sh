#!/usr/bin/env bash
# Records a fresh ground-truth corpus of workloads that are not in ../shared (other model
# shapes and batches), with PyTorch on this GPU machine, then runs bench/gpu.sh on it: the
# runner is checked on traces it has never seen.
#
#   bench/gpu-fresh.sh [RUNNER] [WORK_DIR]
#
# RUNNER    default target/gpu/oomlens-runner; WORK_DIR default target/gpu-fresh.
# Uses bench/gpu/record_corpus.py (the shared corpus's own recorder, with its run format):
# phase 1 records each workload without a limit, phase 2 caps it at ⌊0.8 × peak reserved⌋
# (an OOM) and at 1.02 × peak allocated (where fragmentation decides), with remedies beside.
# Writes WORK_DIR/corpus/truth.json in the shared corpus's format and prints gpu.sh's report.
set -euo pipefail
RUNNER=${1:-target/gpu/oomlens-runner}
WORK=${2:-target/gpu-fresh}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
python3 - "$HERE/gpu/record_corpus.py" "$WORK" <<'PY'
import json, math, os, shutil, subprocess, sys

recorder, work = sys.argv[1:3]
GIB = 1024 ** 3
# Shapes the shared corpus does not have.
WORKLOADS = {
    "gpt_d768": dict(model="gpt", batch=12, seq=768, d=768, layers=16, heads=12, vocab=50000, naive=False, steps=3),
    "resnet50_b96": dict(model="resnet50", batch=96, steps=3),
}
runs_dir = os.path.join(work, "runs")
os.makedirs(runs_dir, exist_ok=True)

def plan(cases, tag):
    path = os.path.join(work, f"plan-{tag}.json")
    json.dump(cases, open(path, "w"))
    out = os.path.join(work, f"rec-{tag}")
    # The recorder's plan mode runs cases in parallel, one process each.
    subprocess.run([sys.executable, recorder, "--out", out, "--plan", path, "--only", "gpt,resnet50"],
                   check=True, stdout=sys.stderr)
    res = {}
    for c in cases:
        p = os.path.join(out, "runs", c["id"] + ".json")
        if os.path.exists(p):
            res[c["id"]] = json.load(open(p))
            for ext in (".pickle.gz",):
                src = os.path.join(out, "runs", c["id"] + ext)
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(runs_dir, c["id"] + ext))
        else:
            print(f"{c['id']}: no result", file=sys.stderr)
    return res

def case(wl, remedy, cap_gib, **kw):
    base = dict(WORKLOADS[wl])
    if remedy == "batch_half":
        base["batch"] = max(1, base["batch"] // 2)
    if remedy == "ckpt":
        base["ckpt"] = True
    if remedy == "expandable_segments":
        base["alloc_conf"] = "expandable_segments:True"
    # record_corpus's plan mode fills the model's defaults from its own workload table.
    return dict(base, id=f"{wl}__{remedy}__{kw.pop('tag')}", workload="gpt" if base["model"] == "gpt" else "resnet50",
                remedy=remedy, cap_gib=cap_gib, **kw)

first = plan([case(wl, "baseline", 40, tag="full") for wl in WORKLOADS], "full")
cases = []
for wl in WORKLOADS:
    b = first.get(f"{wl}__baseline__full")
    if not b:
        continue
    cap = max(2, int(math.floor(0.8 * b["peak_reserved_bytes"] / GIB)))
    tight = round(b["peak_allocated_bytes"] / GIB * 1.02, 2)
    cases += [
        case(wl, "baseline", cap, tag=f"cap{cap}"),
        case(wl, "batch_half", cap, tag=f"cap{cap}", snapshot=False),
        case(wl, "batch_half", 40, tag="full"),
        case(wl, "expandable_segments", cap, tag=f"cap{cap}", snapshot=False),
        case(wl, "expandable_segments", 40, tag="full"),
        case(wl, "ckpt", cap, tag=f"cap{cap}", snapshot=False),
        case(wl, "baseline", tight, tag=f"tight{tight}"),
        case(wl, "expandable_segments", tight, tag=f"tight{tight}"),
    ]
second = plan(cases, "capped")
truth = []
for rid, r in {**first, **second}.items():
    c = r["case"]
    wl = c["id"].split("__")[0]
    snap = os.path.join("snapshots", rid + ".pickle.gz")
    has = os.path.exists(os.path.join(runs_dir, rid + ".pickle.gz"))
    truth.append(dict(
        id=rid, workload=wl, remedy=c["remedy"], config=c, cap_bytes=r["cap_bytes"],
        device_total_bytes=r["device_total_bytes"], device=r["device"], torch=r["torch"],
        oom=r["oom"], oom_message=r.get("oom_message"), peak_allocated_bytes=r["peak_allocated_bytes"],
        peak_reserved_bytes=r["peak_reserved_bytes"], snapshot=snap if has else None))
truth.sort(key=lambda t: t["id"])
corpus = os.path.join(work, "corpus")
os.makedirs(os.path.join(corpus, "snapshots"), exist_ok=True)
for f in os.listdir(runs_dir):
    shutil.copy(os.path.join(runs_dir, f), os.path.join(corpus, "snapshots", f))
json.dump({"runs": truth}, open(os.path.join(corpus, "truth.json"), "w"), indent=1)
print(f"{len(truth)} runs recorded", file=sys.stderr)
PY
exec "$HERE/gpu.sh" "$WORK/corpus" "$RUNNER" "$WORK/results"
