#!/usr/bin/env bash
# Server benchmark: a release `oomlens serve` on its embedded PostgreSQL, driven with curl.
# Measures, on the large corpus snapshot: upload (stream + reader check + store), time until
# the analysis is stored, an idempotent re-upload, what-if (computed, then stored); and the
# server's peak RSS while a large junk upload (1 GiB by default) streams through it, against the
# upload's size — the server must not hold the upload in memory.
#
#   bench/server.sh [SNAPSHOT] [JUNK_MIB]
# Writes a markdown table to stdout. Needs the release binary (built here, or OOMLENS_BIN) and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:-/work/shared/corpus/large/gpt__baseline__long400.pickle.gz}
JUNK_MIB=${2:-1024}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${OOMLENS_BIN:-}" ]; then
  cargo build --release --locked -q -p oomlens
fi
BIN=${OOMLENS_BIN:-$TARGET/release/oomlens}

DIR=$(mktemp -d /tmp/oomlens-bench-XXXX)
chmod 755 "$DIR"
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
$BIN serve --addr 127.0.0.1:0 --data-dir "$DIR" --max-upload 4GiB >"$DIR/out" 2>"$DIR/log" &
PID=$!
for _ in $(seq 300); do grep -q "listening on" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
BASE=$(sed -n 's/^oomlens: listening on \([^ ]*\).*/\1/p' "$DIR/out")
TOKEN=$($BIN admin create-token --team bench --name bench --data-dir "$DIR" | tail -1)
AUTH="Authorization: Bearer $TOKEN"
# The pages sign in with an account: a user of the same team, signed in through /login.
printf 'bench-password\n' | $BIN admin create-user --team bench --email bench@example.com \
  --password-stdin --data-dir "$DIR" >/dev/null
SESSION=$(curl -sf -o /dev/null -D - -d 'email=bench@example.com&password=bench-password' "$BASE/login" \
  | sed -n 's/^set-cookie: \(oomlens_session=[^;]*\).*/\1/ip' | tr -d '\r')
hwm() { awk '/VmHWM/ {print $2}' "/proc/$PID/status"; }   # KiB
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

