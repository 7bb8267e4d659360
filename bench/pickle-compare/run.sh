#!/usr/bin/env bash
# Runs each reader on one snapshot, each as its own process under /usr/bin/time -v, REPS times,
# and prints wall seconds and peak RSS (MB) per run and the median per reader.
#   bench/pickle-compare/run.sh [FILE.pickle.gz] [REPS]
set -euo pipefail
cd "$(dirname "$0")"
file=${1:-/work/shared/corpus/large/gpt__baseline__long400.pickle.gz}
reps=${2:-3}
cargo build --release --quiet
bin=target/release/pickle-compare
mkdir -p results
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-21s %4s %8s %10s  %s\n' reader rep wall_s peak_MB output
for reader in stream tree serde-pickle serde-pickle-replace python; do
  for rep in $(seq 1 "$reps"); do
    log=results/$reader.$rep.time
    if [ "$reader" = python ]; then
      cmd=(python3 -c 'import gzip, pickle, sys; s = pickle.load(gzip.open(sys.argv[1])); print("python:", len(s["segments"]), "segments,", sum(map(len, s["device_traces"])), "trace entries")' "$file")
    else
      cmd=("$bin" "$reader" "$file")
    fi
    out=$( { /usr/bin/time -v "${cmd[@]}" 2>"$log" || echo "FAILED: $(grep -v '^\s' "$log" | head -3 | tr '\n' ' ')"; } | tail -1)
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
    printf '%-21s %4s %8s %10.1f  %s\n' "$reader" "$rep" "$wall" "$(echo "${rss:-0} / 1024" | bc -l)" "$out"
    echo "$reader $wall $rss" >> results/all.txt
  done
done
echo "medians (wall_s, peak_MB):"
for reader in stream tree serde-pickle serde-pickle-replace python; do
  grep "^$reader " results/all.txt | tail -n "$reps" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {printf "%s", a[int((NR+1)/2)]}' > results/w
  grep "^$reader " results/all.txt | tail -n "$reps" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {printf "%s", a[int((NR+1)/2)]}' > results/r
  printf '  %-21s %8s s %10.1f MB\n' "$reader" "$(cat results/w)" "$(echo "$(cat results/r) / 1024" | bc -l)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
