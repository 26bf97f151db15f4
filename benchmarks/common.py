"""What every benchmark shares: the command-line switches, timing that is fair to both sides,
the description of the machine, and the JSON file each run writes with its manifest.

A benchmark compares our code with a peer (PyTorch's own module, or the way a well-known tutorial
does it) *in the same run*: the two are timed in turns, round after round, so that whatever else
the machine is doing slows both alike, and each prints our figure, the peer's figure and the ratio.
Results go to ``results/perf-<device>/<benchmark>.json`` (``--out`` moves them), with a manifest:
the git commit, the command, the device, the library versions and the date.

Not a benchmark itself: ``make bench`` runs the scripts beside it.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from transformer_lib.book.runs import library_hash
from transformer_lib.provenance import device_name, environment, write_text_atomically

ROOT = (
    Path(__file__).resolve().parent.parent
)  # the repository (benchmarks/ are scripts, not a package)


def add_arguments(parser: argparse.ArgumentParser, sizes: tuple[str, ...] = ("small", "base")):
    """The switches every benchmark takes: where it runs, how big, how long, where it writes."""
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument(
        "--size", choices=sizes, default=sizes[0], help=f"model size (default {sizes[0]})"
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: see below)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed rounds (a default per size)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the JSON result (default results/perf-<device>/)",
    )
    parser.add_argument(
        "--name", default=None, help="the JSON file's name (default: the benchmark's own)"
    )
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")


def setup(parser: argparse.ArgumentParser, args: argparse.Namespace) -> torch.device:
    """Check the switches (a bad one ends with exit status 2) and prepare the device.

    One CPU thread by default: on a shared machine, a step on two threads waits whenever either
    is descheduled, and timings spread over a factor of ten.
    """
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a device: use cpu, cuda or cuda:N")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {args.device!r}: only cpu and cuda are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (use --device cpu)")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.name is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", args.name):
        parser.error(f"--name {args.name!r}: use letters, digits, '_' and '-' only")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} exists and is not a folder")
    torch.set_num_threads(args.threads)
    if device.type == "cuda":
        if device.index is None:  # set_device needs an index: "cuda" means the current GPU
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        # TF32 for the float32 rows: what anyone training in float32 on an H100 would switch on.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


@contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Standard error's file descriptor pointed at /dev/null for the block: PyTorch's profiler
    logs "profiler_start" and "profiler_stop" from C++, below Python's ``sys.stderr``, and a
    notebook (the performance chapters) would show those lines in the page."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def sync(device: torch.device) -> None:
    """Wait for the device: CUDA calls return before the work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_in_turns(
    candidates: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int,
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of every candidate, called in turns: ``warmup`` untimed rounds, then
    ``rounds`` timed ones. Taking turns spreads the machine's other work over all candidates;
    each round starts one candidate later than the one before, so that no candidate always
    runs after the same one (a call leaves the process's memory and the processor's caches as
    it used them, and the next call starts from there).
    ``clock=time.process_time`` counts the CPU seconds of this process instead of wall time
    (steadier on a shared machine, and equal to wall time for one thread on an idle one)."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for round_ in range(warmup + rounds):
        start = round_ % len(names) if names else 0
        for name in names[start:] + names[:start]:
            function = candidates[name]
            sync(device)
            started = clock()
            function()
            sync(device)
            if round_ >= warmup:
                times[name].append(clock() - started)
    return times


def summary(seconds: list[float]) -> dict:
    """The median (the figure we report), the best and the worst of the timed rounds."""
    return {
        "median_s": statistics.median(seconds),
        "best_s": min(seconds),
        "worst_s": max(seconds),
        "rounds": len(seconds),
        "seconds": list(seconds),  # each round's, for ratios round by round
    }


def compare(label: str, ours: float, peer: float, unit: str, higher_is_better: bool = True) -> dict:
    """Print our figure, the peer's and the ratio (above 1 = ours is better); return them."""
    ratio = ours / peer if higher_is_better else peer / ours
    print(f"  {label:46} ours {ours:12,.1f}  peer {peer:12,.1f}  {unit:10} ratio {ratio:5.2f}")
    return {"label": label, "ours": ours, "peer": peer, "unit": unit, "ratio": ratio}


def device_slug(device: torch.device) -> str:
    """A folder name for the device: ``cpu`` or the GPU's name, e.g. ``nvidia-h100-80gb-hbm3``."""
    if device.type == "cpu":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def manifest(device: torch.device) -> dict:
    """Where a result comes from: code, command, machine, versions, date."""
    info = {
        **environment(device),
        "library_hash": library_hash(),  # names the code where git is absent, as cached runs do
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "device_type": device.type,
        "threads": torch.get_num_threads(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if device.type == "cuda":
        info["gpu_memory_gib"] = round(
            torch.cuda.get_device_properties(device).total_memory / 2**30, 1
        )
    return info


def save(args: argparse.Namespace, device: torch.device, name: str, results: dict) -> Path | None:
    """Write ``{"manifest": ..., "results": ...}`` to ``<out>/<name>.json``, atomically."""
    if args.no_save:
        return None
    folder = args.out or ROOT / "results" / f"perf-{device_slug(device)}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{args.name or name}.json"
    text = json.dumps({"manifest": manifest(device), "results": results}, indent=1) + "\n"
    write_text_atomically(path, text)
    print(f"wrote {path}")
    return path


def load_results(root: Path) -> dict[str, dict[str, dict]]:
    """Every ``perf-*/<name>.json`` under ``root``: {folder: {name: {"manifest", "results"}}}."""
    found: dict[str, dict[str, dict]] = {}
    for path in sorted(Path(root).glob("perf-*/*.json")):
        found.setdefault(path.parent.name, {})[path.stem] = json.loads(path.read_text())
    return found
