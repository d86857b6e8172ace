#!/usr/bin/env bash
# Daemon load test. Writes docs/results/daemon-load.md from three runs, each against a fresh
# daemon on loopback (ephemeral ports):
#   1. build/bin/siftd with the model, pipeline "recent" (prefill_full -> keep_recent ->
#      decode_local), 64 clients x 20 requests, while the keep_recent plugin is hot-swapped
#      twice (v1 -> v2 -> v1: the other build is copied beside the served file, renamed over
#      it, then SIGHUP);
#   2. the same daemon without swaps (16 x 10, three rounds), as the RSS control;
#   3. build/bin/sift-echo-daemon: the same front end with a trivial backend (no model), 32 x
#      100, to isolate the daemon's own protocol + dispatch cost;
#   4. tools/load_test/openai_overhead.sh: the OpenAI HTTP path vs the ZeroMQ path, request by
#      request, on siftd and on sift-echo-daemon (a section of its own at the end).
#
# usage: tools/load_test/run.sh [--build DIR] [--out FILE] [--quick]
#
# --quick (the test suite's smoke run): run 1 only with 8 x 3 requests, no document.
# Needs the plugins and the fixture build/tests/fixtures/plugins/v2/keep_recent.so (target
# fixture_keep_recent_v2). Exit status 0 when every check passed, 77 when an input is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
OUT="$ROOT/docs/results/daemon-load.md"
QUICK=0
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --quick) QUICK=1; OUT=""; shift ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--build DIR] [--out FILE] [--quick]" >&2; exit 2 ;;
  esac
done
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
V2="$BUILD/tests/fixtures/plugins/v2/keep_recent.so"
for f in "$BUILD/bin/siftd" "$BUILD/bin/sift-load-test" "$BUILD/bin/sift-echo-daemon" "$MODEL" \
         "$V2" "$BUILD/plugins/prefill_full.so" "$BUILD/plugins/decode_local.so" \
         "$BUILD/plugins/keep_recent.so"; do
  [[ -e "$f" ]] || { echo "load test: missing $f (build the targets first); skipped" >&2; exit 77; }
done

TMP="$(mktemp -d)"
PID=""
stop_daemon() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || rc=1
  fi
  PID=""
}
trap 'stop_daemon; rm -rf "$TMP"' EXIT

mkdir -p "$TMP/plugins" "$TMP/staging"
cp "$BUILD/plugins/prefill_full.so" "$BUILD/plugins/decode_local.so" "$TMP/plugins/"
cp "$BUILD/plugins/keep_recent.so" "$TMP/keep_recent.v1.so"
cp "$V2" "$TMP/keep_recent.v2.so"

