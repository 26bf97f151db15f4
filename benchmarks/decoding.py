"""Time decoding: the incremental decoder against the re-running one, and batched search against
one sentence at a time (the way the Annotated Transformer of Rush et al., harvardnlp, 2018, decodes).

A random model (d_model 256, 3 encoder and 3 decoder layers, the book's 8,000-symbol vocabulary),
source sentences of 20 tokens, outputs of 40 and of 100 steps (no token ends a sentence, so every
search makes exactly that many steps). The ratios it checks, at 40 steps: incremental /
re-running >= 5x for a batch of 32 and >= 2x for one sentence; batched incremental greedy of 32
against re-running greedy one at a time >= 15x; batched beam 4 against one-at-a-time beam 4 >= 4x.

Why one sentence cannot gain much at 40 steps: an incremental step multiplies one row by every
weight matrix of the decoder and of the vocabulary projection, and a matrix-vector product costs
about as much as reading the matrix. The re-running decoder multiplies the same matrices at every
step, by t rows instead of one, which for t < 40 costs little more than the read. The benchmark
times those products alone in the same run and prints them beside the step.

Run: ``.venv/bin/python benchmarks/decoding.py [--steps 40 100]`` (``make bench`` runs it); on a GPU
``--device cuda --size base --test-set`` also times translating test_2016_flickr at beam 4 with a
base-size model (random weights: outputs run to the length limit, a worst case).
"""

import argparse
import time
from pathlib import Path

import common
import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lib.data import load_multi30k
from transformer_lib.decoding import (
    RerunDecoder,
    SearchConfig,
    SentenceGroupedDecoder,
    beam_search,
    greedy_search,
    translate,
)
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.tokenizer import BOS_ID, VOCAB_SIZE, BPETokenizer

BATCH, SOURCE_LENGTH = 32, 20
INCREMENTAL = SentenceGroupedDecoder  # the incremental decoder translate uses
NO_END = -1  # an end-of-sentence id no token has: every search runs to its length limit
TARGETS = {  # (slow row, fast row) -> the ratio the fast row should reach, at 40 steps
    ("greedy, batch of 32, re-running", "greedy, batch of 32, incremental"): 5,
    ("greedy, 1 sentence, re-running", "greedy, 1 sentence, incremental"): 2,
    ("greedy, 32 one at a time, re-running", "greedy, batch of 32, incremental"): 15,
    ("beam 4, 32 one at a time, incremental", "beam 4, batch of 32, incremental"): 4,
}


SIZES = {  # a small model for a CPU; the paper's base model for the GPU figures
    "small": dict(d_model=256, d_ff=1024, n_heads=8, n_layers=3),
    "base": dict(d_model=512, d_ff=2048, n_heads=8, n_layers=6),
}


def best_time(function, device: torch.device, repeats: int = 3) -> float:
    """The best of ``repeats`` runs: the least disturbed by other work on a shared machine."""
    times = []
    for _ in range(repeats):
        common.sync(device)
        started = time.perf_counter()
        function()
        common.sync(device)
        times.append(time.perf_counter() - started)
    return min(times)


def greedy(model, state_class, src, steps):
    limits = torch.full((len(src),), steps, device=src.device)
    return greedy_search(state_class(model, src), BOS_ID, NO_END, limits)


def beam(model, state_class, src, steps):
    limits = torch.full((len(src),), steps, device=src.device)
    return beam_search(state_class(model, src), BOS_ID, NO_END, limits, beam_size=4, alpha=0.6)


def one_at_a_time(search, model, state_class, src, steps):
    return [search(model, state_class, src[i : i + 1], steps) for i in range(len(src))]


def step_matrices(model: Transformer) -> list[tuple[Tensor, Tensor | None]]:
    """(weight, bias) of every matrix one incremental step multiplies, in order: per decoder layer
    W^Q W^K W^V of self-attention, its W^O, W^Q and W^O of encoder-decoder attention (its keys and
    values are computed once per sentence), the two FFN matrices; then the vocabulary projection."""
    d = model.config.d_model
    matrices = []
    for layer in model.decoder.layers:
        own, cross, ffn = layer.self_attn, layer.cross_attn, layer.feed_forward
        matrices += [
            (own.in_proj.weight, own.in_proj.bias),
            (own.out_proj.weight, own.out_proj.bias),
            (cross.in_proj.weight[:d], cross.in_proj.bias[:d]),
            (cross.out_proj.weight, cross.out_proj.bias),
            (ffn.linear_1.weight, ffn.linear_1.bias),
            (ffn.linear_2.weight, ffn.linear_2.bias),
        ]
    return matrices + [(model.generator.weight, None)]


def matrix_floor(model: Transformer, device: torch.device) -> float:
    """Seconds to multiply one row by every matrix of a step, and nothing else: the part of a
    one-sentence step that the re-running decoder pays too (it multiplies the same matrices)."""
    matrices = step_matrices(model)

    def one_pass():
        for weight, bias in matrices:
            F.linear(torch.ones(1, weight.shape[1], device=device), weight, bias)

    return best_time(lambda: [one_pass() for _ in range(20)], device) / 20


