#!/usr/bin/env bash
# Every tool that loads a model takes --device and answers a bad device name, or CUDA on a
# LibTorch without it, with sift::ParseDevice's error before loading anything (docs/devices.md).
#   usage: tests/devices/device_flag_test.sh BUILD_DIR
# $SIFT_MODEL (optional): sift-bench reads the model's tokenizer before it places the model, so
# it is checked only when the model is there.
set -u
BIN="$1/bin"
MODEL="${SIFT_MODEL:-}"
[[ -f "$MODEL" ]] || MODEL=""
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
NOMODEL="$TMP/no-such-model.gguf"
passed=0
failed=0

# run_tool NAME DEVICE: the tool's command line with --device DEVICE.
run_tool() {
  local d="$2"
  case "$1" in
    siftd) "$BIN/siftd" --device "$d" --model "$NOMODEL" --bind 'tcp://127.0.0.1:*' --http off \
             --plugins "$TMP" --pipelines "$TMP" ;;
    sift-model) "$BIN/sift-model" logits "$NOMODEL" --device "$d" --text hi ;;
    sift-bench) "$BIN/sift-bench" accuracy --in-process --device "$d" --model "$MODEL" \
                  --pipelines full --tasks passkey --lengths 256 --samples 1 --out "$TMP/bench" ;;
    sift-layer-scan) "$BIN/sift-layer-scan" scan --model "$NOMODEL" --device "$d" ;;
    sift-spts-calibrate) "$BIN/sift-spts-calibrate" --model "$NOMODEL" --text "$TMP" --device "$d" ;;
    sift-spts-bench) "$BIN/sift-spts-bench" --model "$NOMODEL" --device "$d" ;;
    sift-selection-bench) SIFT_MODEL="$NOMODEL" "$BIN/sift-selection-bench" jaccard --device "$d" ;;
  esac
}

expect() {  # expect TOOL DEVICE PATTERN
  local out rc
  out="$(run_tool "$1" "$2" 2>&1 < /dev/null)"
  rc=$?
  if [[ $rc -ne 0 && "$out" == *"$3"* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'FAIL %s --device %s: exit %d, expected "%s" in:\n%s\n' "$1" "$2" "$rc" "$3" \
      "$(printf '%s' "$out" | head -c 1500)"
  fi
}

tools=(siftd sift-model sift-layer-scan sift-spts-calibrate sift-spts-bench sift-selection-bench)
if [[ -n "$MODEL" ]]; then tools+=(sift-bench); else echo "note: no \$SIFT_MODEL: sift-bench not checked"; fi

cuda_probe="$(run_tool sift-model cuda 2>&1)"
for t in "${tools[@]}"; do
  expect "$t" gpu "expected cpu, cuda or cuda:N"
  if [[ "$cuda_probe" == *"no CUDA support"* ]]; then
    expect "$t" cuda "no CUDA support"
  fi
done
[[ "$cuda_probe" == *"no CUDA support"* ]] || echo "note: this LibTorch has CUDA: only bad names checked"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
