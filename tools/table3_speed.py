"""Time Table 3's base and its LSTM side by side: training throughput against sentence length, and
seconds per update on the sweep's own batches, the models taking turns round after round.

The sweep fixes updates, not minutes, so its lines hold no fair speed comparison: each variant
trained at another hour, on a machine whose speed drifted. Here every round times every model on
the same batches, one after the other (in reverse order every other round), so that whatever else
the machine does slows them alike; each round's times are kept, so the spread over rounds shows.
Each timed update is the training loop's own (``update_step``: forward, label-smoothed loss,
backward, Adam and the schedule). Run it on an otherwise idle machine:

    python tools/table3_speed.py --profile cpu        # into results/table3-cpu-speed/speed.json
    python tools/table3_speed.py --profile ci --rounds 1 --batches 2 --out /tmp/speed

By length: pairs of L random tokens a side, as many as the profile's token budget holds
(``max_tokens // (L + 1)``), so every batch has about the same number of tokens and only their
arrangement changes: few long sentences or many short ones. The sweep's batches: the first
``--batches`` batches the sweep's base trains on (Multi30k, batched by length).
Errors a user can cause end in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT_FILE = "speed.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tools/table3_speed.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--profile", choices=["cpu", "ci", "full"], default="cpu", help="sweep (default: cpu)"
    )
    parser.add_argument(
        "--variants", nargs="+", default=["base", "RNN-lstm"], metavar="NAME", help="the models"
    )
    parser.add_argument(
        "--lengths", nargs="+", type=int, default=[8, 16, 32, 64, 128], help="tokens a side"
    )
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (after one untimed)")
    parser.add_argument("--batches", type=int, default=20, help="the sweep's batches per round")
    parser.add_argument(
        "--threads", type=int, help="CPU threads (default: PyTorch's, as the sweep)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--data-dir", type=Path, help="folder with the Multi30k .gz files")
    parser.add_argument("--work", type=Path, help="the sweep's work folder (its tokenizer)")
    parser.add_argument("--out", type=Path, help="results folder (results/table3-<profile>-speed)")
    return parser


def check(args, profile) -> None:
    """Refuse options that cannot give a measurement (a ValueError says which)."""
    if args.rounds < 1 or args.batches < 1:
        raise ValueError(
            f"--rounds and --batches must be at least 1, got {args.rounds}, {args.batches}"
        )
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    for length in args.lengths:
        if not 1 <= length <= profile.max_len or length + 1 > profile.training.max_tokens:
            raise ValueError(
                f"--lengths {length}: choose lengths from 1 to {profile.max_len} tokens"
            )
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise ValueError(f"--data-dir {args.data_dir} is not a folder")
    if args.device not in ("cpu", "cuda"):
        raise ValueError(f"--device {args.device!r}: choose cpu or cuda")


class Candidate:
    """One variant's model, optimizer and schedule, trained one update at a time."""

    def __init__(self, variant, device):
        import torch

        from transformer_lib.book.variations import build_model
        from transformer_lib.schedule import make_optimizer

        self.variant, self.device = variant, device
        torch.manual_seed(variant.training.seed)
        self.model = build_model(variant.model).to(device).train()
        t = variant.training
        self.optimizer, self.scheduler = make_optimizer(
            self.model, variant.model.d_model, t.warmup_steps, t.lr_scale, t.betas, t.eps
        )

    def seconds(self, batches) -> float:
        """Wall seconds of one training update per batch, over ``batches``."""
        import torch

        from transformer_lib.objective import update_step

        started = time.perf_counter()
        for batch in batches:
            update_step(
                self.model,
                [batch],
                self.optimizer,
                self.scheduler,
                self.variant.training,
                self.variant.model.pad_id,
            )
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - started