# The swap hook: each call installs the other version atomically (copy beside, rename over)
# and asks the daemon to rescan. Periodic polling is off (--rescan-ms 0), so SIGHUP does it.
cat > "$TMP/swap.sh" <<SWAP
#!/usr/bin/env bash
set -e
n=\$(cat "$TMP/swaps" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n > "$TMP/swaps"
if ((n % 2)); then v=v2; else v=v1; fi
cp "$TMP/keep_recent.\$v.so" "$TMP/plugins/.keep_recent.partial"
mv -f "$TMP/plugins/.keep_recent.partial" "$TMP/plugins/keep_recent.so"
kill -HUP "\$(cat "$TMP/pid")"
SWAP
chmod +x "$TMP/swap.sh"

# start_daemon LOG CMD...: starts a daemon that writes $TMP/ready.json, waits until it is ready.
start_daemon() {
  local log="$1"; shift
  rm -f "$TMP/ready.json"
  "$@" --ready-file "$TMP/ready.json" 2> "$log" &
  PID=$!
  echo "$PID" > "$TMP/pid"
  for _ in $(seq 1 600); do
    [[ -s "$TMP/ready.json" ]] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "daemon did not become ready" >&2
  exit 1
}
start_siftd() {
  cp "$TMP/keep_recent.v1.so" "$TMP/plugins/keep_recent.so"
  rm -f "$TMP/swaps"
  start_daemon "$TMP/siftd.log" "$BUILD/bin/siftd" --model "$MODEL" --pipelines "$ROOT/pipelines" \
    --plugins "$TMP/plugins" --staging-dir "$TMP/staging" --bind 'tcp://127.0.0.1:*' \
    --http 127.0.0.1:0 --rescan-ms 0 --workers 16 --queue-size 64 --log-level warn
}
check_log() {
  if grep -q '"level":"error"' "$1"; then
    echo "daemon logged errors:" >&2
    grep '"level":"error"' "$1" | head -5 >&2
    rc=1
  fi
}

rc=0
LOAD=("$BUILD/bin/sift-load-test" --ready-file "$TMP/ready.json" --timeout-s 900)
MODEL_LOAD=(--pipeline recent --prompt "Name a colour." --max-tokens 2)

if ((QUICK)); then
  start_siftd
  "${LOAD[@]}" "${MODEL_LOAD[@]}" --clients 8 --requests 3 --idle-pings 100 \
    --swap-hook "$TMP/swap.sh" || rc=$?
  stop_daemon
  check_log "$TMP/siftd.log"
  exit "$rc"
fi

mkdir -p "$(dirname "$OUT")"
SECTIONS="$TMP/sections.md"
ROWS="$TMP/rows.md"
: > "$SECTIONS"
: > "$ROWS"
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
cat > "$TMP/head.md" <<HEAD
# siftd under load

Regenerate: \`tools/load_test/run.sh\` (after building \`siftd\`, \`sift-load-test\`,
\`sift-echo-daemon\`, the plugins and \`fixture_keep_recent_v2\`). Every run starts a fresh daemon
on loopback with ephemeral ports; \`build/bin/sift-load-test\` drives it with one ZeroMQ DEALER
per client, each keeping one request in flight (closed loop), checks that every request gets
exactly one terminal message and nothing after it, retries retryable rejections with a new id,
and measures the daemon's RSS from /proc.

Machine: $(nproc) cores ($CPU), load average at the start $(cut -d' ' -f1-3 /proc/loadavg). Model
$(basename "$MODEL"), bf16 on CPU, \`siftd --workers 16 --queue-size 64\` (continuous batching:
up to 16 requests in flight, their decode steps batched, the hot swaps land while they run). Date: $(date -u +%Y-%m-%d).

HEAD

start_siftd
"${LOAD[@]}" "${MODEL_LOAD[@]}" --clients 64 --requests 20 --swap-hook "$TMP/swap.sh" \
  --out "$SECTIONS" --summary-row "$ROWS" \
  --label "1. siftd with the model, two plugin hot swaps during the load" || rc=$?
stop_daemon
check_log "$TMP/siftd.log"

start_siftd
"${LOAD[@]}" "${MODEL_LOAD[@]}" --clients 16 --requests 10 --rounds 3 --idle-pings 200 \
  --out "$SECTIONS" --summary-row "$ROWS" \
  --label "2. Control: the same daemon without hot swaps, three rounds (RSS)" || rc=$?
stop_daemon
check_log "$TMP/siftd.log"

start_daemon "$TMP/echo.log" "$BUILD/bin/sift-echo-daemon" --bind 'tcp://127.0.0.1:*' \
  --workers 1 --queue-size 64
"${LOAD[@]}" --pipeline echo --prompt "Name a colour." --max-tokens 2 --clients 32 \
  --requests 100 --idle-generates 1000 --out "$SECTIONS" --summary-row "$ROWS" \
  --label "3. The daemon alone: same front end, trivial echo backend (no model)" || rc=$?
stop_daemon
check_log "$TMP/echo.log"

{
  cat "$TMP/head.md"
  echo "## Summary"
  echo
  echo "| run | completed | violations | requests/s | daemon overhead p50 / p99 (ms) | one-client generate round trip p50 / p99 (ms) | idle ping p50 / p99 (ms) | RSS growth (MB) |"
  echo "|---|---|---|---|---|---|---|---|"
  cat "$ROWS"
  echo
  cat "$SECTIONS"
} > "$OUT"
cat >> "$OUT" <<'TAIL'
## Reading the numbers

- **Daemon overhead** is what siftd adds to a request besides model compute: the
  "daemon overhead per request" rows (`e2e - queue - stage time` from each final's stats:
  parsing, admission, tokenisation, dispatch to the worker, building chunks and the final) and,
  end to end, run 3, where the backend does no work, so its client round trip is protocol +
  dispatch + ZeroMQ + loopback TCP. Target: p99 < 2 ms.
- With the model, throughput is bound by the single inference worker on a 2-core machine; the
  queue wait dominates e2e by design (64 clients in run 1, 1 worker). Ping and transport tails under
  load reflect CPU contention between LibTorch's threads, the 65 client threads of the load
  tool and the I/O thread on 2 cores, not queueing in the daemon (idle pings are sub-ms).
- **RSS**: plugin libraries are never unloaded (daemon/catalog.h: a hot-swapped generation
  stays mapped), so each swap adds the loaded copy's footprint. Run 2 (no swaps) measures RSS
  after each of three identical rounds: the first round warms the allocators (new connection
  buffers, tensor shapes), later rounds add (next to) nothing, so requests leave nothing
  behind.
- Run 3's "generate round trip, one client" is the daemon's whole per-request cost seen by a
  client when nothing else runs: SIFT/1 parse, admission, queue hand-off to the worker, the
  reply hop back to the I/O thread, accepted + chunks + final over ZeroMQ and loopback TCP.
  Its concurrent rows show what 32 clients sharing one I/O thread and one worker on 2 cores
  add by queueing (Little's law: 32 in flight / throughput).
TAIL
# 4. The OpenAI-compatible HTTP path vs ZeroMQ on the same daemons (its own section, last).
"$ROOT/tools/load_test/openai_overhead.sh" --build "$BUILD" --out "$TMP/openai.md" || rc=$?
{ echo; cat "$TMP/openai.md"; } >> "$OUT"
echo "wrote $OUT" >&2
exit "$rc"
