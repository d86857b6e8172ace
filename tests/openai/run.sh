#!/usr/bin/env bash
# ctest openai_clients: the OpenAI-compatible port of the real siftd, driven by the official
# `openai` Python package (tests/openai/requirements.txt, in .venv/ from tools/setup.sh test),
# curl and raw sockets (tests/openai/test_openai_api.py).
#
#   tests/openai/run.sh [--build DIR] [unittest names...]
#
# Exit status: 0 all passed, 1 a failure, 77 (skipped) when the venv, curl, the model or the
# build is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
if [[ "${1:-}" == "--build" ]]; then
  BUILD="$(cd "$2" && pwd)"
  shift 2
fi
PY="$ROOT/.venv/bin/python"
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
skip() { echo "openai_clients: $* ; skipped (bash tools/setup.sh test installs everything)" >&2; exit 77; }
[[ -x "$PY" ]] && "$PY" -c "import openai" 2>/dev/null || skip "no .venv with the openai package"
command -v curl >/dev/null || skip "curl is not installed"
[[ -f "$MODEL" ]] || skip "no model at $MODEL"
for f in bin/siftd bin/sift plugins/prefill_full.so plugins/decode_local.so plugins/keep_recent.so \
         plugins/snapkv.so; do
  [[ -e "$BUILD/$f" ]] || skip "missing $BUILD/$f"
done
cd "$ROOT/tests/openai"
SIFT_SOURCE="$ROOT" SIFT_BUILD="$BUILD" SIFT_MODEL="$MODEL" exec "$PY" -m unittest -v \
  "${@:-test_openai_api}"