def in_turns(candidates: dict, batches: list, rounds: int) -> dict[str, list[float]]:
    """Seconds of each candidate over ``batches`` in each of ``rounds`` timed rounds (one untimed
    round first); the order of the candidates is reversed every other round."""
    times = {name: [] for name in candidates}
    for number in range(rounds + 1):
        order = list(candidates) if number % 2 else list(reversed(candidates))
        for name in order:
            seconds = candidates[name].seconds(batches)
            if number:  # round 0 warms up caches and allocators
                times[name].append(seconds)
    return times


def measure(args, profile) -> dict:
    import random

    import torch

    from transformer_lib.batching import BatchesByLength, collate, encode_pairs
    from transformer_lib.book.performance import training_flops
    from transformer_lib.book.sweep import sweep_tokenizer
    from transformer_lib.book.variations import select_variants, sweep_variants
    from transformer_lib.data import load_multi30k

    device = torch.device(args.device)
    work = args.work or ROOT / "runs" / f"table3-{args.profile}"
    train_pairs = load_multi30k("train", "en", "de", args.data_dir)
    tokenizer, _ = sweep_tokenizer(profile, work, "en", "de", train_pairs)
    variants = select_variants(sweep_variants(profile, tokenizer.vocab_size), args.variants)
    candidates = {v.name: Candidate(v, device) for v in variants}
    budget = profile.training.max_tokens
    rng = random.Random(0)
    by_length = []
    for length in args.lengths:
        count = budget // (length + 1)  # the budget counts </s> (source) and <s> (target)
        pairs = [
            tuple([rng.randrange(4, tokenizer.vocab_size) for _ in range(length)] for _ in "st")
            for _ in range(count)
        ]
        batch = collate(pairs).to(device)
        times = in_turns(candidates, [batch], args.rounds)
        tokens = batch.n_tokens
        by_length.append(
            {"length": length, "pairs": count, "target_tokens": tokens, "seconds": times}
        )
        rates = ", ".join(f"{n} {tokens / min(s):,.0f}" for n, s in times.items())
        print(f"length {length:4d} ({count} pairs): best target tokens/s {rates}", flush=True)
    encoded = encode_pairs(tokenizer, train_pairs, profile.max_len)
    seed = profile.training.seed
    batches = [b.to(device) for b in BatchesByLength(encoded, budget, seed)(0)[: args.batches]]
    times = in_turns(candidates, batches, args.rounds)
    lengths = [((b.src != 0).sum(1).tolist(), (b.tgt_out != 0).sum(1).tolist()) for b in batches]
    sweep = {
        "batches": len(batches),
        "target_tokens": sum(b.n_tokens for b in batches),
        "seconds": times,
        "flops": {v.name: sum(training_flops(v.model, s, t) for s, t in lengths) for v in variants},
    }
    for name, seconds in times.items():
        print(f"the sweep's batches: {name} {min(seconds) / len(batches):.3f} s an update (best)")
    return {
        "variants": {
            v.name: {
                "label": v.label,
                "parameters": sum(p.numel() for p in candidates[v.name].model.parameters()),
            }
            for v in variants
        },
        "by_length": by_length,
        "sweep_batches": sweep,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformer_lib.book.variations import SWEEP_PROFILES, sweep_identity
    from transformer_lib.provenance import environment, jsonable, write_text_atomically

    profile = SWEEP_PROFILES[args.profile]
    out = args.out or ROOT / "results" / f"table3-{args.profile}-speed"
    try:
        check(args, profile)
        import torch

        if args.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: this machine has no CUDA device (use --device cpu)")
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        started = time.perf_counter()
        results = measure(args, profile)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    manifest = {
        "measurement": "Table 3's base and LSTM trained side by side, in turns",
        "command": shlex.join(["python", "tools/table3_speed.py", *(argv or sys.argv[1:])]),
        "profile_name": args.profile,
        "profile": sweep_identity(jsonable(profile)),
        "rounds": args.rounds,
        "threads": torch.get_num_threads(),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - started, 3),
        **environment(torch.device(args.device)),
    }
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"manifest": manifest, "results": results}, indent=1) + "\n"
    write_text_atomically(out / RESULT_FILE, text)
    print(f"wrote {out / RESULT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
