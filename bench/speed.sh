#!/usr/bin/env bash
# Whole-program speed and memory of `oomlens analyze --json` against CPython's own unpickler on the
# same snapshot, side by side in one run (the issue's target: ≥ 5× faster, peak RSS ≤ 1.5× the
# unpacked pickle).
#
#   bench/speed.sh [SNAPSHOT.pickle.gz] [RUNS]
#
# Default file: ../shared/corpus/large/gpt__baseline__long400.pickle.gz (82 MB unpacked,
# 961,801 events). Prints a Markdown table; each figure is the median of RUNS runs (default 5),
# the two programs alternating so that machine noise hits both alike.
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-../shared/corpus/large/gpt__baseline__long400.pickle.gz}
runs=${2:-5}
[ -f "$file" ] || { echo "no such file: $file" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (Debian package: time)" >&2; exit 2; }

cargo build --release -q -p oomlens
bin=${CARGO_TARGET_DIR:-target}/release/oomlens
unpacked=$(python3 -c 'import gzip,sys; print(len(gzip.open(sys.argv[1]).read()))' "$file" 2>/dev/null \
  || wc -c <"$file")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$runs"); do
  /usr/bin/time -f '%e %M' -o "$tmp/ours.$i" "$bin" analyze "$file" --json >/dev/null
  /usr/bin/time -f '%e %M' -o "$tmp/py.$i" python3 -c \
    'import gzip,pickle,sys; pickle.load(gzip.open(sys.argv[1]))' "$file"
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ours_s=$(cat "$tmp"/ours.* | awk '{print $1}' | median)
ours_kb=$(cat "$tmp"/ours.* | awk '{print $2}' | median)
py_s=$(cat "$tmp"/py.* | awk '{print $1}' | median)
py_kb=$(cat "$tmp"/py.* | awk '{print $2}' | median)

python3 - "$file" "$unpacked" "$runs" "$ours_s" "$ours_kb" "$py_s" "$py_kb" <<'PY'
import sys, platform, subprocess, datetime
f, unpacked, runs, os_, okb, ps, pkb = sys.argv[1:]
unpacked, okb, pkb = int(unpacked), int(okb), int(pkb)
os_, ps = float(os_), float(ps)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
ncpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(f"{datetime.date.today()} · {cpu} · {ncpu} cores · Python {platform.python_version()} · median of {runs} runs")
print(f"file: {f} ({unpacked/2**20:.1f} MiB unpacked)\n")
print("| program | wall (s) | peak RSS (MiB) | RSS / unpacked |")
print("|---|---:|---:|---:|")
print(f"| `oomlens analyze --json` | {os_:.2f} | {okb/1024:.0f} | {okb*1024/unpacked:.2f}× |")
print(f"| `python3 pickle.load(gzip.open(F))` | {ps:.2f} | {pkb/1024:.0f} | {pkb*1024/unpacked:.2f}× |")
print(f"\nspeed-up: **{ps/os_:.1f}×** (target ≥ 5×); oomlens RSS / unpacked: **{okb*1024/unpacked:.2f}×** (target ≤ 1.5×)")
PY
