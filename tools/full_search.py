"""Regularise the `full` profile by measurement: candidates trained side by side on one GPU, each
scored at several stopping points on the validation split.

The recorded `full` runs overfit Multi30k: their validation loss is lowest near update 3,000 and
rises after it while the training loss goes on falling, and the five checkpoints that the
evaluation averages come from the end of the run. This search asks which of a few remedies
helps, and where a run should stop: more dropout, more label smoothing, a shallower model, and
the profile itself as the yardstick. Each candidate trains in each direction asked for (German
to English and English to German by default) as its own process on the one GPU (a model this
small leaves a GPU mostly idle, so they share it) and keeps every checkpoint. ``score`` then
evaluates each candidate at several stopping points: the average of the 5 checkpoints ending
there, as a recorded run is averaged (§6.1), translated with beam 4 and alpha 0.6 over the whole
validation split (cased sacreBLEU), beside its validation perplexity (tools/search_common.py).
The test sets are never looked at. Formula (3) does not depend on the run's length, so a run
stopped at update N is the run that a profile of N updates would have made. ``recorded`` scores
the recorded runs' shipped models the same way (any machine will do), at the profile's own end.

    python tools/full_search.py train --steps 6000 [--time-limit 420]   # resumable
    python tools/full_search.py score --ends 2000,3000,4000,5000,6000
    python tools/full_search.py recorded --alphas 0.6,1.2 --device cpu
    python tools/full_search.py table

``--directions de-en`` searches one direction only. ``tools/gpu/real_run.sh search`` runs
``train``, ``score`` and ``table`` on a GPU machine. Results go to
results/full-search/<src>-<tgt>/ (``--results`` names the folder above): ``search.jsonl`` (one
line per candidate and stopping point), each candidate's ``metrics.jsonl``, a manifest, and
``recorded.jsonl`` with its own manifest; the checkpoints stay in the work folder (``--work``,
default runs/full-search/<src>-<tgt>/). ``--base ci`` searches around the `ci` profile instead,
on the CPU if there is no GPU: a check of the script in a minute, not a search.
"""

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # its neighbours, when imported rather than run

from search_common import (  # noqa: E402 (after the path)
    checkpoint_interval,
    checkpoint_steps,
    read_jsonl,
    score_average,
    score_model,
    selected,
)

DIRECTIONS = ("de-en", "en-de")
AVERAGED = 5  # checkpoints averaged for a score, as the recorded runs average (§6.1)

# Changes to the base profile: (TransformerConfig changes, TrainingConfig changes).
CANDIDATES = {
    "profile": ({}, {}),  # the yardstick: the profile as the recorded runs trained it
    "dropout_0.4": ({"dropout": 0.4}, {}),  # more regularisation of the same model
    "smoothing_0.2": ({}, {"label_smoothing": 0.2}),  # a softer target distribution
    "layers_3": ({"n_layers": 3}, {}),  # less capacity to memorise the captions
}


def candidate_profile(base: str, name: str):
    """Candidate ``name``: the ``base`` profile with its changes, keeping every checkpoint."""
    from transformer_lib.recipe import PROFILES

    model_changes, training_changes = CANDIDATES[name]
    start = PROFILES[base]
    training = dataclasses.replace(start.training, keep_checkpoints=10**6, **training_changes)
    return dataclasses.replace(
        start, model=dataclasses.replace(start.model, **model_changes), training=training
    )


def worker(args: argparse.Namespace) -> None:
    """One candidate's training in one direction, started by ``train`` as a process of its own."""
    from transformer_lib.recipe import train_translation

    src, tgt = args.direction.split("-")
    last = args.out / "checkpoints" / "last.pt"
    train_translation(
        candidate_profile(args.base, args.name),
        src,
        tgt,
        args.out,
        resume=last.is_file(),
        max_steps=args.steps,
        time_limit=args.time_limit,
        device=args.device,
        progress=False,
    )


def trained_to(run: Path) -> int:
    """The last update of a run folder's regular checkpoints (0 before its first)."""
    return max(checkpoint_steps(run / "checkpoints"), default=0)


