"""Several variants of a Table 3 sweep at once, each in a process of its own (a lane), for a GPU
that one small model leaves mostly idle: ``python tools/table3.py --lanes N`` (book/sweep.md).

Each lane is ``tools/table3.py --only NAME`` into a folder of its own under ``WORK/lanes/``; as a
lane ends, its line and translations move into the results (``merge_lane``) and the next variant
starts, in the sweep's order, while the budget allows it. A call cut off by its time limit leaves
its unfinished variants' checkpoints in the work folder, as the sweep does alone, and a lane that
finished but was not merged yet is merged by the next call.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

TABLE3 = Path(__file__).resolve().parent / "table3.py"
LANES_FOLDER = "lanes"  # in the work folder: one sweep folder, and one log, per variant in flight
NOTE_FILE = "note.json"  # in a lane: what merge_lane adds to its line (the number of lanes)
POLL_S = 1.0  # how often the running lanes are looked at


@dataclass
class Lane:
    """One variant in flight: its process, its folder and when it started."""

    name: str
    process: subprocess.Popen
    folder: Path
    log: Path
    started: float = field(default_factory=time.perf_counter)


def lane_command(
    args, name: str, folder: Path, work: Path, max_steps: int | None = None
) -> list[str]:
    """The command of one lane: the sweep of ``name`` alone into ``folder``, with this call's
    options (``max_steps``, when given, in place of its ``--max-steps``)."""
    command = [sys.executable, str(TABLE3), "--profile", args.profile, "--only", name]
    command += ["--work", str(work), "--out", str(folder), "--src", args.src, "--tgt", args.tgt]
    if (steps := max_steps or args.max_steps) is not None:
        command += ["--max-steps", str(steps)]
    if args.data_dir is not None:
        command += ["--data-dir", str(args.data_dir)]
    if args.device is not None:
        command += ["--device", args.device]
    return command + ["--quiet"]


def lane_environment(lanes: int) -> dict:
    """The environment of a lane: the machine's cores shared among the lanes, unless the caller
    chose a number of threads (OMP_NUM_THREADS) already."""
    threads = str(max(1, (os.cpu_count() or 1) // lanes))
    return os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}


def spawn(command: list[str], log: Path, lanes: int) -> subprocess.Popen:
    """Start one lane's process, its output (both streams) written to ``log``."""
    with log.open("w") as file:  # the child keeps its own handle
        return subprocess.Popen(
            command, stdout=file, stderr=subprocess.STDOUT, env=lane_environment(lanes)
        )


def start_lane(args, name: str, work: Path) -> Lane:
    """Start the lane of ``name`` in a fresh folder, its output in a log beside it."""
    root = work / LANES_FOLDER
    folder, log = root / name, root / f"{name}.log"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / NOTE_FILE).write_text(json.dumps({"lanes": args.lanes}) + "\n")
    process = spawn(lane_command(args, name, folder, work), log, args.lanes)
    return Lane(name, process, folder, log)


def merge_folder(out: Path, folder: Path, manifest: dict) -> list[dict]:
    """Merge a lane's folder into ``out`` (its lines, if it finished any) and remove it."""
    from transformer_lib.book.sweep import MANIFEST_FILE, merge_lane

    written = []
    if (folder / MANIFEST_FILE).is_file():
        note_file = folder / NOTE_FILE
        note = json.loads(note_file.read_text()) if note_file.is_file() else None
        written = merge_lane(out, folder, manifest, note)
    shutil.rmtree(folder, ignore_errors=True)
    return written


def finish_lane(lane: Lane, out: Path, manifest: dict) -> list[dict]:
    """Merge an ended lane and say what it did. Returns the lines it wrote, each with the
    seconds it took in its lane (start-up, training and scoring) under "lane_s"."""
    written = merge_folder(out, lane.folder, manifest)
    seconds = time.perf_counter() - lane.started
    failed = manifest["invocations"][-1]["failed"]
    if not written and lane.name not in failed:  # it ended before run_sweep could record why
        failed[lane.name] = f"its process ended with status {lane.process.returncode}"
    if not written:
        tail = lane.log.read_text(errors="replace").splitlines()[-20:]
        print(f"{lane.name} failed: {failed[lane.name][:300]}; {lane.log} ends:", *tail, sep="\n")
        return []
    lane.log.unlink(missing_ok=True)
    for record in written:
        print(
            f"{record['name']}: BLEU {record['bleu']:.2f}, validation perplexity "
            f"{record['valid_ppl']:.2f}, {seconds:.0f} s in its lane",
            flush=True,
        )
    return [record | {"lane_s": seconds} for record in written]


