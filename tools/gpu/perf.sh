#!/usr/bin/env bash
# The performance benchmarks on one GPU (book/performance.md), as a few steps that each take at
# most about 10 minutes and write their own JSON, so that a stopped run resumes at the next step.
#
# Prepare, in the repository root (data/ and .whl/ are git-ignored):
#   mkdir -p data && cp -r <your Multi30k folder> data/multi30k
#   bash tools/gpu/wheels.sh     (on a machine with network: the pinned tokenizers and sacrebleu)
# and bring data/ and .whl/ along with the code. Every command first installs the wheels of
# .whl/ and stops if tokenizers or sacrebleu is not the version requirements.txt pins (see
# tools/gpu/environment.sh).
# Then, from the repository root, in this order (the times are estimates for one H100, not
# measurements):
#   1. bash tools/gpu/perf.sh check train_step     (~1 min check, then ~3 min)
#   2. bash tools/gpu/perf.sh compile              (~5 min: compiling two base models dominates)
#   3. bash tools/gpu/perf.sh scaling attention    (~2 min)
#   4. bash tools/gpu/perf.sh decoding             (~3 min; incremental vs re-running, test_2016 at beam 4)
#   5. bash tools/gpu/perf.sh profile              (~1 min: where a base step's time goes, ours and
#                                                   nn.Transformer, by operator, and how busy the
#                                                   GPU was)
#   6. bash tools/gpu/perf.sh graphs               (~3 min: ours compiled with CUDA graphs,
#                                                   beside ours and nn.Transformer eager)
#   7. bash tools/gpu/perf.sh resume               (~2 min: does a stopped and resumed run reach
#                                                   the weights of an unbroken one on the GPU,
#                                                   with and without deterministic algorithms)
#   8. bash tools/gpu/perf.sh loop                 (~6-9 min: the `full` profile's training loop,
#                                                   eager against torch.compile and against
#                                                   other attention kernels, 300 updates each;
#                                                   compiling cold took 208 s on an H200)
#   9. bash tools/gpu/perf.sh fast_paths           (two runs, each stopped before 9 minutes, not
#                                                   timed yet: the training loop's fast paths at
#                                                   the base size in bf16, beside our eager step
#                                                   and nn.Transformer eager. fast-packing: packed
#                                                   batches (flex_attention) against padded ones,
#                                                   both compiled for any shape; fast-buckets:
#                                                   packed rows in buckets of 1,024 tokens, a
#                                                   graph per bucket with CUDA graphs, fused Adam.
#                                                   Fused Adam alone is timed in both. Should
#                                                   fast-buckets run out of time compiling, set
#                                                   LENGTH_BUCKET=2048: fewer buckets, more filler)
# Each step stops itself before 10 minutes; a step that overran leaves its log under $OUT/logs
# but no JSON.
# DRY_RUN=1 bash tools/gpu/perf.sh fast_paths checks that step on the CPU (any GPU hidden) in
# under a minute: the small model, random batches, one round, torch.compile with its "eager"
# backend (graphs captured, PyTorch's own kernels: the plumbing, not the speed), its JSON under
# $OUT/results/perf-dry-run.
# The manifests name the commit of the code: from git in a checkout, otherwise from
# TRANSFORMER_LIB_COMMIT, which a copy without .git must set, e.g.
#   TRANSFORMER_LIB_COMMIT=<output of git rev-parse HEAD> bash tools/gpu/perf.sh train_step
# Everything lands under $OUT: results/perf-<gpu>/<benchmark>.json (copy that folder into the
# repository's results/ and commit it) and logs/<step>.txt (the printed tables).
set -euo pipefail

: "${OUT:?set OUT to the folder that receives the results and the logs}"
export PYTHONPATH=.
export TRANSFORMER_LIB_DATA="${TRANSFORMER_LIB_DATA:-data/multi30k}"
export TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1  # the logs keep what a step printed even when its time limit ends it
# After an out-of-memory probe, freed blocks are reused instead of fragmenting the next probe.
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
PYTHON="${PYTHON:-python3}"
DRY_RUN="${DRY_RUN:-0}"
if [ "$DRY_RUN" = 1 ]; then
    export CUDA_VISIBLE_DEVICES=""  # the CPU runs the step even where there is a GPU
    LENGTH_BUCKET="${LENGTH_BUCKET:-16}"  # the random batches' rows are a few dozen tokens
fi
LENGTH_BUCKET="${LENGTH_BUCKET:-1024}"
source "$(dirname "$0")/environment.sh"  # the pinned tokenizers and sacrebleu, or a stop

if [ "$#" -eq 0 ]; then
    echo "usage: bash tools/gpu/perf.sh STEP... (check train_step compile scaling attention decoding profile graphs resume loop fast_paths)" >&2
    exit 2
