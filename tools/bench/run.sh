#!/usr/bin/env bash
# Regenerates the sift-bench results document with one command.
#
#   bash tools/bench/run.sh full-kv   full KV (and the `recent` baseline for speed ratios) on the
#                                     default model -> docs/results/bench.md, PNGs and raw
#                                     CSV/JSON in docs/results/bench/
#   bash tools/bench/run.sh quick     the CI-size run -> bench-out/quick/quick.md
#
# Builds what it needs (SIFT_BUILD_DIR, default build/; SIFT_BENCH_PLUGINS limits the plugin
# targets, default every plugin), creates tools/bench/.venv with matplotlib (pip) for the plots,
# spawns its own siftd per suite, and holds /tmp/sift-measure.lock while measuring (one heavy
# measurement at a time on a shared machine). Counts can be changed with the variables below.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
export SIFT_MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" OPENBLAS_THREAD_TIMEOUT="${OPENBLAS_THREAD_TIMEOUT:-4}"
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"
PROFILE="${1:-full-kv}"
BENCH="$BUILD/bin/sift-bench"

log() { echo "[run.sh] $*" >&2; }

setup_venv() {
  local venv="$ROOT/tools/bench/.venv"
  if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    return
  fi
  log "creating $venv with matplotlib"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib ||
    log "warning: no matplotlib (the report will have tables but no plots)"
}

build() {
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${SIFT_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  fi
  local plugins="${SIFT_BENCH_PLUGINS:-$(grep -ho 'sift_add_plugin([A-Za-z0-9_]*' \
    "$ROOT"/plugins/*/CMakeLists.txt | sed 's/.*(//' | sort -u | tr '\n' ' ')}"
  log "build: $BUILD (sift-bench siftd $plugins)"
  # -k 0: a plugin that does not build only takes its own pipelines out of the daemon.
  # shellcheck disable=SC2086
  cmake --build "$BUILD" --target sift-bench siftd $plugins -- -k 0 >&2 ||
    log "warning: some targets failed to build"
  [[ -x "$BENCH" ]] || { log "error: $BENCH was not built"; exit 1; }
}

measure() { flock "$LOCK" "$BENCH" "$@"; }

case "$PROFILE" in
  quick)
    build
    setup_venv
    OUT="$ROOT/bench-out/quick"
    "$BENCH" accuracy --quick --spawn --out "$OUT/accuracy"
    "$BENCH" speed --quick --spawn --out "$OUT/speed"
    "$BENCH" report --in "$OUT/accuracy,$OUT/speed" --out "$OUT/quick.md" --title "sift-bench quick run"
    ;;
  full-kv)
    build
    setup_venv
    DOC="$ROOT/docs/results/bench.md"
    RAW="$ROOT/docs/results/bench/raw"
    SEED="${SEED:-42}"
    PASSKEY_LENGTHS="${PASSKEY_LENGTHS:-1024,2048,4096,8192}"
    PASSKEY_DEPTHS="${PASSKEY_DEPTHS:-25,75}"
    NEEDLE_LENGTHS="${NEEDLE_LENGTHS:-1024,2048,4096}"
    NEEDLE_DEPTHS="${NEEDLE_DEPTHS:-0,50,100}"
    NEEDLE_LONG="${NEEDLE_LONG:-}"
    NEEDLE_LONG_DEPTHS="${NEEDLE_LONG_DEPTHS:-50}"
    RULER_TASKS="${RULER_TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,vt,cwe,fwe}"
    RULER_LENGTHS="${RULER_LENGTHS:-2048}"
    RULER_SAMPLES="${RULER_SAMPLES:-1}"
    SPEED_LENGTHS="${SPEED_LENGTHS:-1024,2048,4096}"
    SPEED_REPEATS="${SPEED_REPEATS:-2}"
    SPEED_TOKENS="${SPEED_TOKENS:-32}"
    SPEED_PIPELINES="${SPEED_PIPELINES:-full,recent}"
    # Optional longer speed points (8K prefills take ~2 min each under load), e.g. 8192 with one
    # repetition of full only; off by default to stay within the measurement budget.
    SPEED_LONG_LENGTHS="${SPEED_LONG_LENGTHS:-}"
    SPEED_LONG_PIPELINES="${SPEED_LONG_PIPELINES:-full}"
    SPEED_LONG_REPEATS="${SPEED_LONG_REPEATS:-1}"
    # Which suites to (re)run; the report always covers every folder under $RAW.
    SUITES="${SUITES:-passkey needle needle-long ruler speed speed-long}"
    want() { [[ " $SUITES " == *" $1 "* ]]; }
    mkdir -p "$RAW"
    for s in $SUITES; do rm -rf "${RAW:?}/$s"; done
    common=(--spawn --seed "$SEED")
    want passkey && measure accuracy "${common[@]}" --pipelines full --tasks passkey --lengths "$PASSKEY_LENGTHS" \
      --depths "$PASSKEY_DEPTHS" --samples 1 --out "$RAW/passkey" || true
    want needle && measure accuracy "${common[@]}" --pipelines full --tasks needle --lengths "$NEEDLE_LENGTHS" \
      --depths "$NEEDLE_DEPTHS" --samples 1 --out "$RAW/needle" || true
    if [[ -n "$NEEDLE_LONG" ]] && want needle-long; then
      measure accuracy "${common[@]}" --pipelines full --tasks needle --lengths "$NEEDLE_LONG" \
        --depths "$NEEDLE_LONG_DEPTHS" --samples 1 --out "$RAW/needle-long" || true
    fi
    want ruler && measure accuracy "${common[@]}" --pipelines full --tasks "$RULER_TASKS" \
      --lengths "$RULER_LENGTHS" --samples "$RULER_SAMPLES" --out "$RAW/ruler" || true
    want speed && measure speed "${common[@]}" --pipelines "$SPEED_PIPELINES" --lengths "$SPEED_LENGTHS" \
      --repeats "$SPEED_REPEATS" --max-tokens "$SPEED_TOKENS" --out "$RAW/speed" || true
    if [[ -n "$SPEED_LONG_LENGTHS" ]] && want speed-long; then
      measure speed "${common[@]}" --pipelines "$SPEED_LONG_PIPELINES" --lengths "$SPEED_LONG_LENGTHS" \
        --repeats "$SPEED_LONG_REPEATS" --max-tokens "$SPEED_TOKENS" --out "$RAW/speed-long" || true
    fi
    dirs=$(ls -d "$RAW"/*/ | sed 's:/$::' | tr '\n' ',')
    preamble="Full-KV accuracy and speed of the default model, produced by \`bash tools/bench/run.sh full-kv\`
(every number below comes from the raw files listed next; rerun the command to regenerate this page).
The machine is shared: other engineers' builds and runs may have overlapped these measurements
(see the load averages under Setup), so timings are lower bounds on speed. Accuracy counts are
small (stated per cell as \`score (n)\`) to keep the run within ~25 minutes on 2 cores.
RULER-style tasks follow RULER's templates, structure and metric but are not byte-identical samples:
the answer prefix ends the user turn (the protocol has no assistant prefill), key words and word
pools are ours, vt/cwe have no few-shot example, and the essay haystack is the 49 Paul Graham
essays of shared/data/pg_essays (docs/bench.md lists every difference). Passkey drops ILRe's
answer prefix from the question for the same reason."
    "$BENCH" report --in "${dirs%,}" --out "$DOC" --title "sift-bench results: full KV, SmolLM2-135M-Instruct" \
      --preamble "$preamble"
    ;;
  *)
    echo "usage: $0 full-kv|quick" >&2
    exit 2
    ;;
esac
