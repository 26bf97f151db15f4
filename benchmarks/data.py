"""Time the data pipeline on Multi30k train: learning the BPE vocabulary, then tokenizing and
batching all 29,000 pairs (targets on a 2-core CPU: under 30 s and under 10 s).

Run: ``TRANSFORMER_LIB_DATA=/path/to/multi30k .venv/bin/python benchmarks/data.py``
(``make bench`` sets the variable to the shared copy when there is one).
"""

import time

from transformer_lib.data import VOCAB_SIZE, BPETokenizer, encode_pairs, load_multi30k, make_batches


def timed(label: str, function, repeats: int = 3):
    """The best of ``repeats`` runs: the least disturbed by other work on a shared machine."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    print(f"{label:55} {best:6.2f} s (best of {repeats})")
    return result


def main() -> None:
    train = timed("load Multi30k train (29,000 pairs)", lambda: load_multi30k("train"))
    text = [s for pair in train for s in pair]
    bpe = timed(
        f"train the joint BPE vocabulary ({VOCAB_SIZE:,} symbols)",
        lambda: BPETokenizer.train(text, VOCAB_SIZE),
    )

    def tokenize_and_batch():
        pairs = encode_pairs(bpe, train)
        return make_batches(pairs, max_tokens=25_000, seed=0, epoch=0)

    batches = timed("tokenize and batch all pairs (max_tokens=25,000)", tokenize_and_batch)
    pairs = encode_pairs(bpe, train)
    timed("  of which batching (one epoch, max_tokens=25,000)", lambda: make_batches(pairs, 25_000))
    timed("  of which batching (one epoch, max_tokens=2,000)", lambda: make_batches(pairs, 2_000))
    print(f"{len(batches)} batches of up to 25,000 padded tokens per side")


if __name__ == "__main__":
    main()
