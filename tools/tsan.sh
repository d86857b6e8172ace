#!/usr/bin/env bash
# ThreadSanitizer run of the concurrent parts: builds sift with -fsanitize=thread in its own
# folder (build-tsan/, the normal build is untouched) and runs the suites of the concurrent
# parts, one binary at a time: test_daemon_unit (the front end and scheduler), test_batch_engine,
# test_daemon_batching (continuous batching through the real siftd), test_daemon_model (siftd's
# own tests), test_daemon_peer_limits and test_daemon_context_cache (the prefix cache shared by
# concurrent requests). The siftd processes those tests start are the TSan
# build too, so a race in the daemon is reported from the daemon.
#
# usage: bash tools/tsan.sh [--build DIR] [--jobs N] [--suites LIST] [--tests FILTER] [--quick]
#                           [--keep-going]
#
#   --build DIR    build folder (default build-tsan)
#   --quick        only the front end and scheduler (test_daemon_unit) and join, leave, cancel,
#                  deadline and KV-budget waits mid-batch through siftd (test_daemon_batching's
#                  BatchFlowTest and KvBudgetTest); about 5 minutes once built
#   --suites LIST  comma-separated test binaries of the list above to build and run (default:
#                  all of them), e.g. test_daemon_unit,test_daemon_context_cache
#   --jobs N       compile jobs (default: nproc)
#   --tests FILTER a gtest filter for every suite (--gtest_filter), e.g. 'BatchFlow*'
#   --keep-going   run every suite even after one fails (the default stops at the first)
#
# Every report of every process goes to DIR/tsan-reports/ (TSAN_OPTIONS log_path); the run fails
# when a test fails or any report was written, and prints the reports. Needs $SIFT_MODEL (set up
# by `bash tools/setup.sh model`; defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf).
#
# Not checked: code inside OpenMP parallel regions. libgomp is not built with TSan, so its
# barriers are invisible and every region would look racy: the siftd processes run on one thread
# (SIFT_TEST_SIFTD_THREADS=1, tests/support/siftd_process.h) and tools/tsan.supp suppresses
# stacks through libgomp, libzmq and libtorch. Everything the daemon's threads share is checked. What a run found: docs/architecture.md#threadsanitizer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-tsan"
JOBS="$(nproc)"
TESTS=""
SUITES=""
QUICK=0
KEEP_GOING=0
usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --suites) SUITES="$2"; shift 2 ;;
    --keep-going) KEEP_GOING=1; shift ;;
    --quick) QUICK=1; shift ;;
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
# The suites and what they start (siftd, sift, the plugins: their add_dependencies).
TARGETS=(test_daemon_unit test_batch_engine test_daemon_batching test_daemon_model
         test_daemon_peer_limits test_daemon_context_cache)
((QUICK)) && TARGETS=(test_daemon_unit test_daemon_batching)
if [[ -n "$SUITES" ]]; then
  IFS=, read -r -a chosen <<< "$SUITES"
  for c in "${chosen[@]}"; do
    [[ " ${TARGETS[*]} " == *" $c "* ]] || { log "--suites: '$c' is not one of ${TARGETS[*]}"; exit 2; }
  done
  TARGETS=("${chosen[@]}")
fi
log "building ${TARGETS[*]} in $BUILD (-fsanitize=thread, $JOBS jobs)"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

REPORTS="$BUILD/tsan-reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
export TSAN_OPTIONS="log_path=$REPORTS/report suppressions=$ROOT/tools/tsan.supp second_deadlock_stack=1 history_size=4"
# One test process at a time, and every siftd they start on one thread: OpenMP's workers (libgomp
# is not built with TSan) would make every parallel region of the kernels look racy.
export SIFT_TEST_SIFTD_THREADS=1
export SIFT_TEST_TIME_SCALE=20  # the tests' waits for siftd (batching_test.cc)
export OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=PASSIVE
export OPENBLAS_THREAD_TIMEOUT=4
filter=()
[[ -n "$TESTS" ]] && filter=(--gtest_filter="$TESTS")
quick_filter() {  # TARGET: --quick's filter for it ("" = every test)
  ((QUICK)) && [[ "$1" == test_daemon_batching ]] && echo "BatchFlowTest.*:KvBudgetTest.*"
  return 0
}
log "running ${TARGETS[*]} (about 10x slower under TSan)"
status=0
for t in "${TARGETS[@]}"; do
  log "$t"
  rc=0
  f=("${filter[@]}")
  q="$(quick_filter "$t")"
  [[ -n "$q" && -z "$TESTS" ]] && f=(--gtest_filter="$q")
  "$BUILD/bin/$t" --gtest_brief=1 "${f[@]}" || rc=$?
  if ((rc != 0)); then
    log "$t failed (exit $rc)"
    status=1
    ((KEEP_GOING)) || break
  fi
done

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
((status == 0)) || { log "a suite failed (no TSan report)"; exit "$status"; }
log "no ThreadSanitizer report; ${TARGETS[*]} passed"
