"""Run the Table 3 sweep (paper §6.2) on Multi30k: one command, resumable, in parts if need be.

Every variant of the profile trains for the same steps and is scored on the validation split with
beam 4; each finished variant adds one JSON line to ``OUT/variants.jsonl`` and updates
``OUT/manifest.json``. A rerun skips the variants already there, so the sweep can be split over
several time-limited commands (``--budget-s``, and a variant cut off halfway resumes from its last
checkpoint in the work folder). See ``book/variations.md`` and ``tools/gpu/table3.sh``.

Usage::

    python tools/table3.py --profile full                      # the GPU sweep, into results/table3
    python tools/table3.py --profile cpu                       # 2 CPU cores, into results/table3-cpu
    python tools/table3.py --profile ci --only base RNN-lstm   # a toy sweep on the CPU
    python tools/table3.py --profile full --list               # the variants, sizes and costs
    python tools/table3.py --profile full --prepare            # only train the sweep's tokenizer
    python tools/table3.py --profile full --calibrate 200      # time the base, project the sweep
    python tools/table3.py --profile full --calibrate 200 --lanes 3   # and three bases at once
    python tools/table3.py --profile full --lanes 3            # three variants at a time

Errors a user can cause end in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # sweep_lanes, when imported rather than run
DEFAULT_OUT = {
    "full": ROOT / "results" / "table3",
    "cpu": ROOT / "results" / "table3-cpu",
    "ci": ROOT / "runs" / "table3-ci" / "results",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tools/table3.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--profile", choices=list(DEFAULT_OUT), default="full", help="sweep size (default: full)"
    )
    parser.add_argument(
        "--out", type=Path, help="results folder (full: results/table3, cpu: results/table3-cpu)"
    )
    parser.add_argument(
        "--work", type=Path, help="tokenizer and checkpoints (runs/table3-<profile>)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="variants or rows, e.g. base A")
    parser.add_argument("--max-steps", type=int, help="train every variant this many steps instead")
    parser.add_argument("--src", choices=["de", "en"], default="en", help="source language")
    parser.add_argument("--tgt", choices=["de", "en"], default="de", help="target language")
    parser.add_argument("--data-dir", type=Path, help="folder with the Multi30k .gz files")
    parser.add_argument("--device", help="cuda or cpu (default: the profile's, else cuda if any)")
    parser.add_argument("--budget-s", type=float, help="start no variant that would end later")
    parser.add_argument(
        "--lanes",
        type=int,
        default=1,
        help="variants trained at once, each in a process of its own (for a GPU; default 1)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--list", action="store_true", help="list the variants and stop")
    actions.add_argument("--prepare", action="store_true", help="train the tokenizer and stop")
    actions.add_argument(
        "--calibrate", type=int, metavar="STEPS", help="time the base for STEPS, project the sweep"
    )
    return parser


def list_variants(profile, max_steps: int | None) -> None:
    """Print every variant with its parameters and estimated training cost (an upper bound:
    every update filled to its token budget with pairs of 32 tokens a side)."""
    from transformer_lib.book.performance import training_flops
    from transformer_lib.book.variations import parameter_count, sweep_variants

    variants = sweep_variants(profile, profile.vocab_size, max_steps)
    print(f"{'variant':16s} {'row':8s} {'params':>8s} {'TFLOP':>8s}  label")
    for v in variants:
        params = parameter_count(v.model)
        pairs = v.training.max_steps * v.training.max_tokens // 32  # each costs the same
        flops = pairs * training_flops(v.model, [32], [32])
        print(f"{v.name:16s} {v.row:8s} {params / 1e6:7.2f}M {flops / 1e12:8.1f}  {v.label}")


def calibrate(args, profile, work: Path) -> int:
    """Train the base and the LSTM for a few steps here, then project every variant's time at
    full length from the measured seconds per FLOP (the LSTM's for the LSTM), counting each
    variant's FLOPs over the sentences it will train on."""
    import numpy as np

    from transformer_lib.batching import encode_pairs
    from transformer_lib.book.performance import peak_for
    from transformer_lib.book.recurrent import RecurrentConfig
    from transformer_lib.book.sweep import planned_flops, run_sweep, sweep_tokenizer
    from transformer_lib.book.variations import sweep_variants
    from transformer_lib.data import load_multi30k

    scratch = work / "calibration"
    shutil.rmtree(scratch, ignore_errors=True)
    records = run_sweep(
        profile,
        scratch,
        work,
        src=args.src,
        tgt=args.tgt,
        only=["base", "RNN-lstm"],
        max_steps=args.calibrate,
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
    )
    shutil.rmtree(scratch, ignore_errors=True)
    if len(records) < 2:
        print("error: the calibration runs failed (see the log above)", file=sys.stderr)
        return 1
    tokenizer, tokenizer_file = sweep_tokenizer(profile, work, args.src, args.tgt)
    variants = sweep_variants(profile, tokenizer.vocab_size, args.max_steps)
    per_flop, eval_s = {}, {}
    for record, kind in zip(records, ("transformer", "lstm"), strict=True):
        rate = record["estimated_flops"] / record["train_wall_s"]  # FLOP/s of the products
        per_flop[kind] = 1 / rate
        eval_s[kind] = record["eval_wall_s"]
        peak = peak_for(record["device"])
        mfu = f", {rate / peak.flops:.0%} of the {peak.name}'s dense bf16 peak" if peak else ""
        print(
            f"{record['name']}, {record['steps']} steps: {record['train_wall_s']:.1f} s training "
            f"({rate / 1e12:.3g} TFLOP/s{mfu}), {record['eval_wall_s']:.1f} s evaluation, "
            f"{record['tokens_per_s']:.0f} target tokens/s"
        )
    gain = 1.0  # the card's speed with the lanes, against one variant alone
    if args.lanes > 1:
        from sweep_lanes import calibrate_lanes

        if (gain := calibrate_lanes(args, work, tokenizer_file, records[0])) is None:
            return 1
    train_pairs = load_multi30k("train", args.src, args.tgt, args.data_dir)
    pairs = encode_pairs(tokenizer, train_pairs, profile.max_len)
    planned = {}  # the lengths trained on, shared by variants with the same batches
    steps = variants[0].training.max_steps
    total_train = total_eval = 0.0
    for v in variants:
        kind = "lstm" if isinstance(v.model, RecurrentConfig) else "transformer"
        seconds = per_flop[kind] * planned_flops(v, pairs, planned)
        total_train += seconds
        total_eval += eval_s[kind]
        print(f"  {v.name:16s} {seconds + eval_s[kind]:7.0f} s")
    total_train, total_eval = total_train / gain, total_eval / gain
    total = total_train + total_eval
    lanes = f" in {args.lanes} lanes" if args.lanes > 1 else ""
    print(
        f"projected sweep at {steps} steps{lanes}: {total / 60:.1f} min (plus start-up per command)"
    )
    budget = profile.minutes * 60
    fitting = int(np.floor(steps * (budget - total_eval) / max(total_train, 1e-9) / 50) * 50)
    print(f"steps that fit {profile.minutes:g} minutes with the same evaluation: about {fitting}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    from transformer_lib.book.sweep import MANIFEST_FILE, run_sweep, sweep_tokenizer
    from transformer_lib.book.variations import SWEEP_PROFILES
    from transformer_lib.cli import check_device

    profile = SWEEP_PROFILES[args.profile]
    out = args.out or DEFAULT_OUT[args.profile]
    work = args.work or ROOT / "runs" / f"table3-{args.profile}"
    try:
        if args.max_steps is not None and args.max_steps < 1:
            raise ValueError(f"--max-steps must be at least 1, got {args.max_steps}")
        check_device(args.device)
        if args.lanes < 1:
            raise ValueError(f"--lanes must be at least 1, got {args.lanes}")
        if args.budget_s is not None and args.budget_s <= 0:
            raise ValueError(f"--budget-s must be positive, got {args.budget_s}")
        if args.data_dir is not None and not args.data_dir.is_dir():
            raise ValueError(f"--data-dir {args.data_dir} is not a folder")
        if args.src == args.tgt:
            raise ValueError(f"--src and --tgt are both {args.src!r}: choose two languages")
        if args.list:
            list_variants(profile, args.max_steps)
            return 0
        if args.prepare:
            _, path = sweep_tokenizer(profile, work, args.src, args.tgt, data_dir=args.data_dir)
            print(path)
            return 0
        if args.calibrate is not None:
            if args.calibrate < 1:
                raise ValueError(f"--calibrate needs at least 1 step, got {args.calibrate}")
            return calibrate(args, profile, work)
        command = " ".join(["python", "tools/table3.py", *(argv or sys.argv[1:])])
        if args.lanes > 1:
            from sweep_lanes import sweep_in_lanes

            written, failed = sweep_in_lanes(args, profile, out, work, command)
        else:
            written = run_sweep(
                profile,
                out,
                work,
                src=args.src,
                tgt=args.tgt,
                only=args.only,
                max_steps=args.max_steps,
                data_dir=args.data_dir,
                device=args.device,
                budget_s=args.budget_s,
                provenance={"command": command},
                progress=not args.quiet,
            )
            failed = json.loads((out / MANIFEST_FILE).read_text())["invocations"][-1]["failed"]
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from transformer_lib.book.sweep import read_results
    from transformer_lib.book.variations import select_variants, sweep_variants

    tokenizer, _ = sweep_tokenizer(profile, work, args.src, args.tgt, data_dir=args.data_dir)
    wanted = select_variants(
        sweep_variants(profile, tokenizer.vocab_size, args.max_steps), args.only
    )
    done = {record["name"] for record in read_results(out)}
    left = [v.name for v in wanted if v.name not in done]
    print(
        f"{len(written)} variant(s) run now; {len(wanted) - len(left)} of {len(wanted)} done in {out}"
    )
    print("sweep complete" if not left else f"left: {' '.join(left)}")
    for name, message in failed.items():
        print(f"failed: {name}: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
