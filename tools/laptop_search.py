"""Choose the `laptop` profile by measurement: candidates trained for equal compute, scored on the
validation split.

This is the second search behind the profile. The first (results/laptop-search/, written by this
script at commit 04718e2) compared candidates at equal *minutes*, each calibrated at another hour;
this machine's speed drifted up to 2.4x between those hours, so its ranking mixed the candidates'
costs with the machine's moods. Here the cost of each candidate is measured *side by side*: every
candidate is timed in one sitting, in turn, several times over (``calibrate``), and its cost is
the median of its ratios to the leader's time within each round, a number that drift common to
both cancels out of. A rung's budget is a number of the leader's updates (``rung --budget N``);
each candidate trains for the updates that cost the same, ``N / cost``. Both the compute (updates
and the leader's updates they cost) and the wall time are recorded.

Each candidate is the first search's leader (the `laptop` profile it chose: d_model 128, d_ff 512,
2 heads, 3+3 layers, dropout 0.2, 8k joint BPE, warm-up 400, half rate) with one change, or a
combination of changes. They train German to English as the profile does (two processes of one
thread each). A rung scores each by the model that would be evaluated: the average of its last 5
checkpoints (100 updates apart), translated with beam 4 and alpha 0.6 (§6.1) over the whole
validation split, cased sacreBLEU, beside its validation perplexity. The test sets are never
looked at. Formula (3)'s schedule does not depend on the length of the run, so a longer rung
continues the runs of a shorter one.

    python tools/laptop_search.py calibrate --repeats 3     # on a quiet machine
    python tools/laptop_search.py rung --budget 1200        # every candidate
    python tools/laptop_search.py rung --budget 3000 --only leader,vocab_6000
    python tools/laptop_search.py window --only leader      # which checkpoints to average
    python tools/laptop_search.py levers                    # cheaper updates: bf16, compile
    python tools/laptop_search.py table

Results go to results/laptop-search-2/: ``search.jsonl`` (one line per timing, per cost and per
candidate and rung), each candidate's ``metrics.jsonl`` and a manifest. The runs' checkpoints stay
in the work folder (``--work``, default runs/laptop-search-2/).
"""

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # its neighbours, when imported rather than run

from search_common import (  # noqa: E402 (after the path)
    checkpoint_interval,
    read_jsonl,
    score_average,
    selected,
)

RESULTS = ROOT / "results" / "laptop-search-2"
SRC, TGT = "de", "en"
CORES = 2
PROCESSES = 2  # one per core, as the profile trains
TIMED_FROM = 5  # calibration leaves out the updates before this one (they include warming up)
AVERAGED = 5  # checkpoints averaged for a rung's score, as the recorded runs average (§6.1)

ONEDNN = {"products": "onednn"}  # TrainingConfig.products: every product by oneDNN

