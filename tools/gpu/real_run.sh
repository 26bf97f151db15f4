#!/usr/bin/env bash
# The real run (book/real_run.md) on one GPU, as commands of at most 10 minutes each. Each
# direction is one command: it trains the `full` profile in bf16 under a time limit that leaves
# room for the evaluation, and if training finished it averages the last 5 checkpoints, evaluates
# the four test sets (beam 4, alpha 0.6) and writes the report.
#
# Prepare, in the repository root (data/ and .whl/ are git-ignored):
#   mkdir -p data && cp -r <your Multi30k folder> data/multi30k
#   bash tools/gpu/wheels.sh     (on a machine with network: the pinned tokenizers and sacrebleu)
# and bring data/ and .whl/ along with the code. Every command first installs the wheels of
# .whl/ and stops if tokenizers or sacrebleu is not the version requirements.txt pins (see
# tools/gpu/environment.sh).
# Then, from the repository root, one command each (the times are estimates, not measurements):
#   1. bash tools/gpu/real_run.sh smoke    (~2-3 min)
#   2. bash tools/gpu/real_run.sh de-en    (at most ~9.5 min)
#   3. bash tools/gpu/real_run.sh en-de    (at most ~9.5 min)
# or, in place of 2 and 3, both directions at once in one command (the `full` model is too small
# to keep a GPU busy, so two processes share one at little cost to either):
#   2. bash tools/gpu/real_run.sh both     (at most ~9.5 min)
# The `full` runs overfit (book/real_run.md); the search of remedies and stopping points, four
# candidates in each direction, all sharing the GPU (tools/full_search.py), scores them on the
# validation split. Run it again until it prints every candidate trained to update 6,000:
#   bash tools/gpu/real_run.sh search   (at most ~9.5 min a command; SEARCH_SECONDS of training)
# or search some candidates only, e.g. SEARCH_ONLY=profile,dropout_0.4 bash ... search
# The manifests name the commit of the code: from git in a checkout, otherwise from
# TRANSFORMER_LIB_COMMIT, which a copy without .git must set, e.g.
#   TRANSFORMER_LIB_COMMIT=<output of git rev-parse HEAD> bash tools/gpu/real_run.sh de-en
#
# `smoke` runs the whole pipeline at the `ci` size for 30 updates on the GPU first, to catch
# plumbing errors in a minute instead of after ten. Then it times 50 updates of the `full`
# profile as a direction trains them (bf16) and prints the projected time of the whole training
# (8000 updates, validations and checkpoints included) and whether it fits one command's
# training budget, TRAIN_SECONDS (420 s): if it says "does not fit", each direction takes the
# number of commands it prints (see below).
#
# If a direction prints "training stopped at update N of 8000: run the same command again", the
# time limit ended training first: run the same command again. It resumes exactly from the work
# folder runs/full-<src>-<tgt>, so keep runs/ between the commands.
#
# What lands under $OUT: full-search.tar.gz from `search` (unpack it with tar xzf in results/);
# the report folder as multi30k-<src>-<tgt>.tar.gz.part-00, -01, ... (one
# tar.gz cut into parts of 15 MiB, since the shipped model alone is about 18 MiB) and a log per
# step; smoke-report.tar.gz and timing-full.json from `smoke`.
# Unpack a report into the repository with
#   cat $OUT/multi30k-de-en.tar.gz.part-* | tar xz -C results/
# run `pytest tests/test_real_run.py` (it recomputes bleu.json with sacreBLEU), then commit results/.
#
# DRY_RUN=1 bash tools/gpu/real_run.sh smoke runs the smoke step on the CPU (any GPU hidden), at
# toy sizes: 3 updates, 4 test sentences, and 2 timed updates of the `ci` profile (the `full`
# one takes about a minute an update there). It checks the script on any machine in about a
# minute; RUNS names the folder of its work (default runs). `DRY_RUN=1 ... search` checks the
# search the same way: its candidates around the `ci` profile, 1 update, 3 sentences scored, its
# results under $OUT/ci-search (never results/). A dry run reads Multi30k's files compressed or
# not, so TRANSFORMER_LIB_DATA may name a folder of their first lines (the tests do).
set -euo pipefail

: "${OUT:?set OUT to the folder that receives the reports and the logs}"
export PYTHONPATH=.
export PYTHONUNBUFFERED=1
export TRANSFORMER_LIB_DATA="${TRANSFORMER_LIB_DATA:-data/multi30k}"
PYTHON="${PYTHON:-python3}"
DRY_RUN="${DRY_RUN:-0}"
if [ "$DRY_RUN" = 1 ]; then
    export CUDA_VISIBLE_DEVICES=""  # the CPU trains and evaluates even where there is a GPU
fi
source "$(dirname "$0")/environment.sh"  # the pinned tokenizers and sacrebleu, or a stop
# Training gets this many seconds of each command; startup, the tokenizer and the evaluation of
# the four test sets (~3,500 sentences at beam 4) need the rest of its 10 minutes.
TRAIN_SECONDS="${TRAIN_SECONDS:-420}"
RUNS="${RUNS:-runs}"
# The search's training gets less of a command: it scores the stopping points reached after it.
SEARCH_SECONDS="${SEARCH_SECONDS:-330}"
# SEARCH_ONLY names some of the search's candidates (comma-separated), when not all of them fit.
search_only=()
if [ -n "${SEARCH_ONLY:-}" ]; then
    search_only=(--only "$SEARCH_ONLY")
fi

if [ "$#" -eq 0 ]; then
    echo "usage: bash tools/gpu/real_run.sh STEP... (smoke de-en en-de both search)" >&2
    exit 2
