"""Time the data pipeline on Multi30k train (29,000 pairs) against the ready-made alternatives:
learning the joint BPE vocabulary (against ``tokenizers``' own ``ByteLevelBPETokenizer`` with the
same size), encoding every pair (against that tokenizer's ``encode_batch``), and batching one epoch
by length under a token budget (against the PyTorch tutorials' ``DataLoader`` of shuffled pairs in
batches of 128 sentences, padded with ``pad_sequence``). For the batches, also the share of
padding each way produces: the work a GPU would spend on nothing.

Each figure is the best of three runs, the least disturbed by other work on a shared machine.

Run: ``TRANSFORMER_LIB_DATA=/path/to/multi30k python benchmarks/data.py`` (``make bench`` sets the
variable to the shared copy when there is one).
"""

import argparse
import time
from pathlib import Path

import common
import torch
from tokenizers import ByteLevelBPETokenizer
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from transformer_lib.batching import encode_pairs, make_batches
from transformer_lib.data import DataError, load_multi30k
from transformer_lib.tokenizer import PAD_ID, SPECIAL_TOKENS, VOCAB_SIZE, BPETokenizer

TUTORIAL_BATCH = 128  # sentences per batch in the PyTorch translation tutorial


def best_of(function, repeats: int = 3):
    """The shortest of ``repeats`` runs in seconds, and the result of the last."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def tutorial_batches(pairs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch the tutorial way: shuffled pairs, fixed batch size, padded to the longest."""

    def collate(batch):
        src = [torch.tensor([*s, 2]) for s, _ in batch]  # + </s>
        tgt = [torch.tensor([1, *t, 2]) for _, t in batch]  # <s> ... </s>
        return (
            pad_sequence(src, batch_first=True, padding_value=PAD_ID),
            pad_sequence(tgt, batch_first=True, padding_value=PAD_ID),
        )

    generator = torch.Generator().manual_seed(0)
    loader = DataLoader(
        pairs, batch_size=TUTORIAL_BATCH, shuffle=True, collate_fn=collate, generator=generator
    )
    return list(loader)


def padding_share(tensors) -> float:
    """The fraction of positions that hold padding."""
    padded = sum(t.numel() for t in tensors)
    return sum(int((t == PAD_ID).sum()) for t in tensors) / padded


def measure(data_dir: Path | None = None) -> dict:
    train = load_multi30k("train", "de", "en", data_dir)
    text = [s for pair in train for s in pair]
    ours_s, bpe = best_of(lambda: BPETokenizer.train(text, VOCAB_SIZE))

    def peer_train():
        peer = ByteLevelBPETokenizer(add_prefix_space=True)
        peer.train_from_iterator(
            text,
            VOCAB_SIZE,
            min_frequency=2,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        return peer

    peer_s, peer = best_of(peer_train)
    results = {"train BPE": {"ours_s": ours_s, "peer_s": peer_s}}
    ours_s, pairs = best_of(lambda: encode_pairs(bpe, train))
    peer_s, _ = best_of(
        lambda: (peer.encode_batch([s for s, _ in train]), peer.encode_batch([t for _, t in train]))
    )
    results["encode"] = {"ours_s": ours_s, "peer_s": peer_s}
    ours_s, batches = best_of(lambda: make_batches(pairs, max_tokens=25_000, seed=0, epoch=0))
    peer_s, loader = best_of(lambda: tutorial_batches(pairs))
    results["batch one epoch"] = {
        "ours_s": ours_s,
        "peer_s": peer_s,
        "ours_batches": len(batches),
        "peer_batches": len(loader),
        "ours_padding": padding_share([b.src for b in batches] + [b.tgt_in for b in batches]),
        "peer_padding": padding_share([s for s, _ in loader] + [t for _, t in loader]),
    }
    return results


def report(results: dict) -> list[dict]:
    print("Multi30k train, 29,000 pairs; best of 3 runs")
    lines = [
        common.compare(
            f"{name} (ours / tokenizers)"
            if name != "batch one epoch"
            else f"{name} (ours / DataLoader)",
            results[name]["ours_s"],
            results[name]["peer_s"],
            "s",
            higher_is_better=False,
        )
        for name in ("train BPE", "encode", "batch one epoch")
    ]
    epoch = results["batch one epoch"]
    lines.append(
        common.compare(
            "padding share of the batches",
            100 * epoch["ours_padding"],
            100 * epoch["peer_padding"],
            "%",
            higher_is_better=False,
        )
    )
    print(
        f"  {epoch['ours_batches']} batches of at most 25,000 padded tokens per side; "
        f"{epoch['peer_batches']} batches of {TUTORIAL_BATCH} sentences"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    parser.add_argument("--data-dir", type=Path, default=None, help="Multi30k's files")
    args = parser.parse_args()
    device = common.setup(parser, args)  # the pipeline runs on the CPU whatever the device
    try:
        results = measure(args.data_dir)
    except (DataError, FileNotFoundError) as err:
        parser.error(str(err))
    results["comparisons"] = report(results)
    common.save(args, device, "data", results)


if __name__ == "__main__":
    main()
