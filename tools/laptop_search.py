"""Choose the `laptop` profile by measurement: candidates trained for equal minutes, scored by BLEU.

Each candidate is the search's starting point with one change (width, depth, feed-forward size,
vocabulary, batch size, learning rate, warm-up or dropout). All of them train German to English
as the profile does (two processes of one thread each) and are compared at equal minutes of
training on this machine, as numbers of updates: ``calibrate`` measures every candidate's seconds
per update (once for candidates that differ only in settings that cost nothing, such as the
learning rate or the dropout rate), ``rung --minutes M`` trains each one (resuming) to the updates that fill M minutes and
scores it by the cased BLEU of its greedy translation of the whole validation split. Formula (3)'s
schedule does not depend on the length of the run, so a candidate stopped at M minutes is exactly
the first M minutes of a longer run: the rungs of a successive-halving search can continue the
runs of the earlier ones.

    python tools/laptop_search.py calibrate                 # on a quiet machine
    python tools/laptop_search.py rung --minutes 18         # every candidate
    python tools/laptop_search.py rung --minutes 40 --only lr_1.0,dropout_0.1
    python tools/laptop_search.py precision              # float32 or bf16 autocast
    python tools/laptop_search.py processes              # 2 processes x 1 thread or 1 x 2
    python tools/laptop_search.py table

Results go to results/laptop-search/: ``search.jsonl`` (one line per calibration and per
candidate and rung), each candidate's ``metrics.jsonl`` and a manifest. The runs' checkpoints stay
in the work folder (``--work``, default runs/laptop-search/).
"""

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the library of this checkout, not an installed copy

RESULTS = ROOT / "results" / "laptop-search"
SRC, TGT = "de", "en"
CORES = 2
PROCESSES = 2  # one per core: `processes` measures this against one process of two threads
CALIBRATION_STEPS = 35  # the first 5 are left out (they include warming up)
PRECISION_UPDATES = 3  # after one to warm up: bf16 is slow enough on CPUs without bf16 units

# One change each to the starting point: (TransformerConfig changes, TrainingConfig changes,
# Profile changes). The starting point is the untuned first try (d_model 256, 3+3 layers, d_ff
# 1024, 8k joint BPE, dropout 0.2, updates of 4,096 tokens a side, half rate, 400 warm-up).
CANDIDATES = {
    "start": ({}, {}, {}),
    "lr_1.0": ({}, {"lr_scale": 1.0}, {}),
    "warmup_200": ({}, {"warmup_steps": 200}, {}),
    "dropout_0.1": ({"dropout": 0.1}, {}, {}),
    "dropout_0.3": ({"dropout": 0.3}, {}, {}),
    "vocab_6000": ({}, {}, {"vocab_size": 6000}),
    "batch_2048": ({}, {"max_tokens": 1024, "warmup_steps": 800}, {}),
    "layers_4": ({"n_layers": 4}, {}, {}),
    "d_ff_512": ({"d_ff": 512}, {}, {}),
    "d_model_192": ({"d_model": 192, "d_ff": 768, "n_heads": 3}, {}, {}),
    "d_model_320": ({"d_model": 320, "d_ff": 1280, "n_heads": 5}, {}, {}),
    # Narrower and shallower still: the widths above found the narrower model ahead at 18 minutes.
    "d_model_128": ({"d_model": 128, "d_ff": 512, "n_heads": 2}, {}, {}),
    "layers_2": ({"n_layers": 2}, {}, {}),
    # The single changes that won at 18 minutes, together: the narrower model, warm-up 200,
    # dropout 0.1; then also the narrower feed-forward layer (d_ff = 2 d_model, as d_ff_512 had).
    "combo_192": (
        {"d_model": 192, "d_ff": 768, "n_heads": 3, "dropout": 0.1},
        {"warmup_steps": 200},
        {},
    ),
    "combo_192_ff384": (
        {"d_model": 192, "d_ff": 384, "n_heads": 3, "dropout": 0.1},
        {"warmup_steps": 200},
        {},
    ),
}


def candidate_profile(name: str, **training_changes):
    """The Profile of candidate ``name`` (``training_changes`` override the training config)."""
    from transformer_lib.model import TransformerConfig
    from transformer_lib.recipe import Profile
    from transformer_lib.training import TrainingConfig

    model_changes, training, profile_changes = CANDIDATES[name]
    start = Profile(
        model=TransformerConfig(
            8000, 8000, d_model=256, d_ff=1024, n_heads=4, n_layers=3, dropout=0.2
        ),
        training=TrainingConfig(
            max_steps=100_000,  # each rung sets how far to go
            warmup_steps=400,
            lr_scale=0.5,
            max_tokens=2048,  # per process
            log_every=25,
            checkpoint_every=50,
            keep_checkpoints=100,  # all of them: the averaging window is chosen afterwards
            validate_every=100,
        ),
        bleu_sentences=500,
        processes=PROCESSES,
    )
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
            changes = dict(log_every=5, validate_every=10**9, checkpoint_every=10**9)
        profile = candidate_profile(args.name, **changes)
        if args.processes != PROCESSES:  # the same tokens per update, over fewer processes
            per_process = profile.training.max_tokens * PROCESSES // args.processes
            training = dataclasses.replace(profile.training, max_tokens=per_process)
            profile = dataclasses.replace(profile, training=training, processes=args.processes)
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


