"""Time multi-head self-attention, forward and backward, on the CPU: our ``MultiHeadAttention``
(its default fast path, ``scaled_dot_product_attention``), PyTorch's ``nn.MultiheadAttention``
with the same sizes, and our written-out path (``need_weights=True``), at the paper's base width
(B, L, d_model) = (32, 64, 512) with 8 heads, in float32; once without a mask (the encoder's
self-attention on a batch without padding) and once with the decoder's causal mask.

The three are timed in turns within each round, so that other work on a shared machine disturbs
them alike; each figure is the median of the rounds. Ratios above 1 mean ours is faster.

Run: ``.venv/bin/python benchmarks/attention.py [--threads N] [--rounds N]``
"""

import argparse
import statistics
import time

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention, subsequent_mask

BATCH, LENGTH, D_MODEL, HEADS = 32, 64, 512, 8


def forward_backward(attend, x: torch.Tensor, grad: torch.Tensor, parameters) -> float:
    """Seconds for one forward and backward pass of ``attend(x)``."""
    x.grad = None
    for p in parameters:
        p.grad = None
    started = time.perf_counter()
    attend(x).backward(grad)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (2)")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per module (15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (3)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    ours = MultiHeadAttention(D_MODEL, HEADS)
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
    with torch.no_grad():  # the same weights, though timing does not depend on them
        theirs.in_proj_weight.copy_(ours.in_proj.weight)
        theirs.in_proj_bias.copy_(ours.in_proj.bias)
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    x = torch.randn(BATCH, LENGTH, D_MODEL, requires_grad=True)  # (B, L, d_model)
    grad = torch.randn(BATCH, LENGTH, D_MODEL)
    print(
        f"self-attention forward + backward, (B, L, d_model) = ({BATCH}, {LENGTH}, {D_MODEL}), "
        f"{HEADS} heads, float32, CPU, {torch.get_num_threads()} thread(s), "
        f"median of {args.rounds} rounds after {args.warmup} warm-up"
    )
    for title, mask in [("no mask", None), ("causal mask", subsequent_mask(LENGTH))]:
        # PyTorch's bool attn_mask means "may NOT attend": the inverse of ours, (L, L).
        torch_mask = None if mask is None else ~mask[0, 0]
        candidates = {
            "ours (fast path, scaled_dot_product_attention)": (
                lambda x, mask=mask: ours(x, x, x, mask),
                list(ours.parameters()),
            ),
            "torch.nn.MultiheadAttention (need_weights=False)": (
                lambda x, m=torch_mask: theirs(x, x, x, attn_mask=m, need_weights=False)[0],
                list(theirs.parameters()),
            ),
            "ours written out (need_weights=True)": (
                lambda x, mask=mask: ours(x, x, x, mask, need_weights=True),
                list(ours.parameters()),
            ),
        }
        with torch.no_grad():  # the three compute the same function
            outputs = [attend(x) for attend, _ in candidates.values()]
            for label, output in zip(candidates, outputs, strict=True):
                difference = (output - outputs[0]).abs().max().item()
                assert difference < 1e-4, f"{label} differs by {difference}"

        times: dict[str, list[float]] = {label: [] for label in candidates}
        for round_ in range(args.warmup + args.rounds):
            for label, (attend, parameters) in candidates.items():
                seconds = forward_backward(attend, x, grad, parameters)
                if round_ >= args.warmup:
                    times[label].append(seconds)

        print(f"{title}:")
        median = {label: 1e3 * statistics.median(ts) for label, ts in times.items()}
        for label, ms in median.items():
            low, high = (1e3 * q for q in (min(times[label]), max(times[label])))
            print(f"  {label:50} {ms:7.1f} ms  (range {low:.1f}-{high:.1f})")
        ours_ms, torch_ms, written_ms = median.values()
        print(f"  PyTorch / ours:     {torch_ms / ours_ms:5.2f}")
        print(f"  written-out / ours: {written_ms / ours_ms:5.2f}")


if __name__ == "__main__":
    main()
