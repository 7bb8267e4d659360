#!/usr/bin/env bash
# Records long training traces of other models than the corpus's long400 (gpt), on the GPU
# machine, for the reader's speed check on "another large file" (bench/speed.sh).
#   bench/gpu/record_long.sh OUT_DIR
# bench/gpu/record_corpus.py is ../shared/tools/record_corpus.py (the corpus's own recorder).
set -euo pipefail
out=${1:?OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")"
run() {
  mkdir -p "$out/$1"
  python3 record_corpus.py --out "$out/$1" --case "$2" >"$out/$1.log" 2>&1 || true
  gzip -9 -f "$out/$1"/*.pickle 2>/dev/null || true
}
run hf_gpt2_long300 '{"id":"hf_gpt2__baseline__long300","workload":"hf_gpt2","remedy":"baseline","model":"hf_gpt2","batch":8,"seq":1024,"steps":300,"cap_gib":40,"max_entries":1200000}'
run resnet50_long400 '{"id":"resnet50__baseline__long400","workload":"resnet50","remedy":"baseline","model":"resnet50","batch":128,"steps":400,"cap_gib":40,"max_entries":1200000}'
ls -la "$out"/*/
