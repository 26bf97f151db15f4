#!/usr/bin/env bash
# The laptop profile trained again with other seeds, in both directions: how much of one run's
# score is its seed (chapter "The real run"). Each run takes about an hour of two cores; run this
# on an otherwise idle machine, in the background:
#
#     nohup bash tools/laptop_seeds.sh > runs/laptop-seeds.log 2>&1 &
#
# Run it again after an interruption: each run resumes from its last checkpoint, and a finished
# run only has its report written again. Seed 0 is the recorded runs'.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
for run in de-en:1 en-de:1 en-de:2 de-en:2; do
    pair=${run%%:*} seed=${run##*:}
    src=${pair%%-*} tgt=${pair##*-}
    report=results/laptop-seeds/$pair-seed_$seed
    if [ -f "$report/bleu.json" ]; then
        echo "$report: already written"
    else
        "$python" tools/real_run.py --profile laptop --src "$src" --tgt "$tgt" --seed "$seed" \
            --work "runs/laptop-$pair-seed_$seed" --results "$report" --quiet
    fi
    # Its validation scores at the recipe's window for each alpha of the grid, the yardstick of
    # the chapter "How the profiles were chosen" (a choice already scored is skipped).
    "$python" tools/evaluation_choices.py --checkpoints "runs/laptop-$pair-seed_$seed/checkpoints" \
        --src "$src" --tgt "$tgt" --out "results/evaluation-choices/seed_$seed-$pair.jsonl"
done
