"""How the time of a training step per token grows with the sequence length, ours against
``nn.Transformer``, from 16 to 1024 tokens, beside the FLOP count of the performance chapter.

Every batch holds the same number of tokens (pairs x length, no padding, source and target of the
same length), so a constant time per token would mean the cost is linear in the length. Table 1
says why it is not: self-attention does O(n^2 d) work per layer, the projections and the
feed-forward network O(n d^2). Per token, the count is a + b n; the script prints the measured
time per token, the model's FLOPs per token, and the length at which the attention's n-dependent
share equals the rest, for the count and for a straight-line fit of the times.

Run: ``python benchmarks/scaling.py`` (CPU, small model), ``--device cuda --size base`` on a GPU.
"""

import argparse
import statistics
from contextlib import nullcontext

import common
import numpy as np
import peers
import torch

from transformer_lib.book.performance import training_flops
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.schedule import make_optimizer
from transformer_lib.tokenizer import PAD_ID
from transformer_lib.training import label_smoothed_loss

LENGTHS = (16, 32, 64, 128, 256, 512, 1024)
SIZES = {  # (model, tokens per batch and side, timed rounds)
    "small": (
        TransformerConfig(2000, 2000, d_model=256, d_ff=1024, n_heads=4, n_layers=3),
        2048,
        2,
    ),
    "base": (TransformerConfig.base(8000), 16384, 5),
}


def measure(
    config: TransformerConfig,
    tokens: int,
    device: torch.device,
    rounds: int,
    lengths=LENGTHS,
    bf16: bool | None = None,
) -> dict:
    """Seconds per target token of a training step, ours and the peer's, at every length."""
    bf16 = device.type == "cuda" if bf16 is None else bf16
    torch.manual_seed(0)
    ours = Transformer(config).to(device).train()
    peer = peers.TorchTransformer(config)
    peers.copy_weights(ours, peer)
    peer.to(device).train()
    models = {"ours": ours, "nn.Transformer": peer}
    optimizers = {name: make_optimizer(m, config.d_model)[0] for name, m in models.items()}
    autocast = torch.autocast(device.type, torch.bfloat16) if bf16 else nullcontext()
    rows = []
    generator = torch.Generator().manual_seed(0)
    for length in lengths:
        pairs = max(tokens // length, 1)
        batch = peers.random_batch(config, pairs, length, generator).to(device)

        def step(name, batch=batch):
            with autocast:
                logits = models[name](batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss, count = label_smoothed_loss(logits, batch.tgt_out, PAD_ID)
            (loss / count).backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)

        functions = {name: (lambda name=name: step(name)) for name in models}
        times = common.time_in_turns(functions, rounds, warmup=1, device=device)
        n_tokens = int((batch.tgt_out != PAD_ID).sum())
        flops = training_flops(config, [length] * pairs, [length] * pairs)
        row = {"length": length, "pairs": pairs, "target_tokens": n_tokens}
        row["flops_per_token"] = flops / n_tokens
        for name, seconds in times.items():
            row[f"{name} s_per_token"] = statistics.median(seconds) / n_tokens
            row[f"{name} timings_s"] = seconds
        rows.append(row)
    # FLOPs per token are a + b n exactly (see the chapter); the measured times, roughly.
    n = np.array([r["length"] for r in rows], dtype=float)
    count = np.polyfit(n, [r["flops_per_token"] for r in rows], 1)
    # Short sequences pay fixed costs per sequence that the count ignores (many small products
    # and kernel calls): the line through the times starts at 64 tokens when it can.
    long = [r for r in rows if r["length"] >= 64]
    long = long if len(long) >= 2 else rows
    fit = np.polyfit([r["length"] for r in long], [r["ours s_per_token"] for r in long], 1)
    return {
        "config": vars(config),
        "tokens_per_batch": tokens,
        "bf16": bf16,
        "rows": rows,
        "flops_per_token_line": {"a": count[1], "b": count[0]},
        "seconds_per_token_line": {"a": fit[1], "b": fit[0]},
        "crossover_length_flops": count[1] / count[0],
        "crossover_length_measured": fit[1] / fit[0] if fit[0] > 0 else None,
    }


def report(results: dict) -> list[dict]:
    c = results["config"]
    print(
        f"training step per token against length, d_model={c['d_model']}, N={c['n_layers']}+"
        f"{c['n_layers']}, {results['tokens_per_batch']} tokens per batch and side, "
        f"{'bf16' if results['bf16'] else 'float32'}"
    )
    lines = []
    for row in results["rows"]:
        lines.append(
            common.compare(
                f"n = {row['length']:4d} ({row['flops_per_token'] / 1e6:7.1f} MFLOP/token)",
                1e6 * row["ours s_per_token"],
                1e6 * row["nn.Transformer s_per_token"],
                "us/token",
                higher_is_better=False,
            )
        )
    measured = results["crossover_length_measured"]
    print(
        f"  the n-dependent part equals the rest at n = {results['crossover_length_flops']:,.0f} "
        "by the FLOP count, "
        + (
            f"at n = {measured:,.0f} by a line through our times (from n = 64)"
            if measured
            else "while a line through our times (from n = 64) does not rise: noise or overheads"
        )
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    args = parser.parse_args()
    device = common.setup(parser, args)
    config, tokens, rounds = SIZES[args.size]
    results = measure(config, tokens, device, args.rounds or rounds)
    results["comparisons"] = report(results)
    common.save(args, device, "scaling", results)


if __name__ == "__main__":
    main()