def train(args: argparse.Namespace) -> None:
    """Train every selected candidate to ``--steps`` in every direction, all at once, each its own
    process (its log in the direction's work folder); ``--time-limit`` stops each with a
    checkpoint to resume from."""
    running = {}
    for direction in args.directions:
        work = args.work / direction
        for name in selected(args.only, CANDIDATES):
            out = work / name
            if trained_to(out) >= args.steps:
                continue
            out.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, str(Path(__file__).resolve()), "--base", args.base]
            command += ["--work", str(args.work), "--results", str(args.results)]
            command += ["_worker", name, "--direction", direction, "--out", str(out)]
            command += ["--steps", str(args.steps), "--device", args.device]
            if args.time_limit is not None:
                command += ["--time-limit", str(args.time_limit)]
            log = open(work / f"{name}.log", "a")
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            running[direction, name] = (process, log)
    failed = []
    for key, (process, log) in running.items():
        if process.wait() != 0:
            failed.append("-".join(key))
        log.close()
    for direction in args.directions:
        for name in selected(args.only, CANDIDATES):
            reached = trained_to(args.work / direction / name)
            print(f"{direction} {name}: trained to update {reached:,} of {args.steps:,}")
    if failed:
        raise SystemExit(f"training failed for {failed}: see their logs in {args.work}")
    for direction in args.directions:
        write_manifest(args, direction)


