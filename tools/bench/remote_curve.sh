#!/usr/bin/env bash
# What CURVE costs a remote stage: the TTFT of a 2K-token request whose prefill stage runs on a
# `siftd --worker`, over plain TCP on loopback (the baseline), over CURVE on loopback, and over
# CURVE across two network namespaces joined by a veth pair (another "host"), next to the same
# pipeline all in process. Writes docs/results/remote-curve.md and docs/results/remote-curve/.
#
# usage: sudo bash tools/bench/remote_curve.sh [--model GGUF] [--threads 2] [--lengths 2048]
#        [--repeats 5] [--out DIR] [--render-only]
# (--render-only: rewrite the document from the raw results of the last run, measuring nothing)
#
# siftd runs in namespace A (clients reach it over an ipc:// socket), a plain worker on A's
# loopback, a CURVE worker on A's loopback and a CURVE worker in namespace B (10.213.0.2). Each
# worker and siftd get --threads; only one of them computes at a time (sift-bench sends one
# request at a time, configs interleaved). The remote stage is prefill_full: the worker
# prefills and sends the whole KV cache back (about 23 KB per token for SmolLM2), so the hop
# moves ~48 MB at 2K tokens and TTFT includes its encryption. Needs root (ip netns).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=2
LENGTHS=2048
REPEATS=5
OUT="$ROOT/docs/results"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
RENDER_ONLY=0
while (($#)); do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --lengths) LENGTHS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --render-only) RENDER_ONLY=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "remote_curve: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
log() { printf '[remote-curve] %s\n' "$*" >&2; }
RAW="$OUT/remote-curve"
render() {
python3 - "$RAW/speed.json" "$OUT/remote-curve.md" "$THREADS" <<'EOF'
import json, statistics, subprocess, sys
raw, out, threads = sys.argv[1], sys.argv[2], sys.argv[3]
doc = json.load(open(raw))
rows = [r for r in doc["rows"] if r["ok"]]
cells = {}
for r in rows:
    cells.setdefault((r["config"], r["length"]), []).append(r)
flags = " ".join(sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags")
                         for f in line.split()[2:] if f in {"avx2", "avx512f", "avx512_bf16",
                                                           "amx_bf16", "fma", "f16c"}}))
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
lines = ["# A remote stage over CURVE: what the encryption costs TTFT", "",
         "Produced by `sudo bash tools/bench/remote_curve.sh` "
         f"(raw: [remote-curve/speed.json](remote-curve/speed.json)).", "",
         f"- Machine: {cpu}, {doc['meta'].get('cores', '?')} cores, CPU flags: {flags}; "
         f"load average at the start: {doc['meta'].get('loadavg', '?')}.",
         f"- Model: `{doc['meta']['model']}`, bf16, `--threads {threads}` for siftd and each worker "
         "(one computes at a time). Commit " + doc["meta"].get("commit", "?") + ".",
         "- Prompts: sift-bench's needle task at 50 % depth "
         "(haystack: sift-bench's default, `tools/bench/corpus/world-english-bible`), 8 generated tokens, "
         f"{doc['meta']['settings']['repeats']} repeats per cell, configs interleaved; TTFT is "
         "siftd's own (arrival to first token).",
         "- Pipelines: `prefill_full -> decode_local`, the prefill stage in process (`full`), on a "
         "`siftd --worker` on loopback over plain TCP (`loopback_plain`, the baseline), on loopback "
         "over CURVE (`loopback_curve`), and in another network namespace over a veth pair over "
         "CURVE (`veth_curve`). The worker sends the whole KV cache back.", "",
         "| length | config | TTFT median ms | min | max | vs loopback_plain |", "|---|---|---|---|---|---|"]
for length in sorted({k[1] for k in cells}):
    base = statistics.median(r["ttft_ms"] for r in cells.get(("loopback_plain", length), [{"ttft_ms": float("nan")}]))
    for config in ["full", "loopback_plain", "loopback_curve", "veth_curve"]:
        t = [r["ttft_ms"] for r in cells.get((config, length), [])]
        if not t:
            continue
        m = statistics.median(t)
        lines.append(f"| {length} | {config} | {m:.0f} | {min(t):.0f} | {max(t):.0f} | "
                     f"{(m / base - 1) * 100:+.1f} % |")
lines += ["", "Target (issue 27): a remote stage over CURVE adds no more than 5 % to a 2K-token "
          "request's TTFT against the same stage on loopback without CURVE.", ""]
for length in sorted({k[1] for k in cells}):
    base = [r["ttft_ms"] for r in cells.get(("loopback_plain", length), [])]
    if not base:
        continue
    b = statistics.median(base)
    spread = (max(base) - min(base)) / b * 100
    for config in ["loopback_curve", "veth_curve"]:
        t = [r["ttft_ms"] for r in cells.get((config, length), [])]
        if t:
            d = (statistics.median(t) / b - 1) * 100
            lines.append(f"- {length} tokens, {config}: {d:+.1f} % against loopback_plain: "
                         f"{'met' if d <= 5 else 'NOT met'} (loopback_plain's own repeats spread "
                         f"over {spread:.0f} % of its median, so a difference smaller than that "
                         "is noise).")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
}
if ((RENDER_ONLY)); then
  render
  exit 0
