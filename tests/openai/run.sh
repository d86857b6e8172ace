#!/usr/bin/env bash
# ctest openai_clients: the OpenAI-compatible port of the real siftd, driven by the official
# `openai` Python package (tests/openai/requirements.txt, in .venv/ from tools/setup.sh test),
# curl and raw sockets (tests/openai/test_openai_api.py).
#
#   tests/openai/run.sh [--build DIR] [unittest names...]
#
# Sets up .venv/ first (tools/setup.sh venv: the pinned tests/openai/requirements.txt; quick when
# it is up to date). Exit status: 0 all passed, 1 a failure (a failed venv set-up with PyPI
# reachable included), 77 (skipped, with the reason) when PyPI is unreachable so the openai
# package cannot be installed, or curl, the model or the build is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
if [[ "${1:-}" == "--build" ]]; then
  BUILD="$(cd "$2" && pwd)"
  shift 2
fi
PY="$ROOT/.venv/bin/python"
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
skip() { echo "openai_clients: SKIPPED: $*" >&2; exit 77; }
bash "$ROOT/tools/setup.sh" venv
[[ -x "$PY" ]] && "$PY" -c "import openai" 2>/dev/null ||
  skip "the openai package could not be installed into $ROOT/.venv: PyPI is unreachable"
command -v curl >/dev/null || skip "curl is not installed (bash tools/setup.sh deps)"
[[ -f "$MODEL" ]] || skip "no model at $MODEL (bash tools/setup.sh model)"
for f in bin/siftd bin/sift plugins/prefill_full.so plugins/decode_local.so plugins/keep_recent.so \
         plugins/snapkv.so plugins/streamingllm.so; do
  [[ -e "$BUILD/$f" ]] || skip "missing $BUILD/$f (build first)"
done
cd "$ROOT/tests/openai"
SIFT_SOURCE="$ROOT" SIFT_BUILD="$BUILD" SIFT_MODEL="$MODEL" exec "$PY" -m unittest -v \
  "${@:-test_openai_api}"