# Changes to the leader: (TransformerConfig changes, TrainingConfig changes, Profile changes).
CANDIDATES = {
    "leader": ({}, {}, {}),
    # The leader again with other initial weights and batches: the noise of one run.
    "leader_seed_1": ({}, {"seed": 1}, {}),
    # Cheaper updates: more of them in the same compute.
    "d_ff_256": ({"d_ff": 256}, {}, {}),  # d_ff = 2 d_model, which helped at width 256
    "layers_2": ({"n_layers": 2}, {}, {}),
    "vocab_6000": ({}, {}, {"vocab_size": 6000}),  # the projection onto the vocabulary costs
    "vocab_4000": ({}, {}, {"vocab_size": 4000}),  # most of an update at width 128
    # Wider, with more dropout to last longer.
    "dropout_0.3": ({"dropout": 0.3}, {}, {}),
    "d_model_192": ({"d_model": 192, "d_ff": 768, "n_heads": 3}, {}, {}),
    "d_model_256": ({"d_model": 256, "d_ff": 1024, "n_heads": 4, "dropout": 0.3}, {}, {}),
    "d_model_320": ({"d_model": 320, "d_ff": 1280, "n_heads": 5, "dropout": 0.3}, {}, {}),
    # After the first rung: the smaller vocabulary led, so a smaller one still, and the two
    # changes that led at equal compute (a smaller vocabulary, two layers a stack) together.
    "vocab_3000": ({}, {}, {"vocab_size": 3000}),
    "vocab_4000_layers_2": ({"n_layers": 2}, {}, {"vocab_size": 4000}),
    "vocab_3000_layers_2": ({"n_layers": 2}, {}, {"vocab_size": 3000}),
    # After the hour runs (validation loss flat over the last 1,500 updates at width 128, two
    # layers no better than three): the profile with oneDNN's products (the same arithmetic,
    # each update cheaper on this CPU), and the capacity those savings can buy.
    "vocab_4000_onednn": ({}, ONEDNN, {"vocab_size": 4000}),
    "vocab_4000_d_ff_1024_onednn": ({"d_ff": 1024}, ONEDNN, {"vocab_size": 4000}),
    "vocab_4000_d_model_192_onednn": (
        {"d_model": 192, "d_ff": 768, "n_heads": 3},
        ONEDNN,
        {"vocab_size": 4000},
    ),
    "vocab_4000_d_model_256_onednn": (
        {"d_model": 256, "d_ff": 1024, "n_heads": 4, "dropout": 0.3},
        ONEDNN,
        {"vocab_size": 4000},
    ),
}


def leader_profile():
    """The first search's leader, as the `laptop` profile it chose was before this search."""
    from transformer_lib.model import TransformerConfig
    from transformer_lib.recipe import Profile
    from transformer_lib.training import TrainingConfig

    return Profile(
        model=TransformerConfig(
            8000, 8000, d_model=128, d_ff=512, n_heads=2, n_layers=3, dropout=0.2
        ),
        training=TrainingConfig(
            max_steps=100_000,  # each rung sets how far to go
            warmup_steps=400,
            lr_scale=0.5,
            max_tokens=2048,  # per process: 4,096 a side per update
            log_every=25,
            checkpoint_every=100,
            keep_checkpoints=1000,  # all of them: the averaging window is chosen afterwards
            validate_every=250,
        ),
        bleu_sentences=500,
        processes=PROCESSES,
    )


def candidate_profile(name: str, **training_changes):
    """The Profile of candidate ``name`` (``training_changes`` override the training config)."""
    model_changes, training, profile_changes = CANDIDATES[name]
    start = leader_profile()
    return dataclasses.replace(
        start,
        model=dataclasses.replace(start.model, **model_changes),
        training=dataclasses.replace(start.training, **{**training, **training_changes}),
        **profile_changes,
    )


def worker(args: argparse.Namespace) -> None:
    """One candidate's training, run under torchrun by ``calibrate`` and ``rung``."""
    import torch

    from transformer_lib.recipe import train_translation

    torch.distributed.init_process_group("gloo")
    try:
        changes = {}
        if args.calibrate:
            changes = dict(log_every=1, validate_every=10**9, checkpoint_every=10**9)
        profile = candidate_profile(args.name, **changes)
        if args.calibrate:
            profile = dataclasses.replace(profile, bleu_sentences=0)
        last = args.out / "checkpoints" / "last.pt"
        train_translation(
            profile,
            SRC,
            TGT,
            args.out,
            resume=last.is_file(),
            max_steps=args.steps,
            progress=False,
        )
    finally:
        torch.distributed.destroy_process_group()


