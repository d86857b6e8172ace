#!/usr/bin/env bash
# usage: bash tools/bench/gpu_side_by_side.sh [--help]
#
# sift and llama.cpp side by side on one GPU, in one run: what docs/results/gpu.md reports.
# Runs, in this order, on a machine where sift is built with CUDA (and, optionally, llama.cpp's
# llama-bench with CUDA):
#   1. sift-engine-bench --device cuda, bf16: prefill 2K / 8K / 32K, decode at 2K and 8K context,
#      and batched decode (continuous batching's step) at 1, 8 and 32 rows of a 2K prompt each
#      (--n-ctx 33000: SmolLM2's trained context is 8K; past it RoPE extrapolates, so the
#      timings mean what llama-bench's pp32768 means and the outputs mean nothing)
#      (decode through the decode pool's CUDA graphs: --decode-pool auto, docs/engine.md)
#   2. eager: step 1's decode and batched decode with --decode-pool off (each step's ~2,500
#      operators launched one by one, as before the graphs): their A/B
#   3. the same as 1 with SIFT_SDPA_CUDNN=1 (LibTorch's cuDNN attention backend left on): the A/B of
#      sift's default, which switches it off (plugin_api/src/runtime/attention.cc)
#   4. every pipeline's TTFT through siftd --device cuda (sift-bench speed --spawn), at 8K and
#      32K, one siftd per pipeline
#   5. llama-bench on the same GGUF: -p 2048,8192,32768 -n 0, and tg with 2K / 8K already in the
#      cache (-d), -fa 1 -ngl 99 (waits up to LLAMA_WAIT_S for a llama-bench still being built)
#   6. step 1's decode again once nothing else runs (a build may have shared the host's CPUs with
#      steps 1-4; launch-bound decode is sensitive to that)
#   7. streams: N concurrent streaming OpenAI clients (tools/bench/serve_bench.py; ~512-token
#      prompts, 128 generated tokens, 2 requests per client) against siftd --device cuda (pipeline
#      full, batching on) and against llama-server -ngl 99 -fa on --parallel N (N x 1024 context),
#      a fresh server per level, N in SIFT_STREAMS (1,8,32): aggregate tok/s, TTFT, ITL
# Every step has a time limit and a failed step does not stop the others. Results go to $OUT
# (default bench-out/gpu): engine.json, engine-eager.json, engine-cudnn.json, engine-quiet.json, speed.csv,
# llama-bench.json, llama-bench-depth.json, streams.jsonl, gpu.log; tools/bench/gpu_summary.py turns them into
# docs/results/gpu/summary.json.
#
# Environment: SIFT_BIN (build/bin), SIFT_MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf),
# SIFT_HAYSTACK (../shared/data/pg_essays when there), LLAMA_BENCH (path; unset: step 4 skipped),
# LLAMA_WAIT_S (300), LLAMA_SERVER (path; unset: step 6 runs siftd alone), SIFT_STREAMS (1,8,32),
# SIFT_PIPELINES (all eleven), SIFT_LENGTHS (8192,32768), SIFT_REPEATS (2),
# SIFT_STEPS (engine eager cudnn ttft llama quiet streams), SIFT_DEADLINE (epoch seconds by which to stop),
# SIFT_BATCH_ROWS (1,8,32; "" = none), SIFT_BATCH_CONTEXT (2048);
# for a dry run on a CPU: SIFT_DEVICE (cuda), SIFT_ENGINE_LENGTHS (2048,8192,32768),
# SIFT_ENGINE_CONTEXTS (2048,8192).
set -uo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
[[ $# -eq 0 ]] || { echo "gpu_side_by_side.sh: error: no arguments expected (see --help)" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${SIFT_BIN:-$ROOT/build/bin}"
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
HAY="${SIFT_HAYSTACK:-$ROOT/../shared/data/pg_essays}"
[[ -n "${SIFT_HAYSTACK:-}" || -d "$HAY" ]] || HAY="$ROOT/tools/bench/corpus/world-english-bible"
OUT="${OUT:-$ROOT/bench-out/gpu}"
PIPELINES="${SIFT_PIPELINES:-full recent streamingllm snapkv h2o pyramidkv chunkkv chunkkv_reuse gemfilter ilre spts}"
LENGTHS="${SIFT_LENGTHS:-8192,32768}"
REPEATS="${SIFT_REPEATS:-2}"
STEPS="${SIFT_STEPS:-engine eager cudnn ttft llama quiet streams}"
STREAMS="${SIFT_STREAMS:-1,8,32}"
STREAM_SERVERS="${SIFT_STREAM_SERVERS:-siftd llama}"
DEVICE="${SIFT_DEVICE:-cuda}"
ENGINE_LENGTHS="${SIFT_ENGINE_LENGTHS:-2048,8192,32768}"
ENGINE_CONTEXTS="${SIFT_ENGINE_CONTEXTS:-2048,8192}"
BATCH_ROWS="${SIFT_BATCH_ROWS-1,8,32}"
BATCH_CONTEXT="${SIFT_BATCH_CONTEXT:-2048}"
NCTX=33000
DEADLINE="${SIFT_DEADLINE:-$(($(date +%s) + 3600))}"
mkdir -p "$OUT"
T0=$(date +%s)
log() { printf '[gpu %4ss] %s\n' "$(($(date +%s) - T0))" "$*" | tee -a "$OUT/gpu.log"; }
left() { echo $((DEADLINE - $(date +%s))); }
# cap S: S seconds, or what is left before the deadline (less a margin), whichever is smaller.
cap() { local l=$(($(left) - 10)); ((l < $1)) && echo "$l" || echo "$1"; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }

for f in "$B/siftd" "$B/sift-bench" "$B/sift-engine-bench" "$MODEL"; do
  [[ -e "$f" ]] || { log "FATAL: $f missing"; exit 1; }
done
log "model $MODEL; bin $B; steps: $STEPS; deadline in $(left) s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/gpu.log"
lscpu | grep -E '^Model name|^CPU\(s\)' | tee -a "$OUT/gpu.log"

engine() {  # json-name lengths contexts batch-rows [env...]; POOL=off: --decode-pool off
  local name=$1 lengths=$2 contexts=$3 rows=$4
  shift 4
  ((($(left)) > 40)) || { log "$name: no time left"; return 0; }
  log "sift-engine-bench --device $DEVICE bf16 lengths $lengths decode at $contexts batch rows '$rows' decode pool ${POOL:-auto} $*"
  env "$@" timeout "$(cap 180)" "$B/sift-engine-bench" "$MODEL" --device "$DEVICE" --dtypes bf16 \
    --lengths "$lengths" --decode-contexts "$contexts" --decode-tokens 64 --n-ctx "$NCTX" \
    --batch-rows "$rows" --batch-context "$BATCH_CONTEXT" --decode-pool "${POOL:-auto}" \
    --no-machine --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  log "  rc=$?"
  grep -E '^\[bench\]|^\| [0-9]' "$OUT/$name.txt" | tee -a "$OUT/gpu.log"
}

if has_step engine; then engine engine "$ENGINE_LENGTHS" "$ENGINE_CONTEXTS" "$BATCH_ROWS"; fi
if has_step eager; then POOL=off engine engine-eager "${ENGINE_LENGTHS%%,*}" "$ENGINE_CONTEXTS" "$BATCH_ROWS"; fi
if has_step cudnn; then engine engine-cudnn "${ENGINE_LENGTHS%,*}" "$ENGINE_CONTEXTS" "" SIFT_SDPA_CUDNN=1; fi

if has_step ttft; then
  proxy="${MODEL%.gguf}.spts.bin"
  if [[ " $PIPELINES " == *" spts "* && ! -s "$proxy" ]]; then
    log "spts: calibrating $proxy (sift-spts-calibrate, CPU)"
    timeout "$(cap 200)" "$B/sift-spts-calibrate" --model "$MODEL" --text "$HAY" --out "$proxy.part" \
      > "$OUT/calibrate.txt" 2>&1 && mv "$proxy.part" "$proxy"
    log "  rc=$? $(tail -1 "$OUT/calibrate.txt")"
  fi
  rm -f "$OUT/speed.csv"
  for p in $PIPELINES; do
    (($(left) > 60)) || { log "ttft: no time left for $p"; continue; }
    log "sift-bench speed $p at $LENGTHS on $DEVICE (repeats $REPEATS, --n-ctx $NCTX)"
    dir="$OUT/speed-$p"
    rm -rf "$dir"
    timeout "$(cap 240)" "$B/sift-bench" speed --spawn --pipelines "$p" --lengths "$LENGTHS" \
      --repeats "$REPEATS" --max-tokens 8 --model "$MODEL" --haystack "$HAY" --device "$DEVICE" \
      --siftd-arg=--n-ctx "--siftd-arg=$NCTX" --out "$dir" > "$dir.txt" 2>&1
    rc=$?
    if [[ -f "$dir/speed.csv" ]]; then
      [[ -s "$OUT/speed.csv" ]] || head -1 "$dir/speed.csv" > "$OUT/speed.csv"
      tail -n +2 "$dir/speed.csv" >> "$OUT/speed.csv"
    fi
    log "  rc=$rc $(grep -v '^\s*$' "$dir.txt" | tail -3 | tr '\n' ' ' | cut -c1-400)"
  done
fi

if has_step llama && [[ -n "${LLAMA_BENCH:-}" ]]; then
  wait_s="${LLAMA_WAIT_S:-300}"
  while [[ ! -x "$LLAMA_BENCH" ]] && ((wait_s > 0 && $(left) > 90)); do sleep 5; wait_s=$((wait_s - 5)); done
  if [[ -x "$LLAMA_BENCH" ]]; then
    log "llama-bench -p 2048,8192,32768 -n 0 -ngl 99 -fa 1 -r 3"
    timeout "$(cap 200)" "$LLAMA_BENCH" -m "$MODEL" -p 2048,8192,32768 -n 0 -ngl 99 -fa 1 -r 3 \
      -o json > "$OUT/llama-bench.json" 2> "$OUT/llama-bench.err"
    log "  rc=$?"
    log "llama-bench -p 0 -n 64 -d 2048,8192 -ngl 99 -fa 1 -r 3 (decode with a filled cache)"
    timeout "$(cap 200)" "$LLAMA_BENCH" -m "$MODEL" -p 0 -n 64 -d 2048,8192 -ngl 99 -fa 1 -r 3 \
      -o json > "$OUT/llama-bench-depth.json" 2>> "$OUT/llama-bench.err"
    log "  rc=$?"
    python3 - "$OUT/llama-bench.json" "$OUT/llama-bench-depth.json" <<'PY' 2>&1 | tee -a "$OUT/gpu.log"
import json, sys
for path in sys.argv[1:]:
    try:
        rows = json.load(open(path))
    except Exception as e:
        print(f"{path}: {e}"); continue
    for r in rows:
        kind = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
        if r.get("n_depth"): kind += f" @ d{r['n_depth']}"
        print(f"llama {kind:14} {r.get('avg_ts', 0):10.1f} tok/s ({r.get('avg_ns', 0) / 1e6:.2f} ms)")
PY
  else
    log "llama: $LLAMA_BENCH not there in time: skipped"
  fi
fi

if has_step quiet; then engine engine-quiet "${ENGINE_LENGTHS%%,*}" "$ENGINE_CONTEXTS" "$BATCH_ROWS"; fi
if has_step streams; then
  # One server at a time on 127.0.0.1:18702; siftd's control port 18701 answers /health.
  SPID=""
  stop_server() { [[ -n "$SPID" ]] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; SPID=""; }
  wait_up() {  # URL
    for _ in $(seq 1 900); do
      curl -sf -o /dev/null "$1" && return 0
      kill -0 "$SPID" 2>/dev/null || return 1
      sleep 0.1
    done
    return 1
  }
  rm -f "$OUT/streams.jsonl"
  IFS=, read -r -a levels <<< "$STREAMS"
  for n in "${levels[@]}"; do
    for server in $STREAM_SERVERS; do
      (($(left) > 60)) || { log "streams: no time left for $server at $n"; continue; }
      if [[ $server == siftd ]]; then
        "$B/siftd" --model "$MODEL" --pipelines "$ROOT/pipelines" --plugins "$B/../plugins" \
          --device "$DEVICE" --bind tcp://127.0.0.1:18700 --http 127.0.0.1:18701 \
          --openai 127.0.0.1:18702 --allow-ignore-eos true --log-level warn \
          --openai-max-connections-per-peer 256 > "$OUT/streams-server.log" 2>&1 &
        SPID=$!; health=http://127.0.0.1:18701/health; model=full
      else
        [[ -x "${LLAMA_SERVER:-}" ]] || { log "streams: no llama-server (LLAMA_SERVER)"; continue; }
        "$LLAMA_SERVER" -m "$MODEL" -ngl 99 -fa on --parallel "$n" -c $((n * 1024)) --host 127.0.0.1 \
          --port 18702 --no-warmup > "$OUT/streams-server.log" 2>&1 &
        SPID=$!; health=http://127.0.0.1:18702/health; model=smollm2
      fi
      if ! wait_up "$health"; then
        log "streams: $server did not come up: $(tail -3 "$OUT/streams-server.log" | tr '\n' ' ')"
        stop_server; continue
      fi
      log "streams: $n clients against $server"
      timeout "$(cap 150)" python3 "$ROOT/tools/bench/serve_bench.py" --url http://127.0.0.1:18702 \
        --server "$server" --model "$model" --clients "$n" --requests 2 --prompt-tokens 512 \
        --max-tokens 128 --tokens-per-word 1.35 --warmup 2 --text "$HAY" --out "$OUT/streams.jsonl" \
        > "$OUT/streams-$server-$n.txt" 2>&1
      log "  rc=$? $(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][-1]; print({k: r.get(k) for k in ("server","clients","errors","output_tok_per_s","ttft_ms_p50","itl_ms_p50")})' "$OUT/streams.jsonl" 2>&1 | tail -1)"
      stop_server
    done
  done
fi
log "done in $(($(date +%s) - T0)) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
