"""Time decoding on the CPU: the incremental decoder against the re-running one, and batched
search against one sentence at a time (the way the Annotated Transformer decodes).

A random model (d_model 256, 3 encoder and 3 decoder layers, 8,000 symbols), source sentences of
20 tokens, 40 output steps (no token ends a sentence, so every search makes exactly 40 steps).
Targets of the decoding issue: incremental/re-running >= 5x for a batch of 32 and >= 2x for one
sentence; batched incremental greedy of 32 against re-running greedy one at a time >= 15x; batched
beam 4 against one-at-a-time beam 4 >= 4x.

Run: ``.venv/bin/python benchmarks/decoding.py`` (or ``make bench``).
"""

import time

import torch

from transformer_lib.data import BOS_ID, VOCAB_SIZE
from transformer_lib.decoding import IncrementalDecoder, RerunDecoder, beam_search, greedy_search
from transformer_lib.model import Transformer, TransformerConfig

BATCH, SOURCE_LENGTH, STEPS = 32, 20, 40
NO_END = -1  # an end-of-sentence id no token has: every search runs to its length limit


def best_time(function, repeats: int = 3) -> float:
    """The best of ``repeats`` runs: the least disturbed by other work on a shared machine."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def greedy(model, state_class, src):
    limits = torch.full((len(src),), STEPS)
    return greedy_search(state_class(model, src), BOS_ID, NO_END, limits)


def beam(model, state_class, src):
    limits = torch.full((len(src),), STEPS)
    return beam_search(state_class(model, src), BOS_ID, NO_END, limits, beam_size=4, alpha=0.6)


def one_at_a_time(search, model, state_class, src):
    return [search(model, state_class, src[i : i + 1]) for i in range(len(src))]


def main() -> None:
    torch.manual_seed(0)
    config = TransformerConfig(
        VOCAB_SIZE, VOCAB_SIZE, d_model=256, d_ff=1024, n_heads=8, n_layers=3, dropout=0.0
    )
    model = Transformer(config).eval()
    src = torch.randint(4, VOCAB_SIZE, (BATCH, SOURCE_LENGTH))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {config}")
    print(f"batch {BATCH}, source length {SOURCE_LENGTH}, {STEPS} output steps\n")

    with torch.inference_mode():
        rows = [
            ("greedy, batch of 32, re-running", lambda: greedy(model, RerunDecoder, src)),
            ("greedy, batch of 32, incremental", lambda: greedy(model, IncrementalDecoder, src)),
            ("greedy, 1 sentence, re-running", lambda: greedy(model, RerunDecoder, src[:1])),
            ("greedy, 1 sentence, incremental", lambda: greedy(model, IncrementalDecoder, src[:1])),
            (
                "greedy, 32 one at a time, re-running",
                lambda: one_at_a_time(greedy, model, RerunDecoder, src),
            ),
            ("beam 4, batch of 32, incremental", lambda: beam(model, IncrementalDecoder, src)),
            (
                "beam 4, 32 one at a time, incremental",
                lambda: one_at_a_time(beam, model, IncrementalDecoder, src),
            ),
        ]
        times = {}
        for label, function in rows:
            times[label] = best_time(function, repeats=1 if "one at a time" in label else 3)
            print(f"{label:42} {1000 * times[label]:9.1f} ms")

    def ratio(slow: str, fast: str, target: float, what: str) -> None:
        value = times[slow] / times[fast]
        verdict = "meets" if value >= target else "MISSES"
        print(f"{what:62} {value:6.1f}x ({verdict} the target {target:g}x)")

    print()
    ratio(
        "greedy, batch of 32, re-running",
        "greedy, batch of 32, incremental",
        5,
        "incremental / re-running, batch of 32",
    )
    ratio(
        "greedy, 1 sentence, re-running",
        "greedy, 1 sentence, incremental",
        2,
        "incremental / re-running, one sentence",
    )
    ratio(
        "greedy, 32 one at a time, re-running",
        "greedy, batch of 32, incremental",
        15,
        "batched incremental / re-running one at a time, 32 sentences",
    )
    ratio(
        "beam 4, 32 one at a time, incremental",
        "beam 4, batch of 32, incremental",
        4,
        "batched beam 4 / beam 4 one at a time, 32 sentences",
    )


if __name__ == "__main__":
    main()
