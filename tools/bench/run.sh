#!/usr/bin/env bash
# Regenerates the sift-bench results document with one command.
#
# usage: bash tools/bench/run.sh [full-kv|methods|models|quick]   (default full-kv)
#
#   bash tools/bench/run.sh full-kv   full KV (and the `recent` baseline for speed ratios) on the
#                                     default model -> docs/results/bench.md, PNGs and raw
#                                     CSV/JSON in docs/results/bench/
#   bash tools/bench/run.sh methods   every method pipeline against full KV on passkey, needle and
#                                     a RULER subset at 2K/4K/8K (in-process, shared prefills),
#                                     plus TTFT / memory of the method pipelines through siftd
#                                     -> docs/results/methods.md + raw files in docs/results/methods/
#   bash tools/bench/run.sh models    the same comparison on the second model (Qwen2.5-Coder-0.5B,
#                                     32K; fetch it with `bash tools/setup.sh model qwen`) at 4K/8K
#                                     with 10 samples per task family and length
#                                     -> docs/results/models.md + raw files in docs/results/models/
#   bash tools/bench/run.sh quick     the CI-size run -> bench-out/quick/quick.md
#
# Builds what it needs (SIFT_BUILD_DIR, default build/; SIFT_BENCH_PLUGINS limits the plugin
# targets, default every plugin), creates tools/bench/.venv with matplotlib (pip) for the plots,
# spawns its own siftd per suite, and holds /tmp/sift-measure.lock while measuring (one heavy
# measurement at a time on a shared machine). Counts can be changed with the variables below.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Haystack: $SIFT_HAYSTACK, else the 49 essays beside the checkout where they are (the committed
# results used them), else the corpus in the tree (tools/bench/corpus/README.md).
HAY="${SIFT_HAYSTACK:-$ROOT/../shared/data/pg_essays}"
[[ -n "${SIFT_HAYSTACK:-}" || -d "$HAY" ]] || HAY="$ROOT/tools/bench/corpus/world-english-bible"
HAY_NAME="\`$HAY\`"
[[ "$HAY" == */pg_essays ]] && HAY_NAME="the 49 Paul Graham essays of ../shared/data/pg_essays"
[[ "$HAY" == */tools/bench/corpus/world-english-bible ]] &&
  HAY_NAME="nine books of the World English Bible (public domain) of tools/bench/corpus/world-english-bible"
BUILD="${SIFT_BUILD_DIR:-$ROOT/build}"
export SIFT_MODEL="${SIFT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
# Thread-pool settings: the binaries choose their own (sift::ConfigureThreadEnvironment).
LOCK="${SIFT_MEASURE_LOCK:-/tmp/sift-measure.lock}"
PROFILE="${1:-full-kv}"
if [[ "$PROFILE" == --help || "$PROFILE" == -h ]]; then
  sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
BENCH="$BUILD/bin/sift-bench"

log() { echo "[run.sh] $*" >&2; }

setup_venv() {
  local venv="$ROOT/tools/bench/.venv"
  if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    return
  fi
  log "creating $venv with matplotlib"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib ||
    log "warning: no matplotlib (the report will have tables but no plots)"
}

