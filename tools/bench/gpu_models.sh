#!/usr/bin/env bash
# usage: bash tools/bench/gpu_models.sh [--help]
#
# The second model's long-context cells on a GPU: passkey, needle and the RULER subset at 16K and
# 32K tokens on Qwen2.5-Coder-0.5B-Instruct (docs/results/models.md; the 4K/8K cells come from
# `bash tools/bench/run.sh models` on the CPU). sift-bench accuracy --in-process --device cuda:
# one shared prefill per sample, the same tasks, depths, seed and 64-token answer cap as the CPU
# run, and the configs the issue's targets name (a subset of run.sh's 30):
#   full; snapkv, streamingllm, h2o, pyramidkv, chunkkv, chunkkv_reuse at keep_ratio 0.1;
#   snapkv, gemfilter, ilre at 1024 tokens; spts.
# The work is done in rounds of one sample per (task, depth): round K writes
# $OUT/<suite>-<length>-s<K> (K = 0: <suite>-<length>), so a deadline that cuts the run short
# leaves whole rounds and a partial last one, never only the shallow depths. sift-bench rewrites
# its results after every sample, so a step stopped by its time limit keeps what it finished.
# Each step gets an equal share of the time left. Logs in $OUT/gpu-models.log.
#
# Environment: SIFT_BIN (build/bin), SIFT_MODEL (models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf;
# SPTS needs its proxies beside it: bash tools/setup.sh calibrate qwen), SIFT_HAYSTACK
# (../shared/data/pg_essays when there), OUT (bench-out/gpu-models), SIFT_DEVICE (cuda),
# SIFT_LENGTHS (16384 32768), SIFT_SUITES (passkey needle ruler), SIFT_ROUNDS (2: 10 samples per
# cell), SIFT_FIRST_ROUND (0; 1 adds round 1 to an earlier run's round 0), SIFT_CONFIG_SET
# (targets; or "smoke": full and chunkkv@0.1 only, for a dry run), SIFT_DEADLINE (epoch seconds
# by which to stop; default one hour from now). SIFT_DEVICE=cpu runs the same cells on the CPU.
set -uo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
[[ $# -eq 0 ]] || { echo "gpu_models.sh: error: no arguments expected (see --help)" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${SIFT_BIN:-$ROOT/build/bin}"
MODEL="${SIFT_MODEL:-$ROOT/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf}"
HAY="${SIFT_HAYSTACK:-$ROOT/../shared/data/pg_essays}"
[[ -n "${SIFT_HAYSTACK:-}" || -d "$HAY" ]] || HAY="$ROOT/tools/bench/corpus/world-english-bible"
OUT="${OUT:-$ROOT/bench-out/gpu-models}"
DEVICE="${SIFT_DEVICE:-cuda}"
LENGTHS="${SIFT_LENGTHS:-16384 32768}"
SUITES="${SIFT_SUITES:-passkey needle ruler}"
ROUNDS="${SIFT_ROUNDS:-2}"
FIRST_ROUND="${SIFT_FIRST_ROUND:-0}"
DEADLINE="${SIFT_DEADLINE:-$(($(date +%s) + 3600))}"
mkdir -p "$OUT"
T0=$(date +%s)
log() { printf '[models %4ss] %s\n' "$(($(date +%s) - T0))" "$*" | tee -a "$OUT/gpu-models.log"; }
left() { echo $((DEADLINE - $(date +%s))); }

for f in "$B/sift-bench" "$MODEL"; do
  [[ -e "$f" ]] || { log "FATAL: $f missing"; exit 1; }
done
[[ -s "${MODEL%.gguf}.spts.bin" ]] || log "warning: no ${MODEL%.gguf}.spts.bin: spts fails"

configs=(--config full)
case "${SIFT_CONFIG_SET:-targets}" in
  targets)
    for m in snapkv streamingllm h2o pyramidkv chunkkv chunkkv_reuse; do
      configs+=(--config "$m@0.1=$m:{\"select\":{\"keep_ratio\":0.1}}")
    done
    configs+=(--config "snapkv@1024=snapkv:{\"select\":{\"budget\":1024}}"
      --config "gemfilter@1024=gemfilter:{\"filter\":{\"topk\":1024}}"
      --config "ilre@1024=ilre:{\"filter\":{\"budget\":1024}}" --config spts) ;;
  smoke) configs+=(--config "chunkkv@0.1=chunkkv:{\"select\":{\"keep_ratio\":0.1}}") ;;
  *) log "FATAL: SIFT_CONFIG_SET must be targets or smoke"; exit 2 ;;
esac

# The same samples as run.sh models: passkey depths 10..90, needle 0..100, five RULER tasks.
suite_args() {
  case "$1" in
    passkey) echo "--tasks passkey --depths 10,30,50,70,90" ;;
    needle) echo "--tasks needle --depths 0,25,50,75,100" ;;
    ruler) echo "--tasks niah_single_2,niah_multikey_1,niah_multivalue,vt,cwe" ;;
    *) return 1 ;;
  esac
}

steps=()
for ((k = FIRST_ROUND; k < ROUNDS; k++)); do
  for suite in $SUITES; do
    suite_args "$suite" > /dev/null || { log "FATAL: unknown suite $suite"; exit 2; }
    for len in $LENGTHS; do steps+=("$k $suite $len"); done
  done
done
log "model $(basename "$MODEL") on $DEVICE; ${#steps[@]} steps; ${#configs[@]} config arguments; deadline in $(left) s"
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/gpu-models.log"
lscpu | grep -E '^Model name|^CPU\(s\)' | tee -a "$OUT/gpu-models.log"

failed=0
for ((i = 0; i < ${#steps[@]}; i++)); do
  read -r k suite len <<< "${steps[$i]}"
  share=$(( ($(left) - 10) / (${#steps[@]} - i) ))
  ((share >= 20)) || { log "$suite $len round $k: no time left"; failed=1; continue; }
  dir="$OUT/$suite-$len"
  ((k > 0)) && dir+="-s$k"
  rm -rf "$dir"
  log "$suite $len round $k (limit ${share} s) -> ${dir#"$OUT"/}"
  # shellcheck disable=SC2046  # suite_args is a word list by design
  timeout "$share" "$B/sift-bench" accuracy --in-process --device "$DEVICE" --model "$MODEL" \
    --haystack "$HAY" --seed 42 --max-tokens 64 "${configs[@]}" --lengths "$len" \
    $(suite_args "$suite") --samples 1 --first-sample "$k" --out "$dir" > "$dir.txt" 2>&1
  rc=$?
  ((rc == 0)) || failed=1
  log "  rc=$rc $(grep -c '^\[accuracy' "$dir.txt") samples; $(grep -E 'ERROR|error' "$dir.txt" | head -2 | cut -c1-300)"
  grep '^\[accuracy' "$dir.txt" | tail -n 5 | cut -c1-400 | tee -a "$OUT/gpu-models.log"
done
log "done in $(($(date +%s) - T0)) s; folders: $(cd "$OUT" && ls -d */ 2>/dev/null | tr '\n' ' ')"
exit $failed
