#!/usr/bin/env bash
# The Table 3 sweep (book/variations.md) on one GPU, as commands of at most 10 minutes each,
# resumable: every finished variant is a line of results/table3/variants.jsonl, and a rerun skips
# it. Sized for about 25 minutes of one H100 (book/sweep.md, "Running the sweeps"); that figure
# is an estimate until `calibrate` has measured the speed of the GPU at hand.
#
# Prepare once, in the repository root (on a CPU, about 20 s; data/ and .whl/ are git-ignored):
#   mkdir -p data && cp -r <your Multi30k folder> data/multi30k
#   bash tools/gpu/wheels.sh     (on a machine with network: the pinned tokenizers and sacrebleu)
#   PYTHONPATH=. python tools/table3.py --profile full --prepare   # the sweep's tokenizer
# and bring data/, .whl/ and runs/table3-full/ along with the code. Every command first installs
# the wheels of .whl/ and stops if tokenizers or sacrebleu is not the version requirements.txt
# pins (see tools/gpu/environment.sh).
# Every command below then uses runs/table3-full/tokenizer-en-de-8000.json, so every part of the
# sweep uses the same tokenizer: keep data/multi30k and that file beside the code.
#
# Then, from the repository root:
#   1. LANES=3 bash tools/gpu/table3.sh calibrate       about 1-2 minutes
#      Trains the base and the LSTM for 200 updates, then LANES bases at once, each in a process
#      of its own (LANES=1: none), and prints the measured speed, how many times as fast the card
#      trains with the lanes, the sweep's projected time at 2,000 updates in LANES lanes, and the
#      number of updates that would fit 25 minutes. If the projection is over budget, pass that
#      number as STEPS to every sweep command.
#   2. [STEPS=<n>] LANES=3 bash tools/gpu/table3.sh sweep
#      Runs LANES variants at a time (default 1: one after the other), each in a process of its
#      own, since one of these models leaves most of the card idle (book/sweep.md, "Running
#      the sweeps").
#      Repeat until its output ends with "sweep complete" (three commands by the estimate for
#      one lane).
#      The sweep writes results/table3/ in the repository and also copies variants.jsonl,
#      manifest.json, buckets.json and hypotheses/ to $OUT/table3/ (default /tmp/table3-out),
#      for a GPU machine other than the one you commit from: copy them into results/table3/
#      there after each command. Commit results/table3/ (small text only: no weights).
#      The manifest names the commit of the code: from git in a checkout, otherwise from
#      TRANSFORMER_LIB_COMMIT, which a copy without .git must set, e.g.
#        TRANSFORMER_LIB_COMMIT=<output of git rev-parse HEAD> bash tools/gpu/table3.sh sweep
#   3. pytest -n 0 tests/test_chapters.py -k variations, which renders the chapter from the
#      results: its table, charts and row-by-row verdicts are computed from the committed lines.
#
# A variant cut off by the time limit resumes from its last checkpoint (every quarter of its
# updates) while runs/ is kept between the commands, and restarts otherwise.
#
# PROFILE=ci runs the same commands at toy scale (results in runs/table3-ci/results). DRY_RUN=1
# runs them at that scale on the CPU, any GPU hidden, and `calibrate` for 2 updates (about 20 s):
# a check of the script on any machine. RUNS names the folder of the work folders (default runs).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=. TRANSFORMER_LIB_DATA="${TRANSFORMER_LIB_DATA:-data/multi30k}"
PYTHON="${PYTHON:-python3}"
device=()
if [[ "${DRY_RUN:-0}" == 1 ]]; then
  export CUDA_VISIBLE_DEVICES=""  # the CPU trains even where there is a GPU
  PROFILE=ci CALIBRATE="${CALIBRATE:-2}" device=(--device cpu)
fi
source tools/gpu/environment.sh  # the pinned tokenizers and sacrebleu, or a stop
OUT="${OUT:-/tmp/table3-out}"
RUNS="${RUNS:-runs}"
mkdir -p "$OUT/table3"
options=()
if [[ -n "${STEPS:-}" ]]; then options=(--max-steps "$STEPS"); fi
options+=(--lanes "${LANES:-1}")
PROFILE="${PROFILE:-full}"
work="$RUNS/table3-$PROFILE"
case "$PROFILE" in
  full) results=results/table3 tokenizer="$work/tokenizer-en-de-8000.json" ;;
  ci) results="$work/results" tokenizer="$work/tokenizer-en-de-1000.json" ;;
  *) echo "PROFILE must be full or ci, got $PROFILE" >&2; exit 2 ;;
esac
if [[ "$PROFILE" == full && ! -f "$tokenizer" ]]; then
  echo "$tokenizer is missing: prepare it with tools/table3.py --prepare (see the top of $0)" >&2
  exit 2
fi

case "${1:-}" in
  calibrate)
    [[ "${DRY_RUN:-0}" == 1 ]] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    "$PYTHON" tools/table3.py --profile "$PROFILE" --work "$work" --out "$results" \
      --calibrate "${CALIBRATE:-200}" --quiet "${options[@]}" "${device[@]}" \
      2>&1 | tee "$OUT/table3/calibration.txt"
    ;;
  sweep)
    if [[ ! -e .git && -z "${TRANSFORMER_LIB_COMMIT:-}" ]]; then
      echo "no .git here: set TRANSFORMER_LIB_COMMIT=<commit> so that the manifest names the code" >&2
      exit 2
    fi
    # 600 s per command: start no variant after about 480 s, stop hard at 560 s, then copy.
    timeout 560 "$PYTHON" tools/table3.py --profile "$PROFILE" --work "$work" --out "$results" \
      --budget-s "${BUDGET_S:-480}" --quiet "${options[@]}" "${device[@]}"
    status=$?
    cp -r "$results/variants.jsonl" "$results/manifest.json" "$results/buckets.json" \
      "$results/hypotheses" "$OUT/table3/" 2>/dev/null
    ls -l "$OUT/table3"
    exit "$status"
    ;;
  *)
    echo "usage: bash tools/gpu/table3.sh calibrate|sweep   (see the comments at the top)" >&2
    exit 2
    ;;
esac
