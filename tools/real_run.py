"""Make the book's real run: train, average the last 5 checkpoints, evaluate as §6.1 (with the
profile's length penalty), report.

    python tools/real_run.py --profile full --src de --tgt en \\
        --work runs/full-de-en --results results/multi30k-de-en [--time-limit 420]
    python tools/real_run.py --profile laptop --src de --tgt en \\
        --work runs/laptop-de-en --results results/multi30k-de-en-laptop

Training runs as ``python -m transformer_lib train`` into the work folder (weights and checkpoints
stay there); a profile that trains as several processes (``laptop``: two CPU processes) is started
under ``torch.distributed.run`` (torchrun). Run the same command again to continue: training resumes from the work folder's last
checkpoint, and once it has reached its last update the command averages, evaluates every test
set and writes the report (the files the chapter "The real run" reads) into the results folder.
``--time-limit`` bounds the training part of one command, for machines that take commands of a
fixed length. Exit status: 0 when the report is written or training stopped at its time limit
(the last line says which), 2 for a usage error, the trainer's status if training failed.

    python tools/real_run.py --profile full --src de --tgt en --work runs/timing \\
        --time-updates 50 [--time-limit 420]

times 50 updates of the profile with the library's own training loop (in a new work folder, no
report) and projects the time of the profile's whole training from them, validations and
checkpoints included; with ``--time-limit`` it also says whether that training fits one command
of that many seconds of training, or how many commands it takes.
"""

import argparse
import dataclasses
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RESERVED = "multi30k-"  # results/multi30k-*: complete runs of a recorded profile only
RECORDED = ("laptop", "full")  # the profiles whose complete runs the chapter shows