def out_manifest(plan, command: str, lanes: int) -> dict:
    """The results' manifest with this call's invocation last (the lanes fill in the rest)."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    invocation = {"started_utc": started, "command": command, "lanes": lanes, "ran": []}
    invocation |= {"failed": {}, "stopped": None}
    manifest = dict(plan.manifest)
    manifest["invocations"] = manifest.get("invocations", []) + [invocation]
    manifest["variants"] = sorted(plan.done)
    return manifest


def sweep_in_lanes(args, profile, out: Path, work: Path, command: str) -> tuple[list, dict]:
    """Run the variants that ``out`` lacks, ``args.lanes`` at a time; start none that the
    slowest lane so far says would end after ``args.budget_s``. Returns the lines written and
    the variants that failed, each with why."""
    from transformer_lib.batching import encode_pairs
    from transformer_lib.book.sweep import MANIFEST_FILE, plan_sweep, planned_flops
    from transformer_lib.provenance import write_text_atomically

    started = time.perf_counter()
    plan = plan_sweep(
        profile, out, work, args.src, args.tgt, args.only, args.max_steps, args.data_dir
    )
    manifest = out_manifest(plan, command, args.lanes)
    written = []
    for folder in sorted(p for p in (work / LANES_FOLDER).glob("*") if p.is_dir()):
        written += merge_folder(out, folder, manifest)  # finished by a call cut off before this
    queue = [v for v in plan.todo if v.name not in {r["name"] for r in written}]
    # The sentences each variant will train on, for the cost estimate that only a budget needs.
    budgeted = queue and args.budget_s is not None
    pairs = encode_pairs(plan.tokenizer, plan.train, profile.max_len) if budgeted else []
    running, planned, seconds_per_flop = [], {}, 0.0
    invocation = manifest["invocations"][-1]
    while queue or running:
        while queue and len(running) < args.lanes:
            estimate = seconds_per_flop * planned_flops(queue[0], pairs, planned) if pairs else 0
            if over_budget(args.budget_s, time.perf_counter() - started + estimate):
                invocation["stopped"] = (
                    f"budget of {args.budget_s:.0f} s: {queue[0].name} would not finish"
                )
                print(f"stopping before {queue[0].name}: {invocation['stopped']}", flush=True)
                queue.clear()
                break
            running.append(start_lane(args, queue.pop(0).name, work))
        time.sleep(POLL_S)
        for lane in [lane for lane in running if lane.process.poll() is not None]:
            running.remove(lane)
            for record in finish_lane(lane, out, manifest):
                seconds_per_flop = max(
                    seconds_per_flop, record["lane_s"] / record["estimated_flops"]
                )
                written.append(record)
    invocation["wall_s"] = round(time.perf_counter() - started, 3)
    if "profile" in manifest:  # a folder that never received a line has no manifest to write
        write_text_atomically(out / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
    return written, invocation["failed"]


def over_budget(budget_s: float | None, end_s: float) -> bool:
    """Whether a variant that would end ``end_s`` seconds into the call overruns the budget."""
    return budget_s is not None and end_s > budget_s


def calibrate_lanes(args, work: Path, tokenizer: Path, alone: dict) -> float | None:
    """Train the base for ``args.calibrate`` updates in ``args.lanes`` lanes at once, each in a
    work folder of its own with a copy of the sweep's ``tokenizer`` file, and compare with
    ``alone`` (its line, trained by itself just before): returns how many lanes' work the card
    did in the time of one alone (None if a lane failed)."""
    from transformer_lib.book.sweep import read_results

    root = work / "calibration-lanes"
    shutil.rmtree(root, ignore_errors=True)
    processes = []
    for lane in range(args.lanes):
        folder = root / str(lane)
        (folder / "out").mkdir(parents=True)
        shutil.copy(tokenizer, folder / tokenizer.name)
        command = lane_command(args, "base", folder / "out", folder, args.calibrate)
        processes.append(spawn(command, folder / "log.txt", args.lanes))
    for process in processes:
        process.wait()
    walls = [
        r["train_wall_s"]
        for lane in range(args.lanes)
        for r in read_results(root / str(lane) / "out")
    ]
    if len(walls) < args.lanes:
        print(f"error: a lane of the calibration failed: see the logs in {root}", file=sys.stderr)
        return None
    shutil.rmtree(root, ignore_errors=True)
    gain = sum(alone["train_wall_s"] / wall for wall in walls)
    print(
        f"{args.lanes} lanes of the base at once: {args.calibrate} updates each in "
        f"{min(walls):.1f}-{max(walls):.1f} s of training (alone {alone['train_wall_s']:.1f} s): "
        f"the device trains {gain:.2f} times as fast as with one"
    )
    return gain