build() {
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${SIFT_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  fi
  local plugins="${SIFT_BENCH_PLUGINS:-$(grep -ho 'sift_add_plugin([A-Za-z0-9_]*' \
    "$ROOT"/plugins/*/CMakeLists.txt | sed 's/.*(//' | sort -u | tr '\n' ' ')}"
  log "build: $BUILD (sift-bench siftd $plugins)"
  # -k 0: a plugin that does not build only takes its own pipelines out of the daemon.
  # shellcheck disable=SC2086
  cmake --build "$BUILD" --target sift-bench siftd $plugins -- -k 0 >&2 ||
    log "warning: some targets failed to build"
  [[ -x "$BENCH" ]] || { log "error: $BENCH was not built"; exit 1; }
}

measure() { flock "$LOCK" "$BENCH" "$@"; }

case "$PROFILE" in
  quick)
    build
    setup_venv
    OUT="$ROOT/bench-out/quick"
    "$BENCH" accuracy --quick --spawn --out "$OUT/accuracy"
    "$BENCH" speed --quick --spawn --out "$OUT/speed"
    "$BENCH" report --in "$OUT/accuracy,$OUT/speed" --out "$OUT/quick.md" --title "sift-bench quick run"
    ;;
  full-kv)
    build
    setup_venv
    DOC="$ROOT/docs/results/bench.md"
    RAW="$ROOT/docs/results/bench/raw"
    SEED="${SEED:-42}"
    PASSKEY_LENGTHS="${PASSKEY_LENGTHS:-1024,2048,4096,8192}"
    PASSKEY_DEPTHS="${PASSKEY_DEPTHS:-25,75}"
    NEEDLE_LENGTHS="${NEEDLE_LENGTHS:-1024,2048,4096}"
    NEEDLE_DEPTHS="${NEEDLE_DEPTHS:-0,50,100}"
    NEEDLE_LONG="${NEEDLE_LONG:-}"
    NEEDLE_LONG_DEPTHS="${NEEDLE_LONG_DEPTHS:-50}"
    RULER_TASKS="${RULER_TASKS:-niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,vt,cwe,fwe}"
    RULER_LENGTHS="${RULER_LENGTHS:-2048}"
    RULER_SAMPLES="${RULER_SAMPLES:-1}"
    SPEED_LENGTHS="${SPEED_LENGTHS:-1024,2048,4096}"
    SPEED_REPEATS="${SPEED_REPEATS:-2}"
    SPEED_TOKENS="${SPEED_TOKENS:-32}"
    SPEED_PIPELINES="${SPEED_PIPELINES:-full,recent}"
    # Optional longer speed points (8K prefills take ~2 min each under load), e.g. 8192 with one
    # repetition of full only; off by default to stay within the measurement budget.
    SPEED_LONG_LENGTHS="${SPEED_LONG_LENGTHS:-}"
    SPEED_LONG_PIPELINES="${SPEED_LONG_PIPELINES:-full}"
    SPEED_LONG_REPEATS="${SPEED_LONG_REPEATS:-1}"
    # Which suites to (re)run; the report always covers every folder under $RAW.
    SUITES="${SUITES:-passkey needle needle-long ruler speed speed-long}"
    want() { [[ " $SUITES " == *" $1 "* ]]; }
    mkdir -p "$RAW"
    for s in $SUITES; do rm -rf "${RAW:?}/$s"; done
    common=(--spawn --seed "$SEED" --haystack "$HAY")
    want passkey && measure accuracy "${common[@]}" --pipelines full --tasks passkey --lengths "$PASSKEY_LENGTHS" \
      --depths "$PASSKEY_DEPTHS" --samples 1 --out "$RAW/passkey" || true
    want needle && measure accuracy "${common[@]}" --pipelines full --tasks needle --lengths "$NEEDLE_LENGTHS" \
      --depths "$NEEDLE_DEPTHS" --samples 1 --out "$RAW/needle" || true
    if [[ -n "$NEEDLE_LONG" ]] && want needle-long; then
      measure accuracy "${common[@]}" --pipelines full --tasks needle --lengths "$NEEDLE_LONG" \
        --depths "$NEEDLE_LONG_DEPTHS" --samples 1 --out "$RAW/needle-long" || true
    fi
    want ruler && measure accuracy "${common[@]}" --pipelines full --tasks "$RULER_TASKS" \
      --lengths "$RULER_LENGTHS" --samples "$RULER_SAMPLES" --out "$RAW/ruler" || true
    want speed && measure speed "${common[@]}" --pipelines "$SPEED_PIPELINES" --lengths "$SPEED_LENGTHS" \
      --repeats "$SPEED_REPEATS" --max-tokens "$SPEED_TOKENS" --out "$RAW/speed" || true
    if [[ -n "$SPEED_LONG_LENGTHS" ]] && want speed-long; then
      measure speed "${common[@]}" --pipelines "$SPEED_LONG_PIPELINES" --lengths "$SPEED_LONG_LENGTHS" \
        --repeats "$SPEED_LONG_REPEATS" --max-tokens "$SPEED_TOKENS" --out "$RAW/speed-long" || true
    fi
    dirs=$(ls -d "$RAW"/*/ | sed 's:/$::' | tr '\n' ',')
    preamble="Full-KV accuracy and speed of the default model, produced by \`bash tools/bench/run.sh full-kv\`
(every number below comes from the raw files listed next; rerun the command to regenerate this page).
The machine is shared: other engineers' builds and runs may have overlapped these measurements
(see the load averages under Setup), so timings are lower bounds on speed. Accuracy counts are
small (stated per cell as \`score (n)\`) to keep the run within ~25 minutes on 2 cores.
RULER-style tasks follow RULER's templates, structure and metric but are not byte-identical samples:
the answer prefix ends the user turn (the protocol has no assistant prefill), key words and word
pools are ours, vt/cwe have no few-shot example, and the essay haystack is $HAY_NAME
(docs/bench.md lists every difference). Passkey drops ILRe's
answer prefix from the question for the same reason."
    "$BENCH" report --in "${dirs%,}" --out "$DOC" --title "sift-bench results: full KV, SmolLM2-135M-Instruct" \
      --preamble "$preamble"
    ;;
  methods | models)
    build
    setup_venv
    if [[ "$PROFILE" == models ]]; then
      export SIFT_MODEL="${SIFT_MODEL_QWEN:-$ROOT/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf}"
      [[ -f "$SIFT_MODEL" ]] || { log "error: $SIFT_MODEL missing (bash tools/setup.sh model qwen)"; exit 1; }
      [[ -f "${SIFT_MODEL%.gguf}.spts.bin" ]] ||
        log "warning: no SPTS proxies next to the model (bash tools/setup.sh calibrate qwen): spts fails"
      DOC="$ROOT/docs/results/models.md"
      RAW="$ROOT/docs/results/models/raw"
      LENGTHS="${LENGTHS:-4096 8192}"
      # 10 samples per task family and length: 5 depths x 2 (passkey, needle), 5 RULER tasks x 2.
      SAMPLES="${SAMPLES:-2}"
      for len in 4096 8192; do
        printf -v "PASSKEY_DEPTHS_$len" '%s' "${PASSKEY_DEPTHS:-10,30,50,70,90}"
        printf -v "NEEDLE_DEPTHS_$len" '%s' "${NEEDLE_DEPTHS:-0,25,50,75,100}"
        printf -v "RULER_TASKS_$len" '%s' "${RULER_TASKS:-niah_single_2,niah_multikey_1,niah_multivalue,vt,cwe}"
      done
      RULER_SAMPLES="${RULER_SAMPLES:-$SAMPLES}"
      SPEED_LENGTHS="${SPEED_LENGTHS:-4096,8192}"
    else
      DOC="$ROOT/docs/results/methods.md"
      RAW="$ROOT/docs/results/methods/raw"
      LENGTHS="${LENGTHS:-2048 4096 8192}"
    fi
    SAMPLES="${SAMPLES:-1}"
    SEED="${SEED:-42}"
    # Per length: passkey depths, needle depths, RULER tasks and samples per task. The defaults
    # are the committed run's (~2.2 min per 2K sample, ~3 min per 4K sample, ~5.5 min per 8K
    # sample for all configs below on 2 cores: ~75 minutes in all).
    PASSKEY_DEPTHS_2048="${PASSKEY_DEPTHS_2048:-10,30,50,70,90}"
    PASSKEY_DEPTHS_4096="${PASSKEY_DEPTHS_4096:-10,30,50,70,90}"
    PASSKEY_DEPTHS_8192="${PASSKEY_DEPTHS_8192:-25,75}"
    NEEDLE_DEPTHS_2048="${NEEDLE_DEPTHS_2048:-0,25,50,75,100}"
    NEEDLE_DEPTHS_4096="${NEEDLE_DEPTHS_4096:-25,75}"
    NEEDLE_DEPTHS_8192="${NEEDLE_DEPTHS_8192:-50}"
    RULER_TASKS_2048="${RULER_TASKS_2048:-niah_single_1,niah_single_2,niah_multivalue}"
    RULER_TASKS_4096="${RULER_TASKS_4096:-niah_single_2}"
    RULER_TASKS_8192="${RULER_TASKS_8192:-}"  # empty: no RULER sample at this length
    RULER_SAMPLES="${RULER_SAMPLES:-1}"
    # TTFT / decode / peak memory of the pipelines through a spawned siftd (one repetition each,
    # configs interleaved; 16 generated tokens as in the SPTS paper's E2E setting).
    SPEED_LENGTHS="${SPEED_LENGTHS:-2048,4096,8192}"
    SPEED_PIPELINES="${SPEED_PIPELINES:-full,chunkkv,gemfilter,ilre,spts}"
    SPEED_REPEATS="${SPEED_REPEATS:-1}"
    # Which (suite, length) folders to (re)run, e.g. SUITES="passkey needle" LENGTHS=2048.
    SUITES="${SUITES:-passkey needle ruler speed}"
    # FIRST_SAMPLE=K adds samples K.. to an earlier run: into <suite>-<length>-s<K>, beside it
    # (the report merges the folders).
    FIRST_SAMPLE="${FIRST_SAMPLE:-0}"
    # The configs: full KV; the five selection methods + ChunkKV with reuse at the ChunkKV
    # paper's KV sizes; SnapKV, GemFilter and ILRe at the filter papers' absolute budgets; SPTS.
    configs=(--config full)
    for r in 0.1 0.2 0.3; do
      for m in snapkv streamingllm h2o pyramidkv chunkkv chunkkv_reuse; do
        configs+=(--config "$m@$r=$m:{\"select\":{\"keep_ratio\":$r}}")
      done
    done
    # ChunkKV with one index set for all KV heads (kvpress's variant): does per-head selection
    # cost the exact passkey digits at 10 %?
    configs+=(--config "chunkkv_shared@0.1=chunkkv:{\"select\":{\"keep_ratio\":0.1,\"shared_indices\":true}}")
    for b in 256 512 1024; do
      configs+=(--config "snapkv@$b=snapkv:{\"select\":{\"budget\":$b}}")
      configs+=(--config "gemfilter@$b=gemfilter:{\"filter\":{\"topk\":$b}}")
      configs+=(--config "ilre@$b=ilre:{\"filter\":{\"budget\":$b}}")
    done
    configs+=(--config spts)
    # Answers are short (passkey ~10 tokens, needle ~30, niah ~25-45): cap the 128-token RULER
    # budgets at 64 to bound the decode time of configs that ramble.
    common=(--in-process --seed "$SEED" --haystack "$HAY" --max-tokens "${MAX_TOKENS:-64}" "${configs[@]}")
    mkdir -p "$RAW"
    for len in $LENGTHS; do
      pd="PASSKEY_DEPTHS_$len" nd="NEEDLE_DEPTHS_$len" rt="RULER_TASKS_$len"
      for suite in $SUITES; do
        [[ "$suite" == speed ]] && continue
        [[ "$suite" == ruler && -z "${!rt}" ]] && continue
        out="$RAW/$suite-$len"
        ((FIRST_SAMPLE > 0)) && out+="-s$FIRST_SAMPLE"
        rm -rf "$out"
        case "$suite" in
          passkey) args=(--tasks passkey --depths "${!pd}" --samples "$SAMPLES") ;;
          needle) args=(--tasks needle --depths "${!nd}" --samples "$SAMPLES") ;;
          ruler) args=(--tasks "${!rt}" --samples "$RULER_SAMPLES") ;;
          *) log "unknown suite $suite"; exit 2 ;;
        esac
        args+=(--first-sample "$FIRST_SAMPLE")
        measure accuracy "${common[@]}" --lengths "$len" "${args[@]}" --out "$out" || true
      done
    done
    if [[ " $SUITES " == *" speed "* ]]; then
      rm -rf "$RAW/speed"
      measure speed --spawn --seed "$SEED" --pipelines "$SPEED_PIPELINES" --lengths "$SPEED_LENGTHS" \
        --repeats "$SPEED_REPEATS" --max-tokens 16 --out "$RAW/speed" || true
    fi
    dirs=$(ls -d "$RAW"/*/ | sed 's:/$::' | tr '\n' ',')
    preamble="Accuracy of every method pipeline against full KV on the default model, produced by
