"""The training loop as a run uses it: the `full` profile's recipe (``train_translation``,
Multi30k, its model, batches and bf16) trained for ``--updates`` updates under several settings,
to see which of the tricks ``train_step.py`` and ``profile_step.py`` measure on a lone base step
pay in a whole run of the smaller model.

The candidates: the profile as it is (eager, PyTorch's choice of attention kernel); the same with
``TrainingConfig.compile="default"`` (``torch.compile`` with dynamic shapes, since the batches
vary); and, on a GPU, eager with the attention kernel pinned to the memory-efficient one and to
the written-out ("math") one, through ``torch.nn.attention.sdpa_kernel``. Each candidate trains
a fresh model from the same seed, once a round, the candidates in turns within each round (so
that whatever else the machine does slows them alike). A candidate's speed is the median
``tokens_per_s`` of its logged windows after the first two (compilation and warm-up happen
there); its first window's seconds show what compiling costs a run, and its last training loss
that it trains the same model. The file is written after every round, so that a run cut off by
a time limit keeps the rounds it finished (``rounds_done``).

Run: ``python benchmarks/train_loop.py --device cuda [--size full] [--updates 400]``; it writes
``results/perf-<device>/train_loop.json`` (``tools/gpu/perf.sh loop`` runs it).
"""

import argparse
import contextlib
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_lib.recipe import PROFILES, Profile, train_translation

WARM_WINDOWS = 2  # logged windows left out of the speed: compilation and warm-up


def candidates(device: torch.device) -> dict[str, tuple[dict, list | None]]:
    """Name -> (TrainingConfig changes, attention kernels to allow or None for PyTorch's
    choice)."""
    found: dict[str, tuple[dict, list | None]] = {
        "eager": ({}, None),
        "torch.compile": ({"compile": "default"}, None),
    }
    if device.type == "cuda":
        found["eager, memory-efficient attention"] = ({}, [SDPBackend.EFFICIENT_ATTENTION])
        found["eager, written-out attention"] = ({}, [SDPBackend.MATH])
    return found


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, torch.device]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser, sizes=("full", "ci"))
    parser.add_argument("--updates", type=int, default=400, help="updates of each run (400)")
    parser.add_argument(
        "--log-every", type=int, default=50, help="updates in each timed window (50)"
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated candidates to run (default: all)"
    )
    args = parser.parse_args(argv)
    least = args.log_every * (WARM_WINDOWS + 1)  # a window timed after the warm ones
    if args.log_every < 1 or args.updates < least:
        parser.error(
            f"--updates must be at least {least} (--log-every {args.log_every} times "
            f"{WARM_WINDOWS + 1}), got {args.updates}"
        )
    device = common.setup(parser, args)
    if args.only is not None:
        unknown = set(args.only.split(",")) - set(candidates(device))
        if unknown:
            parser.error(
                f"--only: unknown candidates {sorted(unknown)}: {list(candidates(device))}"
            )
    return args, device


def run_once(out: Path, profile: Profile, kernels: list | None, device: torch.device) -> dict:
    """Train one candidate in ``out`` and read its speed back from metrics.jsonl."""
    started = time.perf_counter()
    allowed = sdpa_kernel(kernels) if kernels else contextlib.nullcontext()
    with allowed:
        summary = train_translation(profile, "de", "en", out, device=device, progress=False)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    windows = [r for r in records if r["kind"] == "train"]
    steady = [r["tokens_per_s"] for r in windows[WARM_WINDOWS:]]
    return {
        "tokens_per_s": statistics.median(steady),
        "first_window_s": windows[0]["wall_s"],
        "wall_s": summary["wall_s"],
        "seconds": time.perf_counter() - started,
        "last_loss": windows[-1]["loss"],
        "valid_loss": (summary["valid"] or {}).get("loss"),
    }


def main(argv: list[str] | None = None) -> dict:
    args, device = parse(argv)
    named = PROFILES[args.size]
    # A window every --log-every updates, one checkpoint at the end (none inside a timed
    # window), no BLEU.
    training = dataclasses.replace(
        named.training,
        max_steps=args.updates,
        log_every=args.log_every,
        checkpoint_every=args.updates,
    )
    chosen = candidates(device)
    if args.only is not None:
        chosen = {name: chosen[name] for name in args.only.split(",")}
    rounds = args.rounds or 2
    runs: dict[str, list[dict]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = None  # learned by the first run, copied to the others
        for number in range(rounds):
            for name, (changes, kernels) in chosen.items():
                profile = dataclasses.replace(
                    named, training=dataclasses.replace(training, **changes), bleu_sentences=0
                )
                out = Path(folder, f"{number}-{len(runs[name])}-{name.replace(' ', '_')}")
                out.mkdir()
                if tokenizer is not None:
                    shutil.copy(tokenizer, out)
                runs[name].append(run_once(out, profile, kernels, device))
                tokenizer = tokenizer or out / "tokenizer.json"
                found = runs[name][-1]
                print(
                    f"round {number + 1} {name:36} {found['tokens_per_s']:10,.0f} tokens/s  "
                    f"first window {found['first_window_s']:6.1f} s  loss {found['last_loss']:.3f}"
                )
            # Saved after every round: a run cut off by its time limit keeps its whole rounds.
            results = report(runs, args, named.training.bf16 and device.type == "cuda")
            results["rounds_done"] = number + 1
            common.save(args, device, "train_loop", results)
    return results


def report(runs: dict[str, list[dict]], args: argparse.Namespace, bf16: bool) -> dict:
    """Each candidate's median over the rounds, and its ratio against eager."""
    runs = {name: found for name, found in runs.items() if found}  # a round cut short: none yet
    results: dict = {"profile": args.size, "updates": args.updates, "bf16": bf16, "runs": runs}
    speeds = {
        name: statistics.median(r["tokens_per_s"] for r in found) for name, found in runs.items()
    }
    results["tokens_per_s"] = speeds
    if "eager" in speeds:
        results["comparisons"] = [
            common.compare(f"{name} against eager", speed, speeds["eager"], "tokens/s")
            for name, speed in speeds.items()
            if name != "eager"
        ]
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
