"""The Table 3 sweep in lanes (``tools/table3.py --lanes N``, book/sweep.md): variants trained at
once, each by a process of its own, give the very lines the sweep gives one after the other (on
the CPU, with the same number of threads, training is deterministic), and the merge keeps the
results folder whole: a rerun runs nothing, a lane left by a cut-off call joins the next one, a
lane of another sweep is refused, and a lane that dies is named with its log.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import require_multi30k

from transformer_lib.book.sweep import (
    HYPOTHESES_FOLDER,
    MANIFEST_FILE,
    RESULTS_FILE,
    merge_lane,
    read_results,
    run_sweep,
)
from transformer_lib.book.variations import SWEEP_PROFILES, SweepError
from transformer_lib.data import DATA_ENV

DATA = Path(
    os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[2] / "shared/data/multi30k"
)
NAMES = ["base", "RNN-lstm"]
STEPS = 2
# What a shared machine changes in a line: its clock readings, and the lanes it says it had.
TIMING = {"train_wall_s", "eval_wall_s", "tokens_per_s", "finished_utc", "lanes", "valid_curve"}


def table3(*options: str) -> int:
    import table3 as command

    return command.main(["--profile", "ci", "--data-dir", str(DATA), "--quiet", *options])


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The base and the LSTM for two updates each: alone, one after the other, in this process;
    then in two lanes. Every process trains with one thread."""
    require_multi30k()
    root = tmp_path_factory.mktemp("lanes")
    threads, variable = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # the lanes' processes read it
    try:
        run_sweep(
            SWEEP_PROFILES["ci"], root / "alone", root / "work", only=NAMES, max_steps=STEPS,
            data_dir=DATA,
        )  # fmt: skip
        code = table3(
            "--work", str(root / "work"), "--out", str(root / "lanes"), "--only", *NAMES,
            "--max-steps", str(STEPS), "--lanes", "2",
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
        if variable is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = variable
    assert code == 0
    return root


def without_timing(record: dict) -> dict:
    kept = {key: value for key, value in record.items() if key not in TIMING}
    kept["valid_curve"] = [(p["step"], p["ppl"]) for p in record["valid_curve"]]
    return kept


def test_a_line_made_in_a_lane_is_the_line_made_alone(swept):
    alone = {r["name"]: r for r in read_results(swept / "alone")}
    lanes = {r["name"]: r for r in read_results(swept / "lanes")}
    assert sorted(lanes) == sorted(alone) == sorted(NAMES)
    for name in NAMES:
        assert without_timing(lanes[name]) == without_timing(alone[name]), name
        assert lanes[name]["lanes"] == 2 and "lanes" not in alone[name]
        ours, theirs = (
            swept / folder / HYPOTHESES_FOLDER / f"{name}.txt" for folder in ("lanes", "alone")
        )
        assert ours.read_bytes() == theirs.read_bytes()


def test_the_manifest_names_the_lines_and_each_lanes_command(swept):
    manifest = json.loads((swept / "lanes" / MANIFEST_FILE).read_text())
    alone = json.loads((swept / "alone" / MANIFEST_FILE).read_text())
    assert manifest["variants"] == sorted(NAMES)
    for key in ("profile", "tokenizer_sha256", "train_pairs", "valid_sentences", "src", "tgt"):
        assert manifest[key] == alone[key], key
    [invocation] = manifest["invocations"]
    assert invocation["lanes"] == 2 and sorted(invocation["ran"]) == sorted(NAMES)
    assert "--lanes 2" in invocation["command"] and invocation["failed"] == {}
    commands = sorted(lane["command"] for lane in invocation["lane_invocations"])
    assert [command.split("--only ")[1].split()[0] for command in commands] == sorted(NAMES)
    assert not list((swept / "work" / "lanes").glob("*/"))  # every lane merged and removed


def test_a_rerun_in_lanes_runs_nothing(swept, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(swept / "lanes", out)
    before = (out / RESULTS_FILE).read_text()
    options = ["--work", str(swept / "work"), "--out", str(out), "--only", *NAMES]
    assert table3(*options, "--max-steps", str(STEPS), "--lanes", "2") == 0
    assert (out / RESULTS_FILE).read_text() == before
    last = json.loads((out / MANIFEST_FILE).read_text())["invocations"][-1]
    assert last["ran"] == [] and "lane_invocations" not in last


def test_a_lane_left_finished_by_a_cut_off_call_joins_the_next(swept, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    shutil.copytree(swept / "work", work, ignore=shutil.ignore_patterns("lanes", "runs"))
    shutil.copytree(swept / "alone", work / "lanes" / "base")  # finished, never merged
    options = ["--work", str(work), "--out", str(out), "--only", "base"]
    assert table3(*options, "--max-steps", str(STEPS), "--lanes", "2") == 0
    assert sorted(r["name"] for r in read_results(out)) == sorted(NAMES)
    [invocation] = json.loads((out / MANIFEST_FILE).read_text())["invocations"]
    assert sorted(invocation["ran"]) == sorted(NAMES)
    assert len(invocation["lane_invocations"]) == 1  # the left lane's: no lane ran again
    assert not (work / "lanes" / "base").exists()


def test_a_lane_of_another_sweep_is_refused(swept, tmp_path):
    lane, out = tmp_path / "lane", tmp_path / "out"
    shutil.copytree(swept / "alone", lane)
    shutil.copytree(swept / "lanes", out)
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    theirs = json.loads((lane / MANIFEST_FILE).read_text())
    theirs["tokenizer_sha256"] = "0" * 64  # as if made with another vocabulary
    (lane / MANIFEST_FILE).write_text(json.dumps(theirs))
    with pytest.raises(SweepError, match="other than"):
        merge_lane(out, lane, manifest)


def test_a_lane_that_dies_is_named_with_its_log(tmp_path, capsys):
    from sweep_lanes import Lane, finish_lane

    folder, log = tmp_path / "lanes" / "base", tmp_path / "lanes" / "base.log"
    folder.mkdir(parents=True)
    with log.open("w") as file:  # a process that dies before the sweep could write anything
        script = "import sys; print('killed while loading'); sys.exit(3)"
        process = subprocess.Popen([sys.executable, "-c", script], stdout=file)
    process.wait()
    manifest = {"invocations": [{"ran": [], "failed": {}}]}
    assert finish_lane(Lane("base", process, folder, log), tmp_path / "out", manifest) == []
    assert manifest["invocations"][-1]["failed"] == {"base": "its process ended with status 3"}
    printed = capsys.readouterr().out
    assert "base failed: its process ended with status 3" in printed
    assert "killed while loading" in printed and log.is_file()  # the log is kept to read


def test_a_device_pytorch_cannot_name_is_refused_before_any_work(tmp_path, capsys):
    options = ["--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--lanes", "2"]
    assert table3(*options, "--device", "nonsense") == 2
    assert "--device nonsense is not a device" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()
    assert table3(*options[:4], "--lanes", "0") == 2
    assert "--lanes must be at least 1" in capsys.readouterr().err


def test_the_calibration_times_the_lanes_beside_one_alone(swept, capsys):
    assert table3("--work", str(swept / "work"), "--calibrate", "2", "--lanes", "2") == 0
    printed = capsys.readouterr().out
    assert "2 lanes of the base at once: 2 updates each" in printed
    assert "in 2 lanes:" in printed
    assert not (swept / "work" / "calibration-lanes").exists()
