"""Time multi-head self-attention, forward and backward: our ``MultiHeadAttention`` (its default
fast path, ``scaled_dot_product_attention``) against PyTorch's ``nn.MultiheadAttention`` with the
same sizes and weights, and against our written-out path (``need_weights=True``); once without a
mask (the encoder's self-attention on a batch without padding) and once with the decoder's causal
mask. Float32 on a CPU, bfloat16 on a GPU.

Sizes (B, L, d_model, heads): small (32, 64, 512, 8), the paper's base width on a CPU-sized batch;
base (64, 256, 512, 8) for a GPU. The candidates are timed in turns within each round, so that
other work on a shared machine disturbs them alike; each figure is the median of the rounds.

Run: ``python benchmarks/attention.py [--device cuda --size base]``
"""

import argparse

import common
import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention, subsequent_mask

SIZES = {"small": (32, 64, 512, 8, 10), "base": (64, 256, 512, 8, 30)}  # B, L, d, h, rounds


def measure(batch: int, length: int, d_model: int, heads: int, rounds: int, device) -> dict:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model, heads)
    theirs = nn.MultiheadAttention(d_model, heads, batch_first=True)
    with torch.no_grad():  # the same weights, though timing does not depend on them
        theirs.in_proj_weight.copy_(ours.in_proj.weight)
        theirs.in_proj_bias.copy_(ours.in_proj.bias)
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    ours.to(device), theirs.to(device)
    x = torch.randn(batch, length, d_model, device=device, requires_grad=True)
    grad = torch.randn_like(x)  # (B, L, d_model)
    results: dict = {"shape": [batch, length, d_model, heads], "dtype": str(dtype)}
    for title, mask in [("no mask", None), ("causal mask", subsequent_mask(length, device))]:
        # PyTorch's bool attn_mask means "may NOT attend": the inverse of ours, (L, L).
        torch_mask = None if mask is None else ~mask[0, 0]
        attend = {
            "ours": lambda x, mask=mask: ours(x, mask=mask),
            "nn.MultiheadAttention": lambda x, m=torch_mask: theirs(
                x, x, x, attn_mask=m, need_weights=False
            )[0],
            "ours written out": lambda x, mask=mask: ours(x, mask=mask, need_weights=True)[0],
        }
        ours.float(), theirs.float()
        with torch.no_grad():  # the three compute the same function (in float32; TF32 on a GPU)
            outputs = {name: f(x.float()) for name, f in attend.items()}
        tolerance = 1e-4 if device.type == "cpu" else 1e-2
        for name, output in outputs.items():
            difference = (output - outputs["ours"]).abs().max().item()
            assert difference < tolerance, f"{name} differs from ours by {difference}"
        ours.to(dtype), theirs.to(dtype)
        x = x.detach().to(dtype).requires_grad_()
        grad = grad.to(dtype)

        def forward_backward(f, x=x, grad=grad):
            def run():
                x.grad = None
                ours.zero_grad(set_to_none=True), theirs.zero_grad(set_to_none=True)
                f(x).backward(grad)

            return run

        functions = {name: forward_backward(f) for name, f in attend.items()}
        times = common.time_in_turns(functions, rounds, warmup=3, device=device)
        results[title] = {name: common.summary(seconds) for name, seconds in times.items()}
    return results


def report(results: dict) -> list[dict]:
    batch, length, d_model, heads = results["shape"]
    print(
        f"self-attention forward + backward, (B, L, d_model) = ({batch}, {length}, {d_model}), "
        f"{heads} heads, {results['dtype']}, {torch.get_num_threads()} thread(s), median ms"
    )
    lines = []
    for title in ("no mask", "causal mask"):
        ms = {name: 1e3 * figures["median_s"] for name, figures in results[title].items()}
        for peer in ("nn.MultiheadAttention", "ours written out"):
            lines.append(
                common.compare(
                    f"{title}: against {peer}", ms["ours"], ms[peer], "ms", higher_is_better=False
                )
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    args = parser.parse_args()
    device = common.setup(parser, args)
    batch, length, d_model, heads, rounds = SIZES[args.size]
    results = measure(batch, length, d_model, heads, args.rounds or rounds, device)
    results["comparisons"] = report(results)
    common.save(args, device, "attention", results)


if __name__ == "__main__":
    main()
