#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: clang-14, ASan + UBSan) in their own build folder
# and runs each, one at a time, for a given time on its committed seed corpus
# (tests/fuzz/corpus/<name>) plus a working corpus (<build>/corpus/<name>, kept between runs).
# A crash, leak, sanitizer report or timeout stops that fuzzer, leaves its input in
# <build>/crashes/<name>/ and makes the run fail. Prints one line per fuzzer: executions,
# exec/s, coverage (libFuzzer's cov = edges, ft = features) and corpus size.
#
# usage: tools/fuzz/run.sh [--seconds N | --runs N] [--build DIR] [--only NAME] [--summary FILE]
#                          [--smoke]
#
#   --seconds N   per fuzzer (default 60)
#   --runs N      per fuzzer: stop after N executions instead of after a time
#   --build DIR   fuzz build folder (default build/fuzz)
#   --only NAME   one fuzzer, e.g. --only fuzz_protocol
#   --summary F   also write the results as JSON lines to F
#   --smoke       the test suite's run: 5 s each, working corpus in a temporary folder;
#                 exits 77 (skipped) when clang-14 or libFuzzer is not installed
#
# The model's own tokenizer is fuzzed too when $SIFT_MODEL names the GGUF file.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build/fuzz"
SECONDS_EACH=60
RUNS=-1
ONLY=""
SUMMARY=""
SMOKE=0
while (($#)); do
  case "$1" in
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --runs) RUNS="$2"; SECONDS_EACH=0; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --summary) SUMMARY="$2"; shift 2 ;;
    --smoke) SMOKE=1; SECONDS_EACH=5; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--seconds N | --runs N] [--build DIR] [--only NAME] [--summary FILE] [--smoke]" >&2
       exit 2 ;;
  esac
done

CXX="${SIFT_FUZZ_CXX:-clang++-14}"
if ! command -v "$CXX" >/dev/null ||
   ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: $CXX or libFuzzer (libclang-rt-14-dev) is not installed" >&2
  ((SMOKE)) && exit 77
  exit 1
fi

LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DSIFT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CXX" "${LAUNCHER[@]}" >/dev/null
fi
cmake --build "$BUILD" -j "${SIFT_FUZZ_JOBS:-2}" >&2

declare -A MAX_LEN=([fuzz_protocol]=4096 [fuzz_openai_request]=4096 [fuzz_pipeline_toml]=4096
                    [fuzz_gguf]=8192 [fuzz_state_codec]=4096 [fuzz_tokenizer]=2048)
FUZZERS=(fuzz_protocol fuzz_openai_request fuzz_pipeline_toml fuzz_gguf fuzz_state_codec
         fuzz_tokenizer)
[[ -n "$ONLY" ]] && FUZZERS=("$ONLY")

WORK="$BUILD"
if ((SMOKE)); then
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
fi
[[ -n "$SUMMARY" ]] && : > "$SUMMARY"
status=0
printf '%-20s %12s %10s %8s %8s %8s  %s\n' fuzzer executions exec/s cov ft corpus result
for f in "${FUZZERS[@]}"; do
  name="${f#fuzz_}"
  corpus="$WORK/corpus/$name"
  crashes="$WORK/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  log="$WORK/$f.log"
  rc=0
  # LibTorch (uninstrumented) keeps allocations alive until exit: leak checks only elsewhere.
  leaks=1
  [[ "$f" == fuzz_state_codec ]] && leaks=0
  ASAN_OPTIONS="detect_leaks=$leaks:allocator_may_return_null=1:max_malloc_fill_size=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$BUILD/bin/$f" "$corpus" "$ROOT/tests/fuzz/corpus/$name" \
      -max_total_time="$SECONDS_EACH" -runs="$RUNS" -print_final_stats=1 -timeout=10 -rss_limit_mb=4096 \
      -max_len="${MAX_LEN[$f]}" -artifact_prefix="$crashes/" > "$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")"
  result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc; see $log and $crashes)"
    status=1
    grep -E 'ERROR|SUMMARY|panic|deadly signal' "$log" | head -5 >&2 || true
  fi
  elapsed="$(sed -n 's/^stat::.*//;s/.*Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -1)"
  printf '%-20s %12s %10s %8s %8s %8s  %s\n' "$f" "${execs:-?}" "${speed:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$result"
  if [[ -n "$SUMMARY" ]]; then
    printf '{"fuzzer":"%s","seconds":%s,"executions":%s,"exec_per_s":%s,"cov":%s,"ft":%s,"corpus":%s,"ok":%s}\n' \
      "$f" "${elapsed:-$SECONDS_EACH}" "${execs:-0}" "${speed:-0}" "${cov:-0}" "${ft:-0}" "${corp:-0}" \
      "$([[ $rc == 0 ]] && echo true || echo false)" >> "$SUMMARY"
  fi
done
exit $status
