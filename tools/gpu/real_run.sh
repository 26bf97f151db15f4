#!/usr/bin/env bash
# The real run (book/real_run.md) on one GPU, as commands of at most 10 minutes each. Each
# direction is one command: it trains the `full` profile in bf16 under a time limit that leaves
# room for the evaluation, and if training finished it averages the last 5 checkpoints, evaluates
# the four test sets (beam 4, alpha 0.6) and writes the report.
#
# Prepare, in the repository root (data/ is git-ignored):
#   mkdir -p data && cp -r <your Multi30k folder> data/multi30k
# Then, from the repository root, one command each (the times are estimates, not measurements):
#   1. bash tools/gpu/real_run.sh smoke    (~1-2 min)
#   2. bash tools/gpu/real_run.sh de-en    (at most ~9.5 min)
#   3. bash tools/gpu/real_run.sh en-de    (at most ~9.5 min)
# The manifests name the commit of the code: from git in a checkout, otherwise from
# TRANSFORMER_LIB_COMMIT, which a copy without .git must set, e.g.
#   TRANSFORMER_LIB_COMMIT=<output of git rev-parse HEAD> bash tools/gpu/real_run.sh de-en
# `smoke` runs the whole pipeline at the `ci` size for 30 updates on the GPU first, to catch
# plumbing errors in a minute instead of after ten.
#
# If a direction prints "training stopped at update N of 8000: run the same command again", the
# time limit ended training first: run the same command again. It resumes exactly from the work
# folder runs/full-<src>-<tgt>, so keep runs/ between the commands.
#
# What lands under $OUT: multi30k-<src>-<tgt>.tar.gz (the report folder) and a log per step.
# Unpack it into the repository with `tar xzf $OUT/multi30k-de-en.tar.gz -C results/`, run
# `pytest tests/test_real_run.py` (it recomputes bleu.json with sacreBLEU), then commit results/.
set -euo pipefail

: "${OUT:?set OUT to the folder that receives the reports and the logs}"
export PYTHONPATH=.
export PYTHONUNBUFFERED=1
export TRANSFORMER_LIB_DATA="${TRANSFORMER_LIB_DATA:-data/multi30k}"
PYTHON="${PYTHON:-python3}"
# Training gets this many seconds of each command; startup, the tokenizer and the evaluation of
# the four test sets (~3,500 sentences at beam 4) need the rest of its 10 minutes.
TRAIN_SECONDS="${TRAIN_SECONDS:-420}"

if [ "$#" -eq 0 ]; then
    echo "usage: bash tools/gpu/real_run.sh STEP... (smoke de-en en-de)" >&2
    exit 2
fi
if [ ! -f "$TRANSFORMER_LIB_DATA/train.de.gz" ]; then
    echo "no Multi30k in $TRANSFORMER_LIB_DATA: copy it to data/multi30k (see the top of this file)" >&2
    exit 2
fi
if [ ! -e .git ] && [ -z "${TRANSFORMER_LIB_COMMIT:-}" ]; then
    echo "no .git here: set TRANSFORMER_LIB_COMMIT=<commit> so that the manifests name the code" >&2
    exit 2
fi
export TRANSFORMER_LIB_COMMIT="${TRANSFORMER_LIB_COMMIT:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" || true

direction() {  # src tgt
    local src=$1 tgt=$2 name="multi30k-$1-$2"
    "$PYTHON" tools/real_run.py --profile full --src "$src" --tgt "$tgt" \
        --work "runs/full-$src-$tgt" --results "results/$name" \
        --time-limit "$TRAIN_SECONDS" --quiet 2>&1 | tee -a "$OUT/$name.log"
    if [ -f "results/$name/manifest.json" ]; then
        tar czf "$OUT/$name.tar.gz" -C results "$name"
    fi
}

for step in "$@"; do
    started=$SECONDS
    case "$step" in
        smoke)  # every part at the ci size on the GPU: training, resume, bf16, report
            rm -rf runs/smoke
            smoke=(tools/real_run.py --profile ci --src de --tgt en --work runs/smoke
                --results runs/smoke/report --max-steps 30 --limit 50 --quiet)
            # The first stops after one update (a limit of 0 s); the second resumes and reports.
            "$PYTHON" "${smoke[@]}" --time-limit 0 2>&1 | tee -a "$OUT/smoke.log"
            "$PYTHON" "${smoke[@]}" 2>&1 | tee -a "$OUT/smoke.log"
            test -f runs/smoke/report/manifest.json
            ;;
        de-en) direction de en ;;
        en-de) direction en de ;;
        *) echo "unknown step $step (smoke de-en en-de)" >&2; exit 2 ;;
    esac
    echo "== $step took $((SECONDS - started)) s" | tee -a "$OUT/steps.log"
done
