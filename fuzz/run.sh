#!/usr/bin/env bash
# Seeds the corpora from the engine's test data and runs each fuzz target for a while.
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]      (default: 200 s each, all three targets)
# Needs: rustup toolchain install nightly --profile minimal; cargo install cargo-fuzz
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-200}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(pickle snapshot oomtext allocator)
data=../engine/tests/data
mkdir -p corpus/pickle corpus/snapshot corpus/oomtext corpus/allocator
# Small snapshot files only: libFuzzer's default -max_len follows the largest seed.
for f in "$data"/corpus/snap_small_*.pickle "$data"/corpus/gpt__baseline__cap10.pickle.gz \
         "$data"/corpus/variants/*.pickle "$data"/corpus/variants/*.gz; do
  [ "$(stat -c %s "$f")" -le 12000 ] || continue
  cp -n "$f" corpus/pickle/ 2>/dev/null || true
  cp -n "$f" corpus/snapshot/ 2>/dev/null || true
done
cp -n "$data"/corpus/variants/snap_small_python.json corpus/snapshot/ 2>/dev/null || true
cp -n seeds/pickle/* corpus/pickle/ 2>/dev/null || true
cp -n seeds/pickle/* corpus/snapshot/ 2>/dev/null || true
cp -n "$data"/oom/*.txt corpus/oomtext/ 2>/dev/null || true
cp -n seeds/oomtext/* corpus/oomtext/ 2>/dev/null || true
for t in "${targets[@]}"; do
  echo "== $t: ${secs}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -jobs=1 -workers=1 -max_total_time="$secs" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 | tee "fuzz-$t.log" | grep -E '^(#[0-9]+ +(INITED|DONE)|stat::|==|SUMMARY|artifact_prefix|Test unit written)' || true
done