def score(args: argparse.Namespace) -> None:
    """Score each candidate at each stopping point of ``--ends`` that it has reached and that is
    not scored yet; copy its training log beside the scores."""
    from transformer_lib.provenance import write_text_atomically

    ends = [int(end) for end in args.ends.split(",")]
    for direction in args.directions:
        src, tgt = direction.split("-")
        results = args.results / direction
        done = {(r["name"], r["end"]) for r in read_jsonl(results / "search.jsonl")}
        for name in selected(args.only, CANDIDATES):
            run = args.work / direction / name
            if not run.is_dir():
                continue
            reached, interval = trained_to(run), checkpoint_interval(run)
            for end in ends:
                if end > reached or (name, end) in done:
                    continue
                average = max(1, min(AVERAGED, end // interval))  # a short run averages what it has
                started = time.perf_counter()
                scored = score_average(
                    run / "checkpoints", end, average, interval, src, tgt, args.device, args.limit
                )
                record = {"kind": "stop", "name": name, "direction": direction, "end": end}
                record.update(scored, score_s=round(time.perf_counter() - started, 1))
                append(results / "search.jsonl", record)
            log = (run / "metrics.jsonl").read_text()
            write_text_atomically(results / "runs" / f"{name}.metrics.jsonl", log)
        write_manifest(args, direction)


def recorded(args: argparse.Namespace) -> None:
    """Score the recorded run of each direction (results/multi30k-<src>-<tgt>, the model it
    ships) on the validation split as the candidates are scored, at each alpha of ``--alphas``:
    the yardstick at the profile's own stopping point. Its lines go to recorded.jsonl beside the
    search's, with a manifest of their own (they are scored on another machine)."""
    from transformer_lib.book.report import read_report
    from transformer_lib.pretrained import load_pretrained
    from transformer_lib.provenance import environment, write_json

    alphas = [float(alpha) for alpha in args.alphas.split(",")]
    for direction in args.directions:
        src, tgt = direction.split("-")
        folder = ROOT / "results" / f"multi30k-{direction}"
        out = args.results / direction / "recorded.jsonl"
        done = {r["alpha"] for r in read_jsonl(out)}
        report = read_report(folder)
        manifest, averaged = report["manifest"], report["bleu"]["averaged_steps"]
        model, tokenizer = load_pretrained(folder, args.device)
        for alpha in alphas:
            if alpha in done:
                continue
            started = time.perf_counter()
            scored = score_model(model, tokenizer, src, tgt, args.device, args.limit, alpha)
            record = {"kind": "recorded", "name": "recorded", "direction": direction}
            record.update(end=manifest["training"]["steps"], averaged_steps=averaged)
            record.update(scored, score_s=round(time.perf_counter() - started, 1))
            record["model"] = {
                "folder": folder.relative_to(ROOT).as_posix(),
                "dtype": manifest["shipped_model"]["dtype"],
                "sha256": manifest["shipped_model"]["sha256"]["model.safetensors"],
            }
            append(out, record)
        command = shlex.join(["python", "tools/full_search.py", *sys.argv[1:]])
        write_json(
            out.with_suffix(".manifest.json"), {**environment(args.device), "command": command}
        )


def append(path: Path, record: dict) -> None:
    """Add ``record`` as a line of the JSON-lines file ``path``, and print it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as file:
        file.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def table(args: argparse.Namespace) -> None:
    """Each candidate's scores by stopping point, in each direction, its best marked."""
    for direction in args.directions:
        records = read_jsonl(args.results / direction / "search.jsonl")
        print(f"{direction:6} {'candidate':14} {'end':>6} {'ppl':>7} {'BLEU':>6} {'chrF':>6} alpha")
        for name in CANDIDATES:
            mine = sorted((r for r in records if r["name"] == name), key=lambda r: r["end"])
            best = max(mine, key=lambda r: r["valid_bleu"], default=None)
            for r in mine:
                mark = "  <- best" if r is best else ""
                print(
                    f"{direction:6} {name:14} {r['end']:6d} {r['valid_ppl']:7.3f} "
                    f"{r['valid_bleu']:6.2f} {r['valid_chrf']:6.2f} {r['alpha']:5}{mark}"
                )


def write_manifest(args: argparse.Namespace, direction: str) -> None:
    from transformer_lib.provenance import environment, jsonable, write_json
    from transformer_lib.recipe import PROFILES

    start = PROFILES[args.base]
    src, tgt = direction.split("-")
    work = args.work / direction
    manifest = {
        **environment(args.device),
        "base": args.base,
        "src": src,
        "tgt": tgt,
        "profile": {"model": jsonable(start.model), "training": jsonable(start.training)},
        "candidates": {name: {"model": m, "training": t} for name, (m, t) in CANDIDATES.items()},
        "trained_to": {name: trained_to(work / name) for name in CANDIDATES},
        "last_command": shlex.join(["python", "tools/full_search.py", *sys.argv[1:]]),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(args.results / direction / "manifest.json", manifest)


def directions(text: str) -> list[str]:
    """``--directions``: comma-separated, each one of DIRECTIONS."""
    names = text.split(",")
    unknown = [name for name in names if name not in DIRECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown directions {unknown}: choose from {DIRECTIONS}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python tools/full_search.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base", choices=["full", "ci"], default="full", help="profile searched")
    parser.add_argument("--work", type=Path, help="run folders (default runs/<base>-search)")
    parser.add_argument("--results", type=Path, help="default results/<base>-search")
    commands = parser.add_subparsers(dest="command", required=True)
    subcommands = (("train", train), ("score", score), ("recorded", recorded), ("table", table))
    for name, run in subcommands:
        command = commands.add_parser(name)
        command.add_argument("--only", help="comma-separated candidate names")
        command.add_argument(
            "--directions",
            type=directions,
            default=list(DIRECTIONS),
            help="comma-separated, e.g. de-en (default: de-en,en-de)",
        )
        command.set_defaults(run=run)
        if name == "train":
            command.add_argument("--steps", type=int, default=6000, help="updates a candidate")
            command.add_argument("--time-limit", type=float, help="seconds of training")
        if name == "score":
            command.add_argument(
                "--ends", default="2000,3000,4000,5000,6000", help="stopping points to score"
            )
        if name == "recorded":
            command.add_argument("--alphas", default="0.6", help="length penalties to score")
        if name in ("score", "recorded"):
            command.add_argument("--limit", type=int, help="validation sentences (checks only)")
        if name != "table":
            command.add_argument("--device", help="cuda or cpu (default: cuda if there is one)")
    hidden = commands.add_parser("_worker")
    hidden.add_argument("name", choices=list(CANDIDATES))
    hidden.add_argument("--direction", choices=DIRECTIONS, required=True)
    hidden.add_argument("--out", type=Path, required=True)
    hidden.add_argument("--steps", type=int, required=True)
    hidden.add_argument("--time-limit", type=float)
    hidden.add_argument("--device", required=True)
    hidden.set_defaults(run=worker)
    args = parser.parse_args()
    args.work = (args.work or ROOT / "runs" / f"{args.base}-search").resolve()
    args.results = (args.results or ROOT / "results" / f"{args.base}-search").resolve()
    if getattr(args, "device", "") is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.run(args)


if __name__ == "__main__":
    main()
