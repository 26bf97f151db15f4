"""Exact resumption on this device: does a run that stops and resumes reach the weights of a run
that never stopped, and does a run reach the same weights twice?

Three short runs of a profile's recipe (``train_translation``, Multi30k, the profile's model,
precision and batches): two that train ``--updates`` updates in one call, and one that stops
halfway and resumes from its ``last.pt``. The script reports the largest difference of a weight
and of a logged training loss between the two unbroken runs (how repeatable the device is) and
between an unbroken run and the resumed one (what a stop costs). On a CPU all three are expected
to agree bit for bit. On a GPU some kernels (for instance the backward pass of an embedding, which
adds with atomic operations) may sum in another order from run to run unless PyTorch is asked for
deterministic algorithms: ``--deterministic`` sets ``torch.use_deterministic_algorithms(True)``
and the ``CUBLAS_WORKSPACE_CONFIG`` that cuBLAS then needs (PyTorch's notes on reproducibility,
https://pytorch.org/docs/stable/notes/randomness.html).

Run: ``.venv/bin/python benchmarks/resume.py [--device cuda] [--deterministic]``; it writes
``results/perf-<device>/resume[_deterministic].json`` (``tools/gpu/perf.sh resume`` runs both).
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import common
import torch

from transformer_lib.recipe import PROFILES, Profile, train_translation


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, torch.device]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser, sizes=("ci", "full"))
    parser.add_argument("--updates", type=int, default=40, help="updates of each run (40)")
    parser.add_argument(
        "--deterministic", action="store_true", help="ask PyTorch for deterministic algorithms"
    )
    args = parser.parse_args(argv)
    if args.updates < 2:
        parser.error(f"--updates must be at least 2 (a stop halfway), got {args.updates}")
    if args.deterministic:
        # cuBLAS reads it when its first handle is made, so before any product on the GPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    return args, common.setup(parser, args)


def train_in_calls(out: Path, profile: Profile, stops: list[int], device: torch.device) -> dict:
    """Train to each update count of ``stops`` in turn (each call after the first resumes);
    the final weights (from ``last.pt``) and the logged training losses."""
    for number, stop in enumerate(stops):
        resume = number > 0
        train_translation(
            profile, "de", "en", out, resume=resume, max_steps=stop, device=device, progress=False
        )
    state = torch.load(out / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    return {"weights": state["model"], "losses": losses}


def largest_differences(a: dict, b: dict) -> dict:
    """The largest absolute difference of a weight and of a logged loss between two runs."""
    weights = max((a["weights"][k] - b["weights"][k]).abs().max().item() for k in a["weights"])
    if len(a["losses"]) != len(b["losses"]):
        raise AssertionError(f"{len(a['losses'])} logged losses against {len(b['losses'])}")
    losses = max(abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True))
    return {"weight": weights, "loss": losses, "identical": weights == 0 and losses == 0}


def main(argv: list[str] | None = None) -> dict:
    args, device = parse(argv)
    # The profile as it is, but for a loss logged after every update (a stop logs the updates
    # since the last record: with a longer window the two runs' records would not line up).
    named = PROFILES[args.size]
    profile = dataclasses.replace(named, training=dataclasses.replace(named.training, log_every=1))
    with tempfile.TemporaryDirectory() as folder:
        first = train_in_calls(Path(folder, "first"), profile, [args.updates], device)
        for name in ("second", "resumed"):  # the vocabulary once: learning it is the slow part
            Path(folder, name).mkdir()
            shutil.copy(Path(folder, "first", "tokenizer.json"), Path(folder, name))
        second = train_in_calls(Path(folder, "second"), profile, [args.updates], device)
        halves = [args.updates // 2, args.updates]
        resumed = train_in_calls(Path(folder, "resumed"), profile, halves, device)
    results = {
        "profile": args.size,
        "updates": args.updates,
        "stopped_after": halves[0],
        "bf16": named.training.bf16 and device.type == "cuda",
        "deterministic_algorithms": args.deterministic,
        "two_unbroken_runs": largest_differences(first, second),
        "unbroken_and_resumed": largest_differences(first, resumed),
    }
    for label in ("two_unbroken_runs", "unbroken_and_resumed"):
        found = results[label]
        print(
            f"{label.replace('_', ' ')}: largest difference of a weight {found['weight']:.3g}, "
            f"of a logged loss {found['loss']:.3g} ({'identical' if found['identical'] else 'differ'})"
        )
    common.save(args, device, "resume_deterministic" if args.deterministic else "resume", results)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
