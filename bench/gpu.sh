#!/usr/bin/env bash
# Verifies the GPU runner against ground truth recorded with PyTorch 2.11 on an H200
# (../shared/corpus/truth.json): run it on a GPU machine.
#
#   bench/gpu.sh [CORPUS] [RUNNER] [OUT]
#
# CORPUS  the corpus folder (truth.json, snapshots/, large/); default ../shared/corpus
# RUNNER  the oomlens-runner binary; default target/gpu/oomlens-runner (build it with
#         `cargo build --release -p oomlens-runner` where cargo is, and carry it)
# OUT     where each replay's JSON goes; default target/gpu-results
#
# For every capped run (`__cap<N>`, `__tight<X>`) it replays, on the GPU under the run's limit:
# the run's own snapshot if it has one; else the snapshot of the same workload and remedy
# without a limit (`__full`), which is the same program; else the workload's `baseline__full`
# with the remedy (`--alloc-conf` for allocator settings, `--remedy` for a trace transform: a
# model). It checks the GPU's OOM verdict against PyTorch's and, with the simulation beside it,
# the OOM's trace entry and the peaks. Then every `__full` snapshot without a limit (the peaks
# must be the simulation's), long400 flat out (its replay time against its recorded span), one
# trace with recorded timing, and one OOM on an emulated card (--device-memory) instead of a limit.
# Prints a Markdown report; exit 1 if a check failed.
set -euo pipefail
CORPUS=${1:-../shared/corpus}
RUNNER=${2:-target/gpu/oomlens-runner}
OUT=${3:-target/gpu-results}
mkdir -p "$OUT"
exec python3 - "$CORPUS" "$RUNNER" "$OUT" <<'PY'
import json, os, subprocess, sys, time

corpus, runner, out = sys.argv[1:4]
runs = json.load(open(os.path.join(corpus, "truth.json")))["runs"]
by_id = {r["id"]: r for r in runs}
REMEDY_SPEC = {
    "batch_half": "batch=0.5", "batch_quarter": "batch=0.25", "amp_bf16": "amp=bf16",
    "amp_fp16": "amp=fp16", "ckpt": "checkpoint", "amp_bf16_ckpt": "amp=bf16+checkpoint",
    "sgd": "optimizer=sgd",
}

def gib(b):
    return f"{b / 2**30:.2f} GiB"

def allowed(run):
    # torch.cuda.set_per_process_memory_fraction(cap / total): static_cast<size_t>(f * total)
    return int((run["cap_bytes"] / run["device_total_bytes"]) * run["device_total_bytes"])

def snap(path):
    return os.path.join(corpus, path)