fi
if [ "$DRY_RUN" = 1 ] && [ "$*" != fast_paths ]; then
    echo "DRY_RUN=1 checks the fast_paths step alone: bash tools/gpu/perf.sh fast_paths" >&2
    exit 2
fi
if [ "$DRY_RUN" != 1 ] && [ ! -f "$TRANSFORMER_LIB_DATA/train.de.gz" ]; then
    echo "no Multi30k in $TRANSFORMER_LIB_DATA: copy it to data/multi30k (see the top of this file)" >&2
    exit 2
fi
if [ ! -e .git ] && [ -z "${TRANSFORMER_LIB_COMMIT:-}" ]; then
    echo "no .git here: set TRANSFORMER_LIB_COMMIT=<commit> so that the manifests name the code" >&2
    exit 2
fi

if [ "$DRY_RUN" = 1 ]; then
    results="$OUT/results/perf-dry-run"
    # The base size's switches, shrunk to the small model on random batches.
    fast=(--device cpu --size small --data random --max-tokens 64 --batches 2 --rounds 1
          --compile-backend eager)
else
    slug=$("$PYTHON" -c 'import sys, torch; sys.path.insert(0, "benchmarks"); import common
print(common.device_slug(torch.device("cuda")))')
    results="$OUT/results/perf-$slug"
    fast=(--device cuda --size base)
fi
mkdir -p "$results" "$OUT/logs"
if [ "$DRY_RUN" != 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv \
        > "$OUT/logs/nvidia-smi.csv" || true
fi

# Each step runs under its own limit, below 10 minutes, so that one step that overruns does not
# take the results of the others with it.
step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    local started=$SECONDS
    timeout "$limit" "$PYTHON" "$@" 2>&1 | tee "$OUT/logs/$name.txt"
    echo "== $name took $((SECONDS - started)) s"
}

for name in "$@"; do
    case "$name" in
        check)  # every path but compilation, at a small size, before spending minutes
            step check 240 benchmarks/train_step.py --device cuda --size small --rounds 1 \
                --batches 2 --compile no --no-save
            step check-scaling 120 benchmarks/scaling.py --device cuda --size small --rounds 1 \
                --no-save
            ;;
        train_step)  # ours vs nn.Transformer, MFU, the speed-ups, memory, largest budget
            step train_step 540 benchmarks/train_step.py --device cuda --size base --compile no \
                --out "$results"
            ;;
        compile)  # the same with torch.compile added (ours and the peer), without the memory
            step compile 540 benchmarks/train_step.py --device cuda --size base --compile yes \
                --no-memory --name train_step_compiled --out "$results"
            ;;
        scaling)  # time per token, lengths 16 to 1024, base model, bf16
            step scaling 300 benchmarks/scaling.py --device cuda --size base --out "$results"
            ;;
        attention)
            step attention 120 benchmarks/attention.py --device cuda --size base --out "$results"
            ;;
        decoding)
            step decoding 300 benchmarks/decoding.py --device cuda --size base --test-set --out "$results"
            ;;
        profile)  # the profiler over three base updates: products, attention, everything else
            step profile 240 benchmarks/profile_step.py --device cuda --size base --out "$results"
            ;;
        graphs)  # CUDA graphs on top of torch.compile: what launching kernels one by one costs
            step graphs 540 benchmarks/train_step.py --device cuda --size base --compile graphs \
                --no-memory --name train_step_graphs --out "$results"
            ;;
        loop)  # the full profile's own loop: eager, compiled, other attention kernels
            step loop 540 benchmarks/train_loop.py --device cuda --size full --updates 300 \
                --out "$results"
            ;;
        fast_paths)  # packing, length buckets and fused Adam, each beside nn.Transformer eager
            step fast-packing 530 benchmarks/train_step.py "${fast[@]}" --fast-paths packing \
                --no-memory --name train_step_fast_packing --out "$results"
            step fast-buckets 530 benchmarks/train_step.py "${fast[@]}" --fast-paths buckets \
                --length-bucket "$LENGTH_BUCKET" --no-memory --name train_step_fast_buckets \
                --out "$results"
            ;;
        resume)  # exact resumption of the ci profile's recipe, as it trains and deterministic
            step resume 240 benchmarks/resume.py --device cuda --size ci --out "$results"
            step resume-deterministic 240 benchmarks/resume.py --device cuda --size ci \
                --deterministic --out "$results"
            ;;
        *)
            echo "unknown step $name: choose among check train_step compile scaling attention decoding profile graphs resume loop fast_paths" >&2
            exit 2
            ;;
    esac
done