def rows_for(model, src, steps: int, with_slow_rows: bool):
    rows = [
        ("greedy, batch of 32, re-running", lambda: greedy(model, RerunDecoder, src, steps)),
        ("greedy, batch of 32, incremental", lambda: greedy(model, INCREMENTAL, src, steps)),
        ("greedy, 1 sentence, re-running", lambda: greedy(model, RerunDecoder, src[:1], steps)),
        (
            "greedy, 1 sentence, incremental",
            lambda: greedy(model, INCREMENTAL, src[:1], steps),
        ),
    ]
    if with_slow_rows:
        rows += [
            (
                "greedy, 32 one at a time, re-running",
                lambda: one_at_a_time(greedy, model, RerunDecoder, src, steps),
            ),
            (
                "beam 4, batch of 32, incremental",
                lambda: beam(model, INCREMENTAL, src, steps),
            ),
            (
                "beam 4, 32 one at a time, incremental",
                lambda: one_at_a_time(beam, model, INCREMENTAL, src, steps),
            ),
        ]
    return rows


def time_test_set(model, device, data_dir) -> dict:
    """Seconds to translate test_2016_flickr (German to English) with beam 4, batches of 64.

    The weights are random, so outputs rarely end before the limit (input length + 50): a worst
    case for the time of a trained model of the same size."""
    pairs = load_multi30k("train", "de", "en", data_dir)
    tokenizer = BPETokenizer.train([s for pair in pairs for s in pair], VOCAB_SIZE)
    sources = [source for source, _ in load_multi30k("test_2016_flickr", "de", "en", data_dir)]
    search = SearchConfig(beam_size=4)
    translate(model, tokenizer, sources[:64], search)  # warm-up: kernels, allocator
    seconds = best_time(lambda: translate(model, tokenizer, sources, search), device, 1)
    print(f"test_2016_flickr, {len(sources)} sentences, beam 4: {seconds:.1f} s (random weights)")
    return {"sentences": len(sources), "beam_size": 4, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    parser.add_argument("--steps", type=int, nargs="+", default=[40, 100], help="output lengths")
    parser.add_argument(
        "--test-set",
        action="store_true",
        help="also time translating test_2016_flickr at beam 4 (needs the data set)",
    )
    parser.add_argument("--data-dir", type=Path, help="folder with the Multi30k .gz files")
    args = parser.parse_args()
    device = common.setup(parser, args)

    torch.manual_seed(0)
    config = TransformerConfig(VOCAB_SIZE, VOCAB_SIZE, dropout=0.0, **SIZES[args.size])
    model = Transformer(config).eval().to(device)
    src = torch.randint(4, VOCAB_SIZE, (BATCH, SOURCE_LENGTH), device=device)
    print(f"torch {torch.__version__} on {device}, {torch.get_num_threads()} threads; {config}")
    print(f"batch {BATCH}, source length {SOURCE_LENGTH}\n")

    with torch.inference_mode():
        times = {}
        for steps in args.steps:
            print(f"-- {steps} output steps")
            # The one-at-a-time rows are the slow peers of the 40-step targets; skip them elsewhere.
            for label, function in rows_for(model, src, steps, with_slow_rows=steps == 40):
                repeats = 1 if "one at a time" in label else 3
                times[steps, label] = best_time(function, device, repeats)
                tokens = (1 if "1 sentence" in label else BATCH) * steps
                print(
                    f"{label:42} {1000 * times[steps, label]:9.1f} ms"
                    f" {tokens / times[steps, label]:9.0f} tokens/s"
                )
            print()

    results = {"config": vars(config), "batch": BATCH, "source_length": SOURCE_LENGTH}
    results["rows"] = [
        {"steps": steps, "label": label, "seconds": seconds}
        for (steps, label), seconds in times.items()
    ]
    results["ratios"] = []
    for steps in args.steps:
        print(f"-- ratios at {steps} output steps")
        for (slow, fast), target in TARGETS.items():
            if (steps, slow) not in times:
                continue
            value = times[steps, slow] / times[steps, fast]
            verdict = ""
            if steps == 40:
                verdict = f" ({'meets' if value >= target else 'MISSES'} the target {target:g}x)"
            print(f"{slow} / {fast.split(', ')[-1]}: {value:.1f}x{verdict}")
            results["ratios"].append(
                {"steps": steps, "slow": slow, "fast": fast, "ratio": value, "target": target}
            )
        print()

    with torch.inference_mode():
        floor = matrix_floor(model, device)
    print("-- one sentence: what a step costs beyond multiplying its matrices once")
    print(f"one row times every matrix of a step, alone: {1e3 * floor:.2f} ms")
    for steps in args.steps:
        incremental = times[steps, "greedy, 1 sentence, incremental"] / steps
        rerun = times[steps, "greedy, 1 sentence, re-running"] / steps
        print(
            f"{steps} steps: incremental {1e3 * incremental:.2f} ms/step"
            f" ({floor / incremental:.0%} of it is that product);"
            f" re-running {1e3 * rerun:.2f} ms/step"
        )
    results["matrix_floor_s"] = floor
    if args.test_set:
        with torch.inference_mode():
            results["test_2016_flickr"] = time_test_set(model, device, args.data_dir)
    common.save(args, device, "decoding", results)


if __name__ == "__main__":
    main()
