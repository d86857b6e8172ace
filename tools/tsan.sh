#!/usr/bin/env bash
# ThreadSanitizer run of the concurrent parts: builds sift with -fsanitize=thread in its own
# folder (build-tsan/, the normal build is untouched) and runs the tests labelled `concurrency`
# (the daemon's front end and scheduler, the batch engine, continuous batching through the real
# siftd, siftd's own tests, the per-peer limits). The siftd processes those tests start are the
# TSan build too, so a race in the daemon is reported from the daemon.
#
# usage: bash tools/tsan.sh [--build DIR] [--jobs N] [--tests REGEX] [--keep-going]
#
#   --build DIR    build folder (default build-tsan)
#   --jobs N       compile jobs (default: nproc)
#   --tests REGEX  only the concurrency tests whose names match (ctest -R)
#   --keep-going   run every test even after a report (the default stops at the first failure)
#
# Every report of every process goes to DIR/tsan-reports/ (TSAN_OPTIONS log_path); the run fails
# when a test fails or any report was written, and prints the reports. Needs $SIFT_MODEL (set up
# by `bash tools/setup.sh model`; defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf).
#
# Not checked: code inside OpenMP parallel regions. libgomp is not built with TSan, so its
# barriers are invisible and every region would look racy; tools/tsan.supp suppresses reports
# whose stacks pass through libgomp. Everything the daemon's threads share outside those regions
# is checked. Measured: docs/operations.md#threadsanitizer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-tsan"
JOBS="$(nproc)"
TESTS=""
STOP=(--stop-on-failure)
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --keep-going) STOP=(); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "tsan.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
log() { printf '[tsan] %s\n' "$*" >&2; }

export SIFT_MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[[ -f "$SIFT_MODEL" ]] || { log "no model at $SIFT_MODEL (bash tools/setup.sh model)"; exit 1; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIFT_TSAN=ON \
    "${launcher[@]}" >/dev/null
fi
# The concurrency tests and what they start (siftd, sift, the plugins: their add_dependencies).
TARGETS=(test_daemon_unit test_batch_engine test_daemon_batching test_daemon_model
         test_daemon_peer_limits)
log "building ${TARGETS[*]} in $BUILD (-fsanitize=thread, $JOBS jobs)"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

REPORTS="$BUILD/tsan-reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
export TSAN_OPTIONS="log_path=$REPORTS/report suppressions=$ROOT/tools/tsan.supp second_deadlock_stack=1 history_size=4"
# One test process at a time; the workers sleep between parallel regions (as in the test job).
export OMP_WAIT_POLICY=PASSIVE
export OPENBLAS_THREAD_TIMEOUT=4
filter=(-L concurrency)
[[ -n "$TESTS" ]] && filter+=(-R "$TESTS")
log "running the tests labelled concurrency (about 10x slower under TSan)"
status=0
ctest --test-dir "$BUILD" --output-on-failure -j 1 --timeout 3000 "${STOP[@]}" "${filter[@]}" ||
  status=$?

shopt -s nullglob
reports=("$REPORTS"/report*)
if ((${#reports[@]})); then
  log "${#reports[@]} process(es) wrote ThreadSanitizer reports:"
  for r in "${reports[@]}"; do
    printf '\n===== %s\n' "$r" >&2
    cat "$r" >&2
  done
  exit 1
fi
((status == 0)) || { log "tests failed (no TSan report)"; exit "$status"; }
log "no ThreadSanitizer report; every concurrency test passed"
