#!/bin/bash
# The SPTS measurement run of docs/results/spts.md (one locked session, ~13 min on 2 cores under load).
# Passkey accuracy at 2K (2 samples, full/spts/pap) came from a separate locked pilot run:
#   sift-spts-bench --mode accuracy --task passkey --lengths 2048 --samples 2 --configs full,spts,pap
# (accuracy_passkey_2k_pilot.jsonl).
# Usage: docs/results/spts/run.sh BUILD_DIR OUT_DIR
set -euo pipefail
B=${1:-build}
OUT=${2:-docs/results/spts}
export SIFT_MODEL=${SIFT_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4
# The results below were measured on the 49 essays beside the checkout (../shared/data/pg_essays).
BENCH() { "$B/bin/sift-spts-bench" --haystack "${SIFT_HAYSTACK:-../shared/data/pg_essays}" "$@"; }
rm -f "$OUT"/speed.jsonl "$OUT"/accuracy.jsonl
date -u +"start %FT%TZ"
BENCH --mode speed --task passkey --lengths 2048 --samples 1 --configs full,spts \
  --gen 16 --out "$OUT/speed.jsonl"
BENCH --mode speed --task passkey --lengths 4096 --samples 1 --configs full,spts,pap,pap_ltp \
  --gen 16 --warmup 0 --out "$OUT/speed.jsonl"
BENCH --mode speed --task passkey --lengths 8192 --samples 1 --configs full,spts \
  --gen 16 --warmup 0 --out "$OUT/speed.jsonl"
BENCH --mode accuracy --task needle --lengths 2048 --samples 4 --configs full,spts \
  --warmup 0 --out "$OUT/accuracy.jsonl"
date -u +"end %FT%TZ"
# Ablation repeated at 4K in reversed config order, 2 samples (the first pass ran each config
# once, in the order full, spts, pap, pap_ltp, while the machine's load was changing).
BENCH --mode speed --task passkey --lengths 4096 --samples 2 --configs pap_ltp,pap,spts,full \
  --gen 16 --warmup 0 --out "$OUT/speed_ablation.jsonl"
date -u +"end2 %FT%TZ"
