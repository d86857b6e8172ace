#!/usr/bin/env bash
# ctest deploy_haproxy: three real siftd replicas in network namespaces behind HAProxy with
# deploy/haproxy.cfg, a drain and a kill under streaming load (tests/deploy/haproxy_test.py).
#
#   tests/deploy/run.sh [--build DIR]
#
# Exit status: 0 passed, 1 failed, 77 skipped with the reason (not root, so no network
# namespaces; haproxy missing: `bash tools/setup.sh test` installs it). Python's standard
# library only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
if [[ "${1:-}" == "--build" ]]; then
  BUILD="$(cd "$2" && pwd)"
  shift 2
fi
MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
skip() { echo "deploy_haproxy: SKIPPED: $*" >&2; exit 77; }
((EUID == 0)) || skip "needs root for network namespaces"
ip netns list >/dev/null 2>&1 || skip "ip netns does not work here"
HAPROXY="$(PATH="$PATH:/usr/sbin:/sbin" command -v haproxy || true)"
[[ -n "$HAPROXY" ]] || skip "haproxy is not installed (bash tools/setup.sh test installs it)"
[[ -f "$MODEL" ]] || skip "no model at $MODEL (bash tools/setup.sh model)"
[[ -x "$BUILD/bin/siftd" ]] || skip "missing $BUILD/bin/siftd (build first)"
cd "$ROOT/tests/deploy"
SIFT_SOURCE="$ROOT" SIFT_BUILD="$BUILD" SIFT_MODEL="$MODEL" SIFT_HAPROXY="$HAPROXY" \
  exec python3 -m unittest -v haproxy_test