def launch(name: str, out: Path, steps: int, work: Path, calibrate: bool = False) -> None:
    """Train candidate ``name`` to update ``steps`` in ``out``: two processes of one thread.

    The joint BPE vocabulary of each size is learned once and copied into every run that uses it
    (learning it is deterministic, and the copy saves each run the seconds it takes).
    """
    vocab = candidate_profile(name).vocab_size
    shared = work / "tokenizers" / f"{vocab}.json"
    out.mkdir(parents=True, exist_ok=True)
    if shared.is_file() and not (out / "tokenizer.json").is_file():
        shutil.copyfile(shared, out / "tokenizer.json")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(PROCESSES), str(Path(__file__).resolve()), "_worker"]
    command += [name, "--out", str(out), "--steps", str(steps)]
    command += ["--calibrate"] if calibrate else []
    env = {**os.environ, "OMP_NUM_THREADS": str(CORES // PROCESSES)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    subprocess.run(command, env=env, check=True)
    if not shared.is_file():
        shared.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "tokenizer.json", shared)


def append(record: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "search.jsonl", "a") as file:
        file.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def cost_twin(name: str) -> str:
    """The first candidate whose updates cost what ``name``'s do: the same shapes, sizes and
    batches (the seed, learning rate, warm-up and dropout rate change no computation)."""
    free = {"dropout", "lr_scale", "warmup_steps", "seed"}

    def shape(candidate: str) -> tuple:
        profile = candidate_profile(candidate)
        model = {k: v for k, v in dataclasses.asdict(profile.model).items() if k not in free}
        training = {k: v for k, v in dataclasses.asdict(profile.training).items() if k not in free}
        return repr((model, training, profile.vocab_size))

    return next(other for other in CANDIDATES if shape(other) == shape(name))


def timed_updates(name: str, out: Path, updates: int, work: Path) -> float:
    """Seconds per update of candidate ``name``, from a fresh run of ``updates`` updates in
    ``out``, leaving out the first ``TIMED_FROM``."""
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: calibration never resumes
    launch(name, out, updates, work, calibrate=True)
    wall = {
        r["step"]: r["wall_s"] for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"
    }
    return (wall[updates] - wall[TIMED_FROM]) / (updates - TIMED_FROM)


def calibrate(args: argparse.Namespace) -> None:
    """Time every candidate that costs differently, in turn, ``--repeats`` times; each round
    starts one candidate further on, so that no candidate is always timed first or last."""
    names = [name for name in selected(args.only, CANDIDATES) if cost_twin(name) == name]
    if "leader" not in names:
        names.insert(0, "leader")
    sitting = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # ratios stay within one
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            seconds = timed_updates(name, args.work / "calibration" / name, args.updates, args.work)
            append(
                {
                    "kind": "timing",
                    "name": name,
                    "sitting": sitting,
                    "round": repeat,
                    "updates_timed": args.updates - TIMED_FROM,
                    "s_per_update": round(seconds, 4),
                }
            )
    for name in names:
        append({"kind": "cost", "name": name, **costs()[name]})
    write_manifest(args)


def costs() -> dict[str, dict]:
    """Each calibrated candidate's cost: its median seconds per update and the median, over
    rounds, of its time divided by the leader's in the same round of the same sitting (a
    candidate timed in several sittings pools its rounds)."""
    timings = [r for r in read_jsonl(RESULTS / "search.jsonl") if r["kind"] == "timing"]

    def when(record: dict) -> tuple:  # the first sitting's records predate the field
        return record.get("sitting", "first"), record["round"]

    leader = {when(r): r["s_per_update"] for r in timings if r["name"] == "leader"}
    result = {}
    for name in {r["name"] for r in timings}:
        mine = [r for r in timings if r["name"] == name and when(r) in leader]
        ratios = [r["s_per_update"] / leader[when(r)] for r in mine]
        seconds = [r["s_per_update"] for r in mine]
        result[name] = {
            "rounds": len(mine),
            "s_per_update": round(statistics.median(seconds), 4),
            "s_per_update_range": [min(seconds), max(seconds)],
            "relative_cost": round(statistics.median(ratios), 4),
            "relative_cost_range": [round(min(ratios), 4), round(max(ratios), 4)],
        }
    return result


def relative_cost(name: str) -> float:
    known = costs()
    twin = cost_twin(name)
    if twin not in known:
        raise SystemExit(f"{name} is not calibrated: run `calibrate --only {twin}` first")
    return known[twin]["relative_cost"]


def score(run: Path, steps: int, average: int = AVERAGED, every: int = 1) -> dict:
    """The validation scores of the model a rung stopped at: the average of ``average``
    checkpoints ``every`` checkpoints apart, ending at update ``steps`` (tools/search_common.py)."""
    interval = checkpoint_interval(run) * every
    return score_average(run / "checkpoints", steps, average, interval, SRC, TGT)


def rung(args: argparse.Namespace) -> None:
    """Train each candidate (resuming) to the updates that cost ``--budget`` of the leader's,
    then score it."""
    done = {
        (r["name"], r["budget"])
        for r in read_jsonl(RESULTS / "search.jsonl")
        if r["kind"] == "rung"
    }
    names = selected(args.only, CANDIDATES)
    steps_of = {name: round(args.budget / relative_cost(name)) for name in names}
    for name in names:
        if (name, args.budget) in done:
            continue
        every = candidate_profile(name).training.checkpoint_every
        steps = max(every, round(steps_of[name] / every) * every)  # ends on a checkpoint
        # A run too short for 5 checkpoints past the first averages those it has past the first.
        average = max(1, min(AVERAGED, steps // every - 1))
        out = args.work / name
        started = time.perf_counter()
        launch(name, out, steps, args.work)
        trained_s = time.perf_counter() - started
        metrics = read_jsonl(out / "metrics.jsonl")
        last = [r for r in metrics if r["kind"] == "train" and r["step"] == steps][-1]
        scored = score(out, steps, average)
        append(
            {
                "kind": "rung",
                "name": name,
                "budget": args.budget,  # the leader's updates
                "steps": steps,
                "relative_cost": relative_cost(name),
                "leader_updates": round(steps * relative_cost(name)),  # the compute it used
                **scored,
                "wall_s": round(last["wall_s"], 1),  # the updates alone, all commands
                "elapsed_s": round(last["elapsed_s"], 1),  # with validations and checkpoints
                "command_s": round(trained_s, 1),
            }
        )
        from transformer_lib.provenance import write_text_atomically

        log = (out / "metrics.jsonl").read_text()
        write_text_atomically(RESULTS / "runs" / f"{name}.metrics.jsonl", log)
    write_manifest(args)


def window(args: argparse.Namespace) -> None:
    """For candidates that reached a rung, the validation scores of other averaging windows:
    the last 1, 5, 10 and 20 checkpoints 100 updates apart, and 5 checkpoints 200 apart."""
    rungs = [r for r in read_jsonl(RESULTS / "search.jsonl") if r["kind"] == "rung"]
    for name in selected(args.only, CANDIDATES):
        mine = [r for r in rungs if r["name"] == name]
        if not mine:
            raise SystemExit(f"{name} has reached no rung")
        last = max(mine, key=lambda r: r["steps"])
        for average, every in ((1, 1), (5, 1), (10, 1), (20, 1), (5, 2), (10, 2)):
            scored = score(args.work / name, last["steps"], average, every)
            append({"kind": "window", "name": name, "average": average, "every": every, **scored})


def levers(args: argparse.Namespace) -> None:
    """Ways to make the leader's update cheaper, timed side by side: float32 (as it trains),
    bf16 autocast, and ``torch.compile`` (shapes marked dynamic, so that batches of new lengths
    do not compile again). One process of one thread, as each of the profile's two processes
    runs, on the first batches of rank 0; the variants take turns, ``--repeats`` rounds."""
    import contextlib

    import torch

    from transformer_lib.batching import BatchesByLength, encode_pairs
    from transformer_lib.data import load_multi30k
    from transformer_lib.model import Transformer
    from transformer_lib.objective import update_step
    from transformer_lib.schedule import make_optimizer
    from transformer_lib.tokenizer import PAD_ID, BPETokenizer

    torch.set_num_threads(CORES // PROCESSES)
    profile = leader_profile()
    tokenizer = BPETokenizer.load(args.work / "tokenizers" / f"{profile.vocab_size}.json")
    pairs = encode_pairs(tokenizer, load_multi30k("train", SRC, TGT), profile.max_len)
    batches = BatchesByLength(pairs, profile.training.max_tokens, 0, 0, PROCESSES)(0)
    config = dataclasses.replace(
        profile.model, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size
    )
    torch.manual_seed(0)
    model = Transformer(config).train()
    compiled = torch.compile(model, dynamic=True)
    optimizer, scheduler = make_optimizer(model, config.d_model, 400, profile.training.lr_scale)
    variants = {
        "float32": (model, contextlib.nullcontext),
        "bf16 autocast": (model, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
        "torch.compile": (compiled, contextlib.nullcontext),
    }

    def run(network, autocast, chosen) -> float:
        started = time.perf_counter()
        for batch in chosen:
            update_step(
                network, [batch], optimizer, scheduler, profile.training, PAD_ID, autocast()
            )
        return (time.perf_counter() - started) / len(chosen)

    warm = batches[: args.updates]  # every variant sees these first (compilation happens here)
    for name, (network, autocast) in variants.items():
        seconds = run(network, autocast, warm)
        append({"kind": "lever_warm-up", "name": name, "s_per_update": round(seconds, 4)})
    timed = batches[args.updates : 2 * args.updates]
    for repeat in range(args.repeats):
        for name, (network, autocast) in variants.items():
            seconds = run(network, autocast, timed)
            record = {"kind": "lever", "name": name, "round": repeat}
            append({**record, "s_per_update": round(seconds, 4)})
    write_manifest(args)


def write_manifest(args: argparse.Namespace) -> None:
    from transformer_lib.provenance import cpu_name, environment, jsonable, write_json

    start = leader_profile()
    manifest = {
        **environment("cpu"),
        "cpu": cpu_name(),
        "processes": PROCESSES,
        "threads_per_process": CORES // PROCESSES,
        "leader": {
            "model": jsonable(start.model),
            "training": jsonable(start.training),
            "vocab_size": start.vocab_size,
        },
        "candidates": {
            name: {"model": m, "training": t, "profile": p}
            for name, (m, t, p) in CANDIDATES.items()
        },
        "last_command": shlex.join(["python", "tools/laptop_search.py", *sys.argv[1:]]),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(RESULTS / "manifest.json", manifest)


def table(args: argparse.Namespace) -> None:
    rungs = [r for r in read_jsonl(RESULTS / "search.jsonl") if r["kind"] == "rung"]
    print(
        f"{'candidate':14} {'cost':>5} {'budget':>6} {'steps':>6} {'ppl':>6} {'BLEU':>6} {'min':>5}"
        " alpha"
    )
    for r in sorted(rungs, key=lambda r: (r["budget"], -r["valid_bleu"])):
        print(
            f"{r['name']:14} {r['relative_cost']:5.2f} {r['budget']:6d} {r['steps']:6d} "
            f"{r['valid_ppl']:6.3f} {r['valid_bleu']:6.2f} {r['wall_s'] / 60:5.1f} "
            # The length penalty of its BLEU: score_average's, §6.1's 0.6 (the recorded rungs
            # were scored before the records named it).
            f"{r.get('alpha', 0.6):5}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python tools/laptop_search.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "laptop-search-2")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, run in (
        ("calibrate", calibrate),
        ("rung", rung),
        ("window", window),
        ("levers", levers),
        ("table", table),
    ):
        command = commands.add_parser(name)
        command.add_argument("--only", help="comma-separated candidate names")
        if name in ("calibrate", "levers"):
            command.add_argument("--repeats", type=int, default=3, help="rounds of timings")
            command.add_argument("--updates", type=int, default=25, help="updates a timing")
        if name == "rung":
            command.add_argument(
                "--budget", type=int, required=True, help="compute, in the leader's updates"
            )
        command.set_defaults(run=run)
    hidden = commands.add_parser("_worker")
    hidden.add_argument("name", choices=list(CANDIDATES))
    hidden.add_argument("--out", type=Path, required=True)
    hidden.add_argument("--steps", type=int, required=True)
    hidden.add_argument("--calibrate", action="store_true")
    hidden.set_defaults(run=worker)
    args = parser.parse_args()
    if args.command != "_worker":
        args.work = args.work.resolve()
    args.run(args)


if __name__ == "__main__":
    main()