\`bash tools/bench/run.sh methods\` (in-process: one prefill per sample shared by every config that
starts with the same prefill, so the selection methods see exactly the same prompt state as full
KV; docs/bench.md). Configs: \`<method>@<keep_ratio>\` for the KV-selection methods (fraction of
the prompt's KV kept per layer and head: the ChunkKV paper's 10/20/30 %), \`<method>@<tokens>\` for
SnapKV, GemFilter and ILRe at absolute budgets (the filter papers' 256/512/1024), \`spts\` with
pipelines/spts.toml. Counts are small (stated per cell as \`score (n)\`): on 2 cores one 8K sample
costs ~5.5 minutes for all configs. The committed data came from the defaults, run in parts
(raw/passkey-4096 holds depths 10/50/90 and raw/passkey-4096-more depths 30/70; one run of the
defaults writes them into one folder). The speed table runs the pipelines at their defaults through a
spawned siftd. The analysis is in docs/results/selection.md, filters.md and spts.md."
    title="Method accuracy: SmolLM2-135M-Instruct, every pipeline"
    if [[ "$PROFILE" == models ]]; then
      title="Method accuracy: Qwen2.5-Coder-0.5B-Instruct (32K), every pipeline"
      preamble="Every method pipeline against full KV on the second model, Qwen2.5-Coder-0.5B-Instruct
Q4_K_M (24 layers, 14 query / 2 KV heads, 32K context), where full KV succeeds at 4K and 8K;
produced by \`bash tools/bench/run.sh models\` (in-process, shared prefills, the same configs as
docs/results/methods.md, the layer parameters of pipelines/models/qwen2.5-coder-0.5b.toml).
Cells are \`score (n)\` over 5 depths (passkey, needle) or 5 RULER tasks, 2 samples each. The
analysis, and what it says about each paper's claim, is in docs/results/models-analysis.md."
    fi
    "$BENCH" report --in "${dirs%,}" --out "$DOC" --title "$title" --preamble "$preamble"
    ;;
  *)
    echo "usage: $0 full-kv|methods|models|quick" >&2
    exit 2
    ;;
esac
