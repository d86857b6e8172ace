#!/usr/bin/env bash
# The OpenAI-compatible HTTP path vs the SIFT/1 ZeroMQ path of one daemon, per request: the
# section "OpenAI HTTP path vs ZeroMQ" of docs/results/daemon-load.md.
#
# usage: tools/load_test/openai_overhead.sh [--build DIR] [--requests N] [--out FILE]
#
# Starts (one after the other, loopback, ephemeral ports) build/bin/siftd on the model with
# --openai, and build/bin/sift-echo-daemon --openai (the same front end and HTTP port with a
# trivial backend, no model), and runs build/bin/sift-openai-bench against each: whole answers
# and streamed, pipeline `full` (echo: `echo`), raw prompt "Name a colour.", max_tokens 2,
# N requests per path (default 200). Writes the Markdown section to FILE (default: stdout).
# For numbers that go into the document, hold the measurement lock:
#   flock /tmp/sift-measure.lock tools/load_test/openai_overhead.sh --out /tmp/openai.md
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
REQUESTS=200
OUT=/dev/stdout
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--build DIR] [--requests N] [--out FILE]" >&2; exit 2 ;;
  esac
done
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
for f in "$BUILD/bin/siftd" "$BUILD/bin/sift-echo-daemon" "$BUILD/bin/sift-openai-bench" "$MODEL"; do
  [[ -e "$f" ]] || { echo "openai_overhead: missing $f" >&2; exit 77; }
done

TMP="$(mktemp -d)"
PID=""
stop_daemon() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID" || true
  fi
  PID=""
}
trap 'stop_daemon; rm -rf "$TMP"' EXIT

start_daemon() {
  rm -f "$TMP/ready.json"
  "$@" --ready-file "$TMP/ready.json" 2> "$TMP/daemon.log" &
  PID=$!
  for _ in $(seq 1 600); do
    [[ -s "$TMP/ready.json" ]] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "openai_overhead: the daemon did not become ready" >&2
  exit 1
}

SECTION="$TMP/section.md"
BENCH=("$BUILD/bin/sift-openai-bench" --ready-file "$TMP/ready.json" --requests "$REQUESTS"
       --prompt "Name a colour." --max-tokens 2 --out "$SECTION")
SIFTD=("$BUILD/bin/siftd" --model "$MODEL" --pipelines "$ROOT/pipelines" --plugins "$BUILD/plugins"
       --staging-dir "$TMP" --bind 'tcp://127.0.0.1:*' --http off --openai 127.0.0.1:0
       --rescan-ms 0 --workers 1 --threads 2 --log-level warn)
ECHO=("$BUILD/bin/sift-echo-daemon" --bind 'tcp://127.0.0.1:*' --openai 127.0.0.1:0)
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
# The SIMD and matrix extensions that decide the kernels (the rest of the flags do not matter).
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' |
         grep -E '^(sse4_2|avx|avx2|fma|f16c|avx512.*|amx.*|avx_vnni)$' | xargs)"
# Whether the measurement lock is held (by the caller, as it should be): it cannot be taken.
LOCK="not held"
flock -n /tmp/sift-measure.lock true 2>/dev/null || LOCK="held"
# Other processes using the CPU now (top's second sample, over 1 s): "3 cc1plus, 1 python3".
others() {
  top -b -n 2 -d 1 -w 200 | awk '
    /^top -/ { n++ } n == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 >= 10 && $12 != "top" { c[$12]++ }
    END { s = ""; for (k in c) s = s (s ? ", " : "") c[k] " " k; print s ? s : "none" }'
}
# A command line as the document shows it: repository-relative paths, TMP for the scratch folder.
show() {
  local out="" a
  for a in "$@"; do
    [[ "$a" == "$MODEL" ]] && a="models/$(basename "$MODEL")"
    a="${a#"$ROOT"/}"
    a="${a/#"$TMP"/TMP}"
    out+="$a "
  done
  echo "${out% }"
}
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
OTHERS_BEFORE="$(others)"
START="$(date -u +%H:%M)"
cat > "$SECTION" <<HEAD
## OpenAI HTTP path vs ZeroMQ

Regenerate: \`tools/load_test/openai_overhead.sh\` (after building \`siftd\`,
\`sift-echo-daemon\`, \`sift-openai-bench\` and the plugins; run under
\`flock /tmp/sift-measure.lock\`). \`build/bin/sift-openai-bench\` sends the same request over
both front ends of one daemon (\`--openai\` beside the ZeroMQ port; docs/openai.md): one client
per path, one request at a time, alternating between the paths; HTTP on one keep-alive
connection to \`POST /v1/completions\`, ZeroMQ a DEALER sending \`generate\`. "Client round trip"
is send to the last byte of the answer; "daemon e2e" is the daemon's own arrival-to-final clock
(\`stats.e2e_ms\` / \`usage.sift.e2e_ms\`), so "round trip - daemon e2e" is what each transport
and its front end add outside that clock.

- Command: \`$(basename "$0") --requests $REQUESTS\` (tools/load_test/), measurement lock
  ${LOCK}; $(date -u +%Y-%m-%d), from $START UTC.
- Machine: $(nproc) cores, $CPU; CPU flags: $FLAGS.
- Daemons: \`$(show "${SIFTD[@]}")\`, then \`$(show "${ECHO[@]}")\`.
- Bench: \`sift-openai-bench --requests $REQUESTS --prompt "Name a colour." --max-tokens 2\`
  with \`--pipeline full\` / \`echo\`, whole and \`--stream\`.

HEAD

start_daemon "${SIFTD[@]}"
"${BENCH[@]}" --pipeline full --label "siftd with the model, pipeline full, whole answers"
"${BENCH[@]}" --pipeline full --stream --label "siftd with the model, pipeline full, streamed"
stop_daemon

start_daemon "${ECHO[@]}"
"${BENCH[@]}" --pipeline echo --label "The front ends alone: sift-echo-daemon (no model), whole answers"
"${BENCH[@]}" --pipeline echo --stream \
  --label "The front ends alone: sift-echo-daemon (no model), streamed"
stop_daemon

cat >> "$SECTION" <<TAIL
Load on the machine: load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after;
other processes over 10% of a core (top, 1 s sample) before: $OTHERS_BEFORE; after: $(others).

TAIL
cat >> "$SECTION" <<'TAIL'
Reading: the "round trip - daemon e2e" rows are the cost of each transport and front end outside
the daemon's request clock (HTTP: reading the request, writing the answer, the hop from the
worker through the front end's I/O thread to the HTTP thread; ZeroMQ: the same through the
DEALER/ROUTER sockets and the I/O thread). Parsing and admission are inside e2e on both paths;
the HTTP path's extra step there (translating the OpenAI body into a SIFT/1 request) shows in
the echo runs' e2e. With the model, the client round trips of the two paths differ by the
model's run-to-run variation (its own clock, "daemon e2e", moves by as much), not by the
transport; the p99 columns on a shared machine mostly measure scheduling delays.
TAIL
cat "$SECTION" > "$OUT"
