"""Where a training step's time goes: PyTorch's profiler over a few updates (forward, backward,
Adam) of our model and of PyTorch's ``nn.Transformer`` with the same sizes, batches and precision.

``train_step.py`` says how fast a step is and what share of the device's peak it reaches (MFU);
this says where the rest goes. Each operator's *self* time (its own kernels, not its callees') is
summed on the device that ran it (the GPU's kernels on CUDA, the CPU's time otherwise) and put in
one of three groups: matrix products (``mm``, ``addmm``, ``bmm`` and their kin, where the FLOPs
are), attention kernels (``scaled_dot_product_attention``'s fused kernels) and everything else
(element-wise work, normalisation, softmax, dropout, copies, Adam's for-each kernels): time spent
outside the products is time at far below the peak. The table printed lists each model's most
expensive operators. Beside the profile, the same updates are timed without the profiler: the
operators' summed time over that wall time is the share of the step the device was busy. Well
below 1 on a GPU, the device waits for the host to launch its kernels (small kernels, Python
overhead), which fusing (``torch.compile``) or CUDA graphs address, not faster kernels.

Run: ``python benchmarks/profile_step.py`` (CPU, small model, random batches: a check), or
``python benchmarks/profile_step.py --device cuda --size base`` on a GPU (Multi30k's batches).
"""

import argparse
import os
import time
from collections import defaultdict

import common
import peers
import torch
import train_step
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from transformer_lib.data import DataError
from transformer_lib.model import Transformer

PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm", "addmv")
ATTENTION = ("attention",)  # _flash_attention_*, _efficient_attention_*, _cudnn_attention_*, ...


def group(operator: str) -> str:
    """The group of an operator's name (``aten::addmm`` -> ``matrix products``)."""
    name = operator.removeprefix("aten::")
    if name in PRODUCTS or name.removesuffix("_backward") in PRODUCTS:
        return "matrix products"
    if any(word in name for word in ATTENTION):
        return "attention kernels"
    return "everything else"


def self_time_us(event, device: torch.device) -> float:
    """An averaged event's own time on the device that ran the work, in microseconds."""
    if device.type == "cpu":
        return event.self_cpu_time_total
    device_time = getattr(event, "self_device_time_total", None)  # torch >= 2.4; 0 is a time
    return device_time if device_time is not None else event.self_cuda_time_total


def profile_model(model, batches, device: torch.device, d_model: int, top: int) -> dict:
    """Profile one round of updates (after one round of warm-up) and sum the operators' times."""
    bf16 = device.type == "cuda"  # as the training loop trains: bf16 autocast on CUDA only
    train_once = train_step.Candidate(model, batches, bf16).step_function(device, d_model)
    train_once()  # allocator, kernel choices, first-call costs
    common.sync(device)
    started = time.perf_counter()  # the same updates without the profiler's own overhead
    train_once()
    common.sync(device)
    wall = time.perf_counter() - started
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with common.native_stderr_silenced(), profile(activities=activities) as profiler:
        train_once()
        common.sync(device)
    # The operators, not the kernels: on a GPU each kernel is listed too, and its time is already
    # its operator's self time on the device.
    timed = [(e, self_time_us(e, device)) for e in profiler.key_averages()]
    timed = [(e, us) for e, us in timed if e.device_type == DeviceType.CPU and us > 0]
    total = sum(us for _, us in timed)
    groups: dict[str, float] = defaultdict(float)
    for event, us in timed:
        groups[group(event.key)] += us
    ranked = sorted(timed, key=lambda pair: pair[1], reverse=True)[:top]
    return {
        "updates": len(batches),
        "total_s": total / 1e6,
        "wall_s": wall,
        "busy": total / 1e6 / wall,
        "groups": {name: groups[name] / total for name in sorted(groups)},
        "operators": [
            {
                "name": e.key,
                "group": group(e.key),
                "self_s": us / 1e6,
                "share": us / total,
                "calls": e.count,
            }
            for e, us in ranked
        ],
    }


def profile_models(config, batches, device: torch.device, top: int = 15) -> dict:
    """Profile ours and ``nn.Transformer`` (with our weights) on the same batches."""
    torch.manual_seed(0)
    ours = Transformer(config)
    peer = peers.TorchTransformer(config)
    peers.copy_weights(ours, peer)
    return {
        name: profile_model(model, batches, device, config.d_model, top)
        for name, model in (("ours", ours), ("nn.Transformer", peer))
    }


def print_profiles(profiles: dict) -> None:
    """Each model's groups and busy share, then its most expensive operators."""
    for name, figures in profiles.items():
        shares = ", ".join(f"{g} {s:.0%}" for g, s in figures["groups"].items())
        print(
            f"{name}: {figures['total_s'] * 1e3:.1f} ms of operators in {figures['wall_s'] * 1e3:.1f}"
            f" ms for {figures['updates']} updates (busy {figures['busy']:.0%}); {shares}"
        )
        for op in figures["operators"]:
            print(
                f"  {op['share']:6.1%}  {op['self_s'] * 1e3:8.2f} ms  {op['calls']:6d}  {op['name']}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    parser.add_argument("--data", choices=("multi30k", "random"), default=None)
    parser.add_argument("--batches", type=int, default=3, help="updates profiled (default 3)")
    parser.add_argument("--top", type=int, default=15, help="operators listed (default 15)")
    args = parser.parse_args()
    device = common.setup(parser, args)
    size = train_step.SIZES[args.size]
    data = args.data or ("multi30k" if device.type == "cuda" else "random")
    if data == "multi30k":
        try:
            batches, _ = train_step.multi30k_batches(size.model, size.max_tokens, args.batches)
        except (DataError, FileNotFoundError) as err:
            parser.error(f"{err} (or run with --data random)")
    else:
        batches, _ = train_step.random_batches(size.model, size.max_tokens, args.batches)
    profiles = profile_models(size.model, batches, device, args.top)
    print_profiles(profiles)
    results = {"config": vars(size.model), "max_tokens": size.max_tokens, "data": data, **profiles}
    common.save(args, device, "profile_step", results)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