size=$(stat -c %s "$FILE")
hwm_start=$(hwm)
t0=$(now)
id=$(curl -sf -H "$AUTH" -H 'Content-Type: application/octet-stream' --data-binary @"$FILE" \
  "$BASE/api/v1/snapshots?name=bench" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
t1=$(now)
while :; do
  st=$(curl -sf -H "$AUTH" "$BASE/api/v1/snapshots/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$st" != pending ] && break
  sleep 0.05
done
t2=$(now)
curl -sf -o /dev/null -H "$AUTH" --data-binary @"$FILE" "$BASE/api/v1/snapshots?name=bench"
t3=$(now)
Q='{"capacity_bytes": 10737418240}'
curl -sf -o /dev/null -H "$AUTH" -H 'Content-Type: application/json' -d "$Q" "$BASE/api/v1/snapshots/$id/whatif"
t4=$(now)
curl -sf -o /dev/null -H "$AUTH" -H 'Content-Type: application/json' -d "$Q" "$BASE/api/v1/snapshots/$id/whatif"
t5=$(now)
# The post-mortem page's timeline: the whole trace, then a 1 % zoom (server time by curl).
fig="$BASE/figures/snapshots/$id/timeline.svg?width=1200"
tl_full=$(curl -sf -o "$DIR/full.svg" -w '%{time_total}' -H "$AUTH" "$fig")
tl_zoom=$(curl -sf -o "$DIR/zoom.svg" -w '%{time_total}' -H "$AUTH" "$fig&from=400000&to=409618")
tl_png=$(curl -sf -o "$DIR/full.png" -w '%{time_total}' -H "$AUTH" "$BASE/figures/snapshots/$id/timeline.png?width=1200")
mkdir -p "${FIGURES_OUT:-/tmp}" && cp "$DIR/full.png" "${FIGURES_OUT:-/tmp}/bench-timeline.png"
# The post-mortem page itself (server-side render: stored analysis, what-ifs, every chart in both
# palettes), whole trace and zoomed, as a browser with the sign-in cookie asks for it. Best of 3.
page() { best=; for _ in 1 2 3; do
  t=$(curl -sf -o "$DIR/page.html" -w '%{time_total}' -H "Cookie: $SESSION" "$1")
  best=$(awk -v a="$t" -v b="${best:-9e9}" 'BEGIN{print (a < b) ? a : b}'); done; echo "$best"; }
pg_full=$(page "$BASE/snapshots/$id")
pg_size=$(stat -c %s "$DIR/page.html")
grep -q 'data-testid="verdict"' "$DIR/page.html" || { echo "the page has no verdict" >&2; exit 1; }
pg_zoom=$(page "$BASE/snapshots/$id?from=400000&to=409618")
# A remedy overlaid on the timeline: its first view replays the remedy (then it is stored).
ov_first=$(curl -sf -o "$DIR/overlay.html" -w '%{time_total}' -H "Cookie: $SESSION" "$BASE/snapshots/$id?remedy=amp%3Dbf16")
grep -q 'data-testid="overlay"' "$DIR/overlay.html" || { echo "the page has no overlay" >&2; exit 1; }
ov_again=$(page "$BASE/snapshots/$id?remedy=amp%3Dbf16")
hwm_after_large=$(hwm)

# A large upload that is not a snapshot: streamed to disk and hashed, then refused (422).
JUNK=$DIR/junk.bin
head -c $((JUNK_MIB << 20)) /dev/zero | tr '\0' 'j' >"$JUNK"
t6=$(now)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" -H 'Content-Type: application/octet-stream' \
  -X POST -T "$JUNK" "$BASE/api/v1/snapshots?name=junk")
t7=$(now)
hwm_after_junk=$(hwm)

echo "| step | result |"
echo "|---|---:|"
echo "| upload $(basename "$FILE") ($(awk -v s=$size 'BEGIN{printf "%.1f", s/1048576}') MiB): stream, reader check, store | $(ms $t0 $t1) ms |"
echo "| … then until \`status\` is \`$st\` (worker: read + analysis + store) | $(ms $t1 $t2) ms |"
echo "| re-upload of the same bytes (same id) | $(ms $t2 $t3) ms |"
echo "| what-if, standard set of 9 remedies at 10 GiB (computed) | $(ms $t3 $t4) ms |"
echo "| the same what-if again (stored answer) | $(ms $t4 $t5) ms |"
echo "| timeline SVG, whole trace, 1200 px ($(stat -c %s "$DIR/full.svg") bytes) | $(awk -v t=$tl_full 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| timeline SVG zoomed to 1 % of the trace | $(awk -v t=$tl_zoom 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| timeline PNG, whole trace (2× scale) | $(awk -v t=$tl_png 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| post-mortem page, whole trace ($pg_size bytes of HTML) | $(awk -v t=$pg_full 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| post-mortem page zoomed to 1 % of the trace (with the tables at the range's peak: the upload read and replayed) | $(awk -v t=$pg_zoom 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| post-mortem page with the amp=bf16 remedy overlaid, first view (remedy replayed, series stored) | $(awk -v t=$ov_first 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| the same, again (stored series) | $(awk -v t=$ov_again 'BEGIN{printf "%.0f", t*1000}') ms |"
echo "| server peak RSS at start | $((hwm_start / 1024)) MiB |"
echo "| server peak RSS after the above | $((hwm_after_large / 1024)) MiB |"
echo "| upload of ${JUNK_MIB} MiB that is no snapshot (HTTP $code) | $(ms $t6 $t7) ms |"
echo "| server peak RSS after it | $((hwm_after_junk / 1024)) MiB |"
