#!/bin/bash
# Accuracy sweep for docs/results/filters.md: full, snapkv, gemfilter, ilre at budgets 256/512/1024.
set -u
cd "$(dirname "$0")/../../../.."  # the repository root
B=./build-formats/bin/sift-bench
run() {  # length depths tasks
  L=$1; shift; D=$1; shift; T=$1; shift
  n=$((L - 32))
  cfg=(--config full=full)
  for b in 256 512 1024; do
    r=$(python3 -c "print(round(min(1.0,$b/$n),4))")
    cfg+=(--config "snapkv@$b=snapkv:{\"select\":{\"keep_ratio\":$r}}")
    cfg+=(--config "gemfilter@$b=gemfilter:{\"filter\":{\"topk\":$b}}")
    cfg+=(--config "ilre@$b=ilre:{\"filter\":{\"budget\":$b}}")
  done
  $B accuracy --in-process --plugins build-formats/plugins --threads 2 "${cfg[@]}" \
    --tasks "$T" --lengths "$L" --depths "$D" --samples 1 --seed 42 --out docs/results/filters/accuracy 2>&1 | grep -v "catalog warn"
}
date -u
run 4096 25,75 passkey
date -u