class UsageError(ValueError):
    """A mistake in the options: one line on standard error, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tools/real_run.py",
        description="Train a Multi30k model, average its last checkpoints, evaluate it on every "
        "test set (by default as §6.1: beam 4, and the length penalty alpha the profile's "
        "validation runs chose) and write the report of the chapter 'The real run'.",
    )
    parser.add_argument("--profile", required=True, choices=["ci", *RECORDED], help="run size")
    parser.add_argument("--src", required=True, choices=["de", "en"], help="source language")
    parser.add_argument("--tgt", required=True, choices=["de", "en"], help="target language")
    parser.add_argument("--work", required=True, type=Path, help="run folder (checkpoints)")
    parser.add_argument("--results", type=Path, help="report folder to write (required)")
    parser.add_argument("--data-dir", type=Path, help="folder with the Multi30k .gz files")
    parser.add_argument("--max-steps", type=int, help="train to this many updates (tests)")
    parser.add_argument(
        "--seed", type=int, help="another seed than the profile's (the noise of one run)"
    )
    parser.add_argument("--time-limit", type=float, help="seconds of training in this command")
    parser.add_argument("--limit", type=int, help="evaluate only the first N test sentences")
    parser.add_argument("--average", type=int, default=5, help="checkpoints to average (5)")
    parser.add_argument("--beam", type=int, default=4, help="beam size; 1 is greedy (4, §6.1)")
    parser.add_argument(
        "--alpha", type=float, help="length penalty (the profile's: 0.6 as §6.1, unless it says)"
    )
    parser.add_argument(
        "--extra-length", type=int, default=50, help="output tokens beyond the input's (50, §6.1)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded at once")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when present)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--time-updates",
        type=int,
        metavar="N",
        help="instead of a run: time N updates of the profile in a new --work folder and project "
        "its whole training (with --time-limit: whether it fits commands of that many seconds)",
    )
    return parser


def search_settings(args: argparse.Namespace):
    """The options' search settings as one value (their checks are SearchConfig's); without
    --alpha, the length penalty of the profile."""
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.recipe import PROFILES

    alpha = PROFILES[args.profile].alpha if args.alpha is None else args.alpha
    try:
        return SearchConfig(args.beam, alpha, args.extra_length, args.batch_size)
    except ValueError as err:
        raise UsageError(f"{err} (options --beam, --alpha, --extra-length, --batch-size)") from err


def check(args: argparse.Namespace) -> None:
    if args.src == args.tgt:
        raise UsageError(f"--src and --tgt are both {args.src!r}: choose two languages")
    if args.time_updates is not None:
        check_timing(args)
        return
    if args.results is None:
        raise UsageError("--results is required: the folder that receives the report")
    for name in ("max_steps", "limit", "average", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.time_limit is not None and not args.time_limit >= 0:
        raise UsageError(f"--time-limit must be a number of seconds, got {args.time_limit}")
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise UsageError(f"--data-dir {args.data_dir} is not a folder")
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.recipe import PROFILES

    search = search_settings(args)
    shortened = args.max_steps is not None or args.limit is not None or args.seed is not None
    # §6.1's beam and output length, and the length penalty of the profile's evaluation
    recipe = SearchConfig(alpha=PROFILES[args.profile].alpha, batch_size=search.batch_size)
    not_the_recipe = search != recipe
    if args.results.name.startswith(RESERVED) and (
        shortened or args.profile not in RECORDED or not_the_recipe
    ):
        raise UsageError(
            f"{args.results} is reserved for complete runs of the profiles {', '.join(RECORDED)} "
            "evaluated as the recipe does (no --max-steps, --seed or --limit, the default --beam, "
            "--alpha and --extra-length): write other runs elsewhere, e.g. under runs/"
        )
    if args.results.resolve() == args.work.resolve():
        raise UsageError("--results and --work must be different folders")


def check_timing(args: argparse.Namespace) -> None:
    """The options of --time-updates: a count of at least 2, a new work folder, no report."""
    if args.time_updates < 2:
        raise UsageError(
            f"--time-updates must be at least 2 (the first is not timed), got {args.time_updates}"
        )
    for name in ("results", "max_steps", "limit"):
        if getattr(args, name) is not None:
            option = "--" + name.replace("_", "-")
            raise UsageError(f"--time-updates trains no whole run: leave out {option}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit must be a number of seconds, got {args.time_limit}")
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise UsageError(f"--data-dir {args.data_dir} is not a folder")
    if (args.work / "checkpoints" / "last.pt").exists():
        raise UsageError(
            f"{args.work} already holds a run: time the updates in a new --work folder"
        )
    from transformer_lib.recipe import PROFILES

    if PROFILES[args.profile].processes not in (None, 1):
        raise UsageError(f"--time-updates times one process; {args.profile} trains as several")


def occurrences(every: int | None, max_steps: int) -> int:
    """How often an event due every ``every`` updates and after the last one happens in a run.

    ``None`` (once an epoch) is counted as once, at the end: the number of epochs is not known
    before the batches are made.
    """
    every = every or max_steps
    return max_steps // every + (max_steps % every != 0)


def time_updates(
    profile_name: str,
    src: str,
    tgt: str,
    updates: int,
    work: Path,
    *,
    data_dir: Path | None = None,
    device: str | None = None,
    budget: float | None = None,
    progress: bool = False,
) -> dict:
    """Time ``updates`` updates of a profile and project the time of its whole training.

    The updates are the real ones: ``train_translation`` trains the profile's model on its
    batches (bf16 on a GPU, as the profile trains) into ``work``, for ``updates`` updates, one
    validation and one checkpoint at the end, and the figures are read from the clocks the
    training loop writes into ``metrics.jsonl``. The first tenth of the updates (at least one)
    is not counted: it pays for start-up (CUDA's context, the choice of kernels). ``budget`` is
    the training time of one command, in seconds. Returns the figures, also written to
    ``work/timing.json``.
    """
    import torch

    from transformer_lib.recipe import PROFILES, train_translation

    profile = PROFILES[profile_name]
    whole = profile.training
    short = dataclasses.replace(
        profile,
        training=dataclasses.replace(
            whole,
            max_steps=updates,
            log_every=1,  # the clock after every update
            checkpoint_every=updates,
            validate_every=updates,
        ),
    )
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    summary = train_translation(
        short, src, tgt, work, data_dir=data_dir, device=device, progress=progress
    )
    records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    wall = {r["step"]: r["wall_s"] for r in records if r["kind"] == "train"}
    last_train = next(r for r in records if r["kind"] == "train" and r["step"] == updates)
    valid = next(r for r in records if r["kind"] == "valid")
    skipped = max(1, updates // 10)
    per_update = (wall[updates] - wall[skipped]) / (updates - skipped)
    validation = valid["elapsed_s"] - last_train["elapsed_s"]
    checkpoint = summary["elapsed_s"] - valid["elapsed_s"]  # the checkpoint after the validation
    validations = occurrences(whole.validate_every, whole.max_steps)
    checkpoints = occurrences(whole.checkpoint_every, whole.max_steps)
    projected = per_update * whole.max_steps + validation * validations + checkpoint * checkpoints
    result = {
        "profile": profile_name,
        "src": src,
        "tgt": tgt,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": "bf16" if device.type == "cuda" and whole.bf16 else "float32",
        "torch": torch.__version__,
        "updates": updates,
        "updates_not_timed": skipped,
        "seconds_per_update": per_update,
        "seconds_per_validation": validation,
        "seconds_per_checkpoint": checkpoint,
        "max_steps": whole.max_steps,
        "validations": validations,
        "checkpoints": checkpoints,
        "projected_training_s": projected,
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
        "budget_s": budget,
        "commands": math.ceil(projected / budget) if budget else None,
        "fits": projected <= budget if budget else None,
    }
    (work / "timing.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def print_timing(result: dict) -> None:
    """The timing's figures as lines for a log: the last says whether the training fits."""
    r = result
    timed = r["updates"] - r["updates_not_timed"]
    memory = f", peak GPU memory {r['peak_memory_gib']:.1f} GiB" if r["peak_memory_gib"] else ""
    print(
        f"timed {timed} update{'s' * (timed != 1)} of the {r['profile']} profile "
        f"({r['src']}-{r['tgt']}, {r['precision']}) on {r['device_name']}, after "
        f"{r['updates_not_timed']} not timed: {r['seconds_per_update']:.4f} s per update; "
        f"a validation {r['seconds_per_validation']:.1f} s, a checkpoint "
        f"{r['seconds_per_checkpoint']:.2f} s{memory}"
    )
    print(
        f"projected training time of the {r['profile']} profile: {r['projected_training_s']:.0f} s "
        f"({r['max_steps']} updates, {r['validations']} validations, {r['checkpoints']} checkpoints)"
    )
    if r["budget_s"]:
        budget = f"{r['budget_s']:.0f} s of training"
        verdict = (
            f"fits: a direction trains in one command of {budget}"
            if r["fits"]
            else f"does not fit: a direction trains in {r['commands']} commands of {budget} each"
        )
        print(verdict)


def trained_steps(work: Path) -> int:
    from transformer_lib.checkpoints import load_checkpoint

    last = work / "checkpoints" / "last.pt"
    return int(load_checkpoint(last)["step"]) if last.is_file() else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started, started_at = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    this_command = shlex.join(
        ["python", "tools/real_run.py", *(sys.argv[1:] if argv is None else argv)]
    )
    try:
        check(args)
        if args.time_updates is not None:
            timing = time_updates(
                args.profile,
                args.src,
                args.tgt,
                args.time_updates,
                args.work,
                data_dir=args.data_dir,
                device=args.device,
                budget=args.time_limit,
                progress=not args.quiet,
            )
            print_timing(timing)
            return 0
        from transformer_lib.recipe import PROFILES

        profile = PROFILES[args.profile]
        target = args.max_steps or profile.training.max_steps
        args.work.mkdir(parents=True, exist_ok=True)
        log_path = args.work / "real_run.jsonl"  # every command this run took, for the manifest
        entry = {"command": this_command, "started": started_at}

        steps = trained_steps(args.work)
        if steps < target:
            launcher = [sys.executable]
            if profile.processes is not None and profile.processes > 1:
                # torchrun gives each process one thread (OMP_NUM_THREADS=1): a core each.
                launcher += ["-m", "torch.distributed.run", "--standalone"]
                launcher += ["--nproc-per-node", str(profile.processes)]
            train = [*launcher, "-m", "transformer_lib", "train", "--profile", args.profile]
            train += ["--src", args.src, "--tgt", args.tgt, "--out", str(args.work)]
            train += ["--resume"] if steps > 0 else []
            train += ["--max-steps", str(args.max_steps)] if args.max_steps else []
            train += ["--seed", str(args.seed)] if args.seed is not None else []
            train += ["--time-limit", str(args.time_limit)] if args.time_limit is not None else []
            train += ["--data-dir", str(args.data_dir)] if args.data_dir else []
            train += ["--quiet"] if args.quiet else []
            entry["train_command"] = shlex.join(["python", *train[1:]])
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            }
            if len(launcher) > 1:  # torchrun's own default, set here so that it need not warn
                env.setdefault("OMP_NUM_THREADS", "1")
            done = subprocess.run(train, env=env)
            if done.returncode != 0:
                return done.returncode
            steps = trained_steps(args.work)
        entry["trained_to"] = steps
        if steps < target:
            entry["wall_s"] = round(time.perf_counter() - started, 1)
            with open(log_path, "a") as log:
                log.write(json.dumps(entry) + "\n")
            print(f"training stopped at update {steps} of {target}: run the same command again")
            return 0

        import torch

        from transformer_lib.book.report import write_report

        entry["report"] = str(args.results)
        entry["wall_s"] = None  # filled in below, once the report is written
        history = (
            [json.loads(x) for x in log_path.read_text().splitlines()] if log_path.is_file() else []
        )
        manifest = {
            "profile": args.profile,
            "commands": [e["command"] for e in history] + [this_command],
            "train_commands": [
                e["train_command"] for e in history + [entry] if "train_command" in e
            ],
            "command_log": history,
        }
        bleu = write_report(
            args.work,
            args.results,
            data_dir=args.data_dir,
            average=args.average,
            search=search_settings(args),
            limit=args.limit,
            device=args.device,
            manifest=manifest,
            shipped_dtype=getattr(torch, profile.shipped_dtype),
            progress=not args.quiet,
        )
        entry["wall_s"] = round(time.perf_counter() - started, 1)
        with open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")
        # The wall time of every command, this one included, now that it is known.
        from transformer_lib.provenance import write_text_atomically

        path = args.results / "manifest.json"
        record = json.loads(path.read_text())
        record["command_log"] = history + [entry]
        record["wall_s_all_commands"] = round(sum(e["wall_s"] for e in history + [entry]), 1)
        write_text_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    except (ValueError, FileNotFoundError) as err:  # UsageError and the library's own errors
        print(f"error: {err}", file=sys.stderr)
        return 2
    search = f"beam {bleu['beam_size']}, alpha {bleu['alpha']}"  # every score with its search
    for split, scores in bleu["splits"].items():
        print(f"{split}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} ({search})")
    print(f"report written to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