fi
((EUID == 0)) || { log "needs root (network namespaces)"; exit 1; }
for b in siftd sift-bench; do
  [[ -x "$BUILD/bin/$b" ]] || { log "$BUILD/bin/$b is missing: cmake --build $BUILD"; exit 1; }
done

TMP="$(mktemp -d)"
NSA="sift-bench-a-$$" NSB="sift-bench-b-$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

ip netns add "$NSA"
ip netns add "$NSB"
ip link add "ba$$" type veth peer name "bb$$"
ip link set "ba$$" netns "$NSA"
ip link set "bb$$" netns "$NSB"
ip -n "$NSA" addr add 10.213.0.1/24 dev "ba$$"
ip -n "$NSB" addr add 10.213.0.2/24 dev "bb$$"
for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
ip -n "$NSA" link set "ba$$" up
ip -n "$NSB" link set "bb$$" up

SIFTD="$BUILD/bin/siftd"
"$SIFTD" --make-curve-keys "$TMP/worker" >/dev/null
"$SIFTD" --make-curve-keys "$TMP/hop" >/dev/null
grep -v '^#' "$TMP/hop.pub" > "$TMP/daemons.pub"
WKEY="$(grep -v '^#' "$TMP/worker.pub")"
mkdir -p "$TMP/pipelines"
remote() {  # NAME ENDPOINT [WORKER_KEY]
  {
    echo "name = \"$1\""
    echo "[[stage]]"
    echo "plugin = \"prefill_full\""
    echo "endpoint = \"$2\""
    [[ -n "${3:-}" ]] && echo "worker_key = \"$3\""
    echo "[[stage]]"
    echo "plugin = \"decode_local\""
  } > "$TMP/pipelines/$1.toml"
}
remote loopback_plain tcp://127.0.0.1:7811
remote loopback_curve tcp://127.0.0.1:7812 "$WKEY"
remote veth_curve tcp://10.213.0.2:7813 "$WKEY"
cp "$ROOT/pipelines/full.toml" "$TMP/pipelines/"

worker() {  # NAMESPACE ENDPOINT [curve]
  local args=(--worker --bind "$2" --model "$MODEL" --plugins "$BUILD/plugins" --threads "$THREADS")
  [[ "${3:-}" == curve ]] && args+=(--curve-secret-key "$TMP/worker.key"
                                    --curve-client-keys "$TMP/daemons.pub")
  ip netns exec "$1" "$SIFTD" "${args[@]}" 2> "$TMP/worker-${2##*:}.log" &
  PIDS+=($!)
}
worker "$NSA" tcp://127.0.0.1:7811
worker "$NSA" tcp://127.0.0.1:7812 curve
worker "$NSB" tcp://10.213.0.2:7813 curve
ip netns exec "$NSA" "$SIFTD" --model "$MODEL" --plugins "$BUILD/plugins" \
  --pipelines "$TMP/pipelines" --bind "ipc://$TMP/siftd.sock" --http off --threads "$THREADS" \
  --allow-ignore-eos true \
  --hop-curve-secret-key "$TMP/hop.key" --ready-file "$TMP/ready.json" --log-format json \
  2> "$TMP/siftd.log" &
PIDS+=($!)
ready_workers() { grep -l worker_ready "$TMP"/worker-*.log 2>/dev/null | wc -l; }
for _ in $(seq 600); do
  [[ -s "$TMP/ready.json" ]] && (($(ready_workers) == 3)) && break
  sleep 0.2
done
if [[ ! -s "$TMP/ready.json" ]] || (($(ready_workers) != 3)); then
  log "siftd or a worker did not start:"
  tail -n 3 "$TMP/siftd.log" "$TMP"/worker-*.log >&2
  exit 1
fi

mkdir -p "$RAW"
log "sift-bench speed: full, loopback_plain, loopback_curve, veth_curve at $LENGTHS tokens, $REPEATS repeats"
flock "$LOCK" "$BUILD/bin/sift-bench" speed --endpoint "ipc://$TMP/siftd.sock" --model "$MODEL" \
  --pipelines full,loopback_plain,loopback_curve,veth_curve --lengths "$LENGTHS" \
  --repeats "$REPEATS" --max-tokens 8 --out "$RAW" >&2
render