fi
if [ ! -f "$TRANSFORMER_LIB_DATA/train.de.gz" ] && [ ! -f "$TRANSFORMER_LIB_DATA/train.de" ]; then
    echo "no Multi30k in $TRANSFORMER_LIB_DATA: copy it to data/multi30k (see the top of this file)" >&2
    exit 2
fi
if [ ! -e .git ] && [ -z "${TRANSFORMER_LIB_COMMIT:-}" ]; then
    echo "no .git here: set TRANSFORMER_LIB_COMMIT=<commit> so that the manifests name the code" >&2
    exit 2
fi
export TRANSFORMER_LIB_COMMIT="${TRANSFORMER_LIB_COMMIT:-}"
mkdir -p "$OUT"
if [ "$DRY_RUN" = 1 ]; then
    device=(--device cpu)
    smoke_steps=3 smoke_limit=4 time_profile=ci time_updates=2
    search=(tools/full_search.py --base ci --work "$RUNS/ci-search" --results "$OUT/ci-search")
    search_train=(--steps 1) search_score=(--ends 1 --limit 3 --device cpu)
else
    # A GPU that torch cannot see would turn the timing below into minutes of CPU work.
    if ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
        echo "torch sees no CUDA GPU here (DRY_RUN=1 checks the smoke step on a CPU)" >&2
        exit 2
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" || true
    device=()
    smoke_steps=30 smoke_limit=50 time_profile=full time_updates=50
    search=(tools/full_search.py --work "$RUNS/full-search" --results results/full-search)
    search_train=(--steps 6000) search_score=()
fi

direction() {  # src tgt
    local src=$1 tgt=$2 name="multi30k-$1-$2"
    "$PYTHON" tools/real_run.py --profile full --src "$src" --tgt "$tgt" \
        --work "$RUNS/full-$src-$tgt" --results "results/$name" \
        --time-limit "$TRAIN_SECONDS" --quiet 2>&1 | tee -a "$OUT/$name.log"
    if [ -f "results/$name/manifest.json" ]; then
        rm -f "$OUT/$name.tar.gz.part-"*
        tar czf - -C results "$name" | split -b 15M -d - "$OUT/$name.tar.gz.part-"
    fi
}

for step in "$@"; do
    started=$SECONDS
    case "$step" in
        smoke)  # every part at the ci size: training, resume, bf16, report; then the timing
            rm -rf "$RUNS/smoke" "$RUNS/timing"
            smoke=(tools/real_run.py --profile ci --src de --tgt en --work "$RUNS/smoke"
                --results "$RUNS/smoke/report" --max-steps "$smoke_steps" --limit "$smoke_limit"
                --quiet "${device[@]}")
            # The first stops after one update (a limit of 0 s); the second resumes and reports.
            "$PYTHON" "${smoke[@]}" --time-limit 0 2>&1 | tee -a "$OUT/smoke.log"
            "$PYTHON" "${smoke[@]}" 2>&1 | tee -a "$OUT/smoke.log"
            test -f "$RUNS/smoke/report/manifest.json"
            tar czf "$OUT/smoke-report.tar.gz" -C "$RUNS/smoke" report
            # The speed of a direction's training: its updates, one validation, one checkpoint,
            # projected to the whole profile and set against TRAIN_SECONDS.
            "$PYTHON" tools/real_run.py --profile "$time_profile" --src de --tgt en \
                --work "$RUNS/timing" --time-updates "$time_updates" \
                --time-limit "$TRAIN_SECONDS" --quiet "${device[@]}" 2>&1 | tee -a "$OUT/smoke.log"
            cp "$RUNS/timing/timing.json" "$OUT/timing-$time_profile.json"
            ;;
        de-en | en-de | both)
            if [ "$DRY_RUN" = 1 ]; then
                echo "DRY_RUN=1 runs the smoke step only: a direction trains the full profile" >&2
                exit 2
            fi
            if [ "$step" = both ]; then  # two processes on the one GPU, each with its own log
                direction de en &
                de_en=$!
                direction en de &
                en_de=$!
                failed=0
                wait "$de_en" || failed=1
                wait "$en_de" || failed=1
                [ "$failed" = 0 ] || { echo "a direction failed: see its log" >&2; exit 1; }
            else
                direction "${step%-*}" "${step#*-}"
            fi
            ;;
        search)  # train (resuming) for SEARCH_SECONDS, then score the stopping points reached
            "$PYTHON" "${search[@]}" train "${search_train[@]}" "${search_only[@]}" \
                --time-limit "$SEARCH_SECONDS" "${device[@]}" 2>&1 | tee -a "$OUT/search.log"
            # The two directions are scored side by side, each by a process of its own.
            scoring=()
            for pair in de-en en-de; do
                "$PYTHON" "${search[@]}" score --directions "$pair" "${search_only[@]}" \
                    "${search_score[@]}" > "$OUT/search-score-$pair.log" 2>&1 &
                scoring+=($!)
            done
            failed=0
            for process in "${scoring[@]}"; do wait "$process" || failed=1; done
            cat "$OUT"/search-score-*.log >> "$OUT/search.log"
            [ "$failed" = 0 ] || { echo "scoring failed: see search-score-*.log" >&2; exit 1; }
            "$PYTHON" "${search[@]}" table 2>&1 | tee -a "$OUT/search.log"
            if [ "$DRY_RUN" != 1 ]; then
                tar czf "$OUT/full-search.tar.gz" -C results full-search
            fi
            ;;
        *) echo "unknown step $step (smoke de-en en-de both search)" >&2; exit 2 ;;
    esac
    echo "== $step took $((SECONDS - started)) s" | tee -a "$OUT/steps.log"
done