def launch(
    name: str, out: Path, steps: int, calibrate: bool = False, processes: int = PROCESSES
) -> None:
    """Train candidate ``name`` to update ``steps`` in ``out`` with ``processes`` processes that
    share the machine's two cores (one thread each, or all the threads for one process)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(processes), str(Path(__file__).resolve()), "_worker"]
    command += [name, "--out", str(out), "--steps", str(steps)]
    command += ["--calibrate"] if calibrate else []
    command += ["--processes", str(processes)]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, CORES // processes))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    subprocess.run(command, env=env, check=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def append(record: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "search.jsonl", "a") as file:
        file.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def cost_twin(name: str) -> str:
    """The first candidate whose updates cost what ``name``'s do: the same shapes, sizes and
    batches (the learning rate, warm-up and dropout rate change no computation)."""
    free = {"dropout", "lr_scale", "warmup_steps"}

    def shape(candidate: str) -> tuple:
        profile = candidate_profile(candidate)
        model = {k: v for k, v in dataclasses.asdict(profile.model).items() if k not in free}
        training = {k: v for k, v in dataclasses.asdict(profile.training).items() if k not in free}
        return repr((model, training, profile.vocab_size))

    return next(other for other in CANDIDATES if shape(other) == shape(name))


def seconds_per_update() -> dict[str, float]:
    """Each candidate's calibrated seconds per update (its cost twin's)."""
    records = read_jsonl(RESULTS / "search.jsonl")
    measured = {r["name"]: r["s_per_update"] for r in records if r["kind"] == "calibration"}
    return {name: measured[cost_twin(name)] for name in CANDIDATES if cost_twin(name) in measured}


def calibrate(args: argparse.Namespace) -> None:
    done = seconds_per_update()
    for name in selected(args):
        if name in done or cost_twin(name) != name:
            continue
        out = args.work / "calibration" / name
        seconds = timed_updates(name, out)
        append({"kind": "calibration", "name": name, "s_per_update": round(seconds, 4)})


def timed_updates(name: str, out: Path, processes: int = PROCESSES) -> float:
    """Seconds per update of candidate ``name``, from updates 5 to 35 of a fresh run in ``out``."""
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: calibration never resumes
    launch(name, out, CALIBRATION_STEPS, calibrate=True, processes=processes)
    train = [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    first, last = train[0], train[-1]  # steps 5 and 35
    return (last["wall_s"] - first["wall_s"]) / (last["step"] - first["step"])


def processes(args: argparse.Namespace) -> None:
    """Two processes of one thread against one process of two threads, with the same tokens per
    update: which way of using the two cores trains faster."""
    measured = {}
    for count in (PROCESSES, 1):
        out = args.work / "processes" / str(count)
        measured[count] = timed_updates("start", out, processes=count)
    append(
        {
            "kind": "processes",
            "name": "start",
            "s_per_update": {
                f"{n} x {CORES // n} threads": round(s, 4) for n, s in measured.items()
            },
            "speed-up": round(measured[1] / measured[PROCESSES], 3),
        }
    )


def precision(args: argparse.Namespace) -> None:
    """float32 against bf16 autocast on this CPU: seconds per update of the starting point's model
    on the same batches (one process, all threads), and the loss each reaches from the same start.

    Random token ids in Multi30k's sentence lengths stand in for the data: the cost of an update
    depends on the shapes, not on which tokens fill them.
    """
    import contextlib

    import torch

    from transformer_lib.batching import collate
    from transformer_lib.model import Transformer
    from transformer_lib.training import make_optimizer, update_step

    profile = candidate_profile("start")
    config = profile.model
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 20, (PRECISION_UPDATES + 1, 2, 64), generator=generator)
    batches = [
        collate(
            [
                (
                    torch.randint(
                        4, config.src_vocab_size, (int(s),), generator=generator
                    ).tolist(),
                    torch.randint(
                        4, config.tgt_vocab_size, (int(t),), generator=generator
                    ).tolist(),
                )
                for s, t in zip(*update, strict=True)
            ]
        )
        for update in lengths
    ]
    record = {"kind": "precision", "name": "start", "sentences_per_update": 64}
    for label, autocast in (
        ("float32", contextlib.nullcontext),
        ("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    ):
        torch.manual_seed(0)
        model = Transformer(config)
        optimizer, scheduler = make_optimizer(model, config.d_model, 400, 0.5)
        model.train()
        update_step(model, [batches[0]], optimizer, scheduler, profile.training, 0, autocast())
        started = time.perf_counter()
        for batch in batches[1:]:
            loss, tokens = update_step(
                model, [batch], optimizer, scheduler, profile.training, 0, autocast()
            )
        seconds = (time.perf_counter() - started) / PRECISION_UPDATES
        record[label] = {"s_per_update": round(seconds, 4), "last_loss": round(loss / tokens, 4)}
        print(label, record[label], flush=True)
    record["bf16_over_float32"] = round(
        record["bf16"]["s_per_update"] / record["float32"]["s_per_update"], 2
    )
    append(record)


def validation_bleu(run: Path) -> dict:
    """Cased BLEU of the greedy translation of the whole validation split by ``last.pt``."""
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.evaluation import evaluate_split, load_translator

    model, tokenizer, checkpoint = load_translator(run / "checkpoints" / "last.pt")
    search = SearchConfig(beam_size=1, batch_size=100)
    scores, _ = evaluate_split(model, tokenizer, "val", SRC, TGT, search=search)
    return {"step": int(checkpoint["step"]), "bleu": scores["bleu"], "chrf": scores["chrf"]}


def rung(args: argparse.Namespace) -> None:
    from transformer_lib.provenance import write_text_atomically

    speeds = seconds_per_update()
    done = {
        (r["name"], r["minutes"])
        for r in read_jsonl(RESULTS / "search.jsonl")
        if r["kind"] == "rung"
    }
    for name in selected(args):
        if name not in speeds:
            raise SystemExit(f"{name} is not calibrated: run `calibrate` first")
        if (name, args.minutes) in done:
            continue
        steps = round(args.minutes * 60 / speeds[name])
        out = args.work / name
        started = time.perf_counter()
        launch(name, out, steps)
        trained_s = time.perf_counter() - started
        metrics = read_jsonl(out / "metrics.jsonl")
        valid = [r for r in metrics if r["kind"] == "valid" and r["step"] == steps][-1]
        scored = validation_bleu(out)
        append(
            {
                "kind": "rung",
                "name": name,
                "minutes": args.minutes,
                "steps": steps,
                "valid_loss": round(valid["loss"], 4),
                "sample_bleu": round(valid["bleu"], 2),  # greedy, the first 500 sentences
                "valid_bleu": round(scored["bleu"], 2),  # greedy, all 1,014 sentences
                "valid_chrf": round(scored["chrf"], 2),
                "elapsed_s": round(valid["elapsed_s"], 1),
                "command_s": round(trained_s, 1),
            }
        )
        log = (out / "metrics.jsonl").read_text()
        write_text_atomically(RESULTS / "runs" / f"{name}.metrics.jsonl", log)
    write_manifest(args)


def write_manifest(args: argparse.Namespace) -> None:
    from transformer_lib.provenance import cpu_name, environment, write_json

    manifest = {
        **environment("cpu"),
        "cpu": cpu_name(),
        "processes": PROCESSES,
        "threads_per_process": 1,
        "candidates": {
            name: {"model": m, "training": t, "profile": p}
            for name, (m, t, p) in CANDIDATES.items()
        },
        "last_command": shlex.join(["python", "tools/laptop_search.py", *sys.argv[1:]]),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(RESULTS / "manifest.json", manifest)


def table(args: argparse.Namespace) -> None:
    speeds = seconds_per_update()
    rungs = [r for r in read_jsonl(RESULTS / "search.jsonl") if r["kind"] == "rung"]
    print(f"{'candidate':14} {'s/update':>8} {'min':>4} {'steps':>6} {'loss':>6} {'BLEU':>6}")
    for r in sorted(rungs, key=lambda r: (r["minutes"], -r["valid_bleu"])):
        print(
            f"{r['name']:14} {speeds[r['name']]:8.3f} {r['minutes']:4g} {r['steps']:6d} "
            f"{r['valid_loss']:6.3f} {r['valid_bleu']:6.2f}"
        )


def selected(args: argparse.Namespace) -> list[str]:
    names = args.only.split(",") if args.only else list(CANDIDATES)
    unknown = [name for name in names if name not in CANDIDATES]
    if unknown:
        raise SystemExit(f"unknown candidates {unknown}: choose from {list(CANDIDATES)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(prog="python tools/laptop_search.py", description=__doc__)
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "laptop-search")
    commands = parser.add_subparsers(dest="command", required=True)
    subcommands = (
        ("calibrate", calibrate),
        ("rung", rung),
        ("precision", precision),
        ("processes", processes),
        ("table", table),
    )
    for name, run in subcommands:
        command = commands.add_parser(name)
        command.add_argument("--only", help="comma-separated candidate names")
        if name == "rung":
            command.add_argument("--minutes", type=float, required=True)
        command.set_defaults(run=run)
    hidden = commands.add_parser("_worker")
    hidden.add_argument("name", choices=list(CANDIDATES))
    hidden.add_argument("--out", type=Path, required=True)
    hidden.add_argument("--steps", type=int, required=True)
    hidden.add_argument("--calibrate", action="store_true")
    hidden.add_argument("--processes", type=int, default=PROCESSES)
    hidden.set_defaults(run=worker)
    args = parser.parse_args()
    if args.command != "_worker":
        args.work = args.work.resolve()
    args.run(args)


if __name__ == "__main__":
    main()