def replay(tag, args):
    t = time.time()
    p = subprocess.run([runner, "replay", "--json"] + args, capture_output=True, text=True)
    took = time.time() - t
    if p.returncode not in (0, 1):
        return None, f"exit {p.returncode}: {p.stderr.strip()[:300]}", took
    with open(os.path.join(out, tag + ".json"), "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout), None, took

failures = []
lines = []
w = lines.append

first = None
# ---- capped runs --------------------------------------------------------------------------
w("### Capped runs: the OOM verdict on the GPU against PyTorch's\n")
w("| run | replayed from | limit | PyTorch | GPU | simulation | same OOM entry | peak allocated (GPU) | = sim | peak reserved = sim | stamp errors | GPU ms |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|")
n_capped = n_verdict = n_entry = 0
for run in runs:
    rid = run["id"]
    if "__cap" not in rid and "__tight" not in rid:
        continue
    wl, remedy = run["workload"], run["remedy"]
    args = ["--capacity", str(allowed(run))]
    extra = []
    if run.get("snapshot"):
        src, path = "own snapshot", run["snapshot"]
    elif by_id.get(f"{wl}__{remedy}__full", {}).get("snapshot"):
        src, path = f"{wl}__{remedy}__full", by_id[f"{wl}__{remedy}__full"]["snapshot"]
    else:
        path = by_id[f"{wl}__baseline__full"]["snapshot"]
        conf = run["config"].get("alloc_conf")
        if conf:
            src, extra = f"baseline__full + `{conf}`", ["--alloc-conf", conf]
        elif remedy in REMEDY_SPEC:
            src, extra = f"baseline__full + `{REMEDY_SPEC[remedy]}` (model)", ["--remedy", REMEDY_SPEC[remedy]]
        else:
            w(f"| {rid} | (nothing to replay) | | | | | | | | | | |")
            continue
    v, err, took = replay(rid, [snap(path)] + args + extra)
    n_capped += 1
    if v is None:
        failures.append(f"{rid}: {err}")
        w(f"| {rid} | {src} | {gib(allowed(run))} | {'OOM' if run['oom'] else 'fits'} | error: {err} | | | | | | | |")
        continue
    r = v["remedies"][0] if extra and extra[0] == "--remedy" else v
    if first is None:
        first = v
    gpu_oom, sim = r["oom"], r["simulation"]
    a = r["agrees_with_simulation"]
    n_verdict += gpu_oom == run["oom"]
    n_entry += a["oom_event_index"]
    if gpu_oom != run["oom"]:
        failures.append(f"{rid}: GPU oom={gpu_oom}, PyTorch oom={run['oom']}")
    if not (a["oom"] and a["oom_event_index"]):
        failures.append(f"{rid}: GPU and simulation differ: {a}")
    if r["stamp_errors"]:
        failures.append(f"{rid}: {r['stamp_errors']} stamp errors")
    entry = "yes" if a["oom_event_index"] else "NO"
    if gpu_oom:
        entry += f" ({r['oom_event_index']})"
    w(f"| {rid} | {src} | {gib(allowed(run))} | {'OOM' if run['oom'] else 'fits'} | "
      f"{'OOM' if gpu_oom else 'fits'} | {'OOM' if sim['oom'] else 'fits'} | {entry} | "
      f"{gib(r['peak_allocated_bytes'])} | {'yes' if a['peak_allocated'] else 'NO'} | "
      f"{'yes' if a['peak_reserved'] else 'no'} | {r['stamp_errors']} | {r['wall_ms']:.0f} |")
w(f"\n{n_verdict} of {n_capped} capped runs: the GPU's verdict is PyTorch's; {n_entry} of {n_capped}: the OOM at the simulation's trace entry (or neither ran out).\n")

# ---- full traces --------------------------------------------------------------------------
w("### Full traces without a limit: peaks on the GPU, in the simulation, and PyTorch's\n")
w("| run | entries | peak allocated GPU | = sim | = PyTorch | peak reserved GPU | = sim | = PyTorch | blocks stamped | stamp errors | GPU ms |")
w("|---|---|---|---|---|---|---|---|---|---|---|")
for run in runs:
    rid = run["id"]
    if not rid.endswith("__full") or not run.get("snapshot"):
        continue
    v, err, took = replay(rid + "__nolimit", [snap(run["snapshot"])])
    if v is None:
        failures.append(f"{rid}: {err}")
        w(f"| {rid} | error: {err} | | | | | | | | | |")
        continue
    a = v["agrees_with_simulation"]
    if not a["peak_allocated"] or v["stamp_errors"]:
        failures.append(f"{rid}: peak allocated {a['peak_allocated']}, stamp errors {v['stamp_errors']}")
    w(f"| {rid} | {v['entries_total']} | {gib(v['peak_allocated_bytes'])} | {'yes' if a['peak_allocated'] else 'NO'} | "
      f"{'yes' if v['peak_allocated_bytes'] == run['peak_allocated_bytes'] else 'no'} | "
      f"{gib(v['peak_reserved_bytes'])} | {'yes' if a['peak_reserved'] else 'no'} | "
      f"{'yes' if v['peak_reserved_bytes'] == run['peak_reserved_bytes'] else 'no'} | "
      f"{v['blocks_stamped']} | {v['stamp_errors']} | {v['wall_ms']:.0f} |")

# ---- long400, recorded timing, emulated card -------------------------------------------------
w("\n### Speed and the other modes\n")
w("| what | result |")
w("|---|---|")
long = by_id.get("gpt__baseline__long400")
if long and os.path.exists(snap(long["snapshot"])):
    v, err, took = replay("long400", [snap(long["snapshot"]), "--capacity", str(allowed(long))])
    if v is None:
        failures.append(f"long400: {err}")
        w(f"| long400 flat out | error: {err} |")
    else:
        share = v["wall_ms"] / v["recorded_span_ms"] * 100
        ok = share <= 5 and v["stamp_errors"] == 0 and v["agrees_with_simulation"]["peak_allocated"]
        if not ok:
            failures.append(f"long400: {share:.1f} % of its span, stamp errors {v['stamp_errors']}")
        c = v["cuda_calls"]
        w(f"| long400 ({v['entries_total']} entries) flat out | {v['wall_ms']:.0f} ms on the GPU = {share:.2f} % of the recorded {v['recorded_span_ms'] / 1000:.1f} s "
          f"(whole command {took:.1f} s with reading the 82 MB pickle and the simulation: {v['simulation']['wall_ms']:.0f} ms); "
          f"{v['blocks_stamped']} blocks stamped, {v['stamp_errors']} stamp errors; cuMemAlloc {c['alloc']['count']} ({c['alloc']['ms']:.1f} ms) |")
# A full trace with recorded timing, and an OOM on an emulated card instead of a limit: the
# first workload's baseline (gpt in the shared corpus).
fulls = [r for r in runs if r["id"].endswith("__baseline__full") and r.get("snapshot")]
caps = [r for r in runs if "__baseline__cap" in r["id"] and r.get("snapshot") and r["oom"]]
if fulls:
    full = fulls[0]
    v, err, took = replay("recorded_timing", [snap(full["snapshot"]), "--timing", "recorded"])
    if v is None:
        failures.append(f"recorded timing: {err}")
    else:
        w(f"| {full['id']} with `--timing recorded` | {v['wall_ms']:.0f} ms on the GPU for a recorded span of {v['recorded_span_ms']:.0f} ms "
          f"({v['spun_ms']:.0f} ms spun); peaks as simulated: {v['agrees_with_simulation']['peak_allocated']} |")
if caps:
    cap = caps[0]
    # A card 1 GiB larger than the limit PyTorch hit: the context and the driver's own use
    # take part of it, as they would on that card.
    card = int(cap["cap_bytes"] + 2**30)
    v, err, took = replay("emulated_card", [snap(cap["snapshot"]), "--device-memory", str(card)])
    label = f"{cap['id']} on an emulated {gib(card)} card (no limit: the driver refuses)"
    if v is None:
        failures.append(f"emulated card: {err}")
        w(f"| {label} | error: {err} |")
    else:
        e = v["emulation"]
        if not (v["agrees_with_simulation"]["oom"] and v["agrees_with_simulation"]["oom_event_index"]):
            failures.append(f"emulated card: GPU and simulation differ: {v['agrees_with_simulation']}")
        w(f"| {label} | "
          f"{'OOM at entry ' + str(v['oom_event_index']) if v['oom'] else 'fits'} (simulation: "
          f"{'OOM at entry ' + str(v['simulation']['oom_event_index']) if v['simulation']['oom'] else 'fits'}); "
          f"{gib(e['ballast_bytes'])} ballast, {gib(e['free_after_bytes'])} left free, {gib(e['in_use_before_bytes'])} in use before |")

gpu = first["gpu"] if first else {}
print(f"## GPU runner against ground truth — {gpu.get('name', '?')}, driver CUDA {gpu.get('driver_cuda_version', '?')}, {time.strftime('%Y-%m-%d')}\n")
print("\n".join(lines))
print()
if failures:
    print("**Failed checks:**\n")
    for f in failures:
        print(f"- {f}")
    sys.exit(1)
print("All checks passed.")
PY
