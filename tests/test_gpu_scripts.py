"""The GPU scripts in tools/gpu/: they parse, and they name the code's commit the one way the
library reads it (``transformer_lib.provenance.COMMIT_ENV``) where a copy has no .git."""

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import multi30k_slice

from transformer_lib.provenance import COMMIT_ENV

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "tools" / "gpu").glob("*.sh"))


def test_there_are_scripts():
    assert SCRIPTS, "tools/gpu/ holds no *.sh script"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# The scripts that write reports; environment.sh and wheels.sh only prepare the machine.
REPORTERS = [script for script in SCRIPTS if script.name not in {"environment.sh", "wheels.sh"}]


@pytest.mark.parametrize("script", REPORTERS, ids=lambda path: path.name)
def test_the_commit_is_named_through_the_librarys_variable(script):
    text = script.read_text(encoding="utf-8")
    assert COMMIT_ENV in text, f"{script.name} does not say how to pass {COMMIT_ENV}"
    # Any other spelling (GIT_COMMIT, COMMIT) would be ignored by git_commit(): the manifests
    # would then name no commit.
    others = {name for name in re.findall(r"\b[A-Z_]*COMMIT\b", text) if name != COMMIT_ENV}
    assert not others, f"{script.name} names the commit through {sorted(others)}"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_commit_named_by_the_variable_wins_over_a_stale_git(monkeypatch):
    from transformer_lib.provenance import git_commit

    monkeypatch.delenv(COMMIT_ENV, raising=False)
    seen = git_commit()
    if seen["git_source"] != "git":
        pytest.skip("this copy of the code is not a git checkout")
    # The variable naming git's own commit changes nothing.
    monkeypatch.setenv(COMMIT_ENV, seen["git_commit"])
    assert git_commit() == seen
    # Naming another: the files are that commit's, whatever an older .git beside them says.
    other = "f" * 40
    monkeypatch.setenv(COMMIT_ENV, other)
    named = git_commit()
    assert named["git_commit"] == other and named["git_source"] == "environment"
    said = {key.removeprefix("git_"): value for key, value in seen.items()}
    assert named["git_checkout"] == {
        "commit": said.pop("commit"),
        **{
            f"git_{key}": value
            for key, value in said.items()
            if key in ("dirty", "changed", "diff_sha256")
        },
    }


def _git(folder, *command) -> str:
    done = subprocess.run(["git", *command], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_dirty_tree_names_its_changed_files_and_the_hash_of_its_diff(tmp_path, monkeypatch):
    from transformer_lib.provenance import git_commit, source_digest

    monkeypatch.delenv(COMMIT_ENV, raising=False)
    (tmp_path / "transformer_lib").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "transformer_lib" / "model.py").write_text("width = 128\n")
    (tmp_path / "results" / "bleu.json").write_text("{}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    clean = git_commit(tmp_path)
    assert clean["git_dirty"] is False and "git_changed" not in clean
    assert clean["git_commit"] == _git(tmp_path, "rev-parse", "HEAD").strip()
    # What runs write under results/ changes neither the record nor the digest of the code.
    (tmp_path / "results" / "bleu.json").write_text('{"bleu": 1}\n')
    assert git_commit(tmp_path) == clean
    (tmp_path / "transformer_lib" / "model.py").write_text("width = 192\n")
    dirty = git_commit(tmp_path)
    diff = _git(tmp_path, "diff", "HEAD", "--binary", "--", ".", ":(exclude)results")
    assert dirty["git_dirty"] is True and dirty["git_changed"] == ["transformer_lib/model.py"]
    assert dirty["git_diff_sha256"] == hashlib.sha256(diff.encode()).hexdigest()
    assert dirty["source_sha256"] == source_digest(tmp_path) != clean["source_sha256"]
    # Without git (a copy of the files only), the digest still says which code ran.
    shutil.rmtree(tmp_path / ".git")
    copied = git_commit(tmp_path)
    assert copied["git_source"] == "environment" and copied["git_commit"] is None
    assert copied["source_sha256"] == dirty["source_sha256"]


# How the project is made is no business of a reader who runs a script on a GPU machine.
MAKING_OF = re.compile(
    r"\b(sessions?|issues?|lent|device time|device tool|run tool|device machine|carry|"
    r"files_at|timeout_s|no GPU has run)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_script_speaks_to_its_reader(script):
    lines = script.read_text(encoding="utf-8").splitlines()
    found = [f"{i}: {line.strip()}" for i, line in enumerate(lines, 1) if MAKING_OF.search(line)]
    assert not found, f"{script.name} speaks of how the project is made:\n" + "\n".join(found)


# ---------------------------------------------------------------- the smoke step, on a CPU

ROOT = Path(__file__).resolve().parent.parent


def load_real_run():
    spec = importlib.util.spec_from_file_location("real_run", ROOT / "tools" / "real_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("every", "max_steps"), [(None, 10), (1, 4), (3, 10), (5, 10), (7, 3), (10, 10)]
)
def test_the_projection_counts_the_events_the_training_loop_makes(every, max_steps):
    # The loop validates when a multiple of `every` is reached and after the last update
    # (training.train); None stands for "once an epoch", counted once.
    made = {step for step in range(1, max_steps + 1) if every and step % every == 0}
    assert load_real_run().occurrences(every, max_steps) == len(made | {max_steps})


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--time-updates", "1"], "at least 2"),
        (["--time-updates", "5", "--results", "somewhere"], "leave out --results"),
        (["--time-updates", "5", "--max-steps", "3"], "leave out --max-steps"),
        (["--time-updates", "5", "--time-limit", "-1"], "number of seconds"),
    ],
)
def test_a_timing_with_wrong_options_says_what_to_change(tmp_path, options, complaint):
    command = [sys.executable, str(ROOT / "tools" / "real_run.py"), "--profile", "ci"]
    command += ["--src", "de", "--tgt", "en", "--work", str(tmp_path / "work"), *options]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": "."}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert complaint in done.stderr
    assert not (tmp_path / "work").exists()


def dry_run(step: str, tmp_path: Path, **settings) -> tuple[subprocess.CompletedProcess, Path]:
    """Run real_run.sh's ``step`` with DRY_RUN=1 (on the CPU, at toy size) and environment
    ``settings``; it must succeed. Returns the finished process and its $OUT folder."""
    out, runs = tmp_path / "out", tmp_path / "runs"
    env = {**os.environ, **settings, "OUT": str(out), "RUNS": str(runs), "DRY_RUN": "1"}
    env["TRANSFORMER_LIB_DATA"] = str(multi30k_slice(tmp_path / "multi30k"))
    env["PYTHON"] = sys.executable
    done = subprocess.run(
        ["bash", "tools/gpu/real_run.sh", step], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_smoke_step_runs_on_a_cpu(tmp_path):
    """DRY_RUN=1 runs real_run.sh's first command at toy size: the pipeline (a stop, a resume,
    a report) and the timing with its projection, as a GPU machine would run them."""
    done, out = dry_run("smoke", tmp_path)
    assert (out / "smoke-report.tar.gz").stat().st_size > 0
    timing = json.loads((out / "timing-ci.json").read_text())
    assert timing["device"] == "cpu" and timing["updates"] == 2
    training = timing["seconds_per_update"] * timing["max_steps"]
    assert timing["projected_training_s"] > training > 0  # validations and checkpoints on top
    assert "projected training time of the ci profile" in done.stdout
    assert (timing["commands"] == 1) == timing["fits"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_search_step_runs_on_a_cpu(tmp_path):
    """DRY_RUN=1 runs real_run.sh's search at toy size: the candidate that SEARCH_ONLY names (one
    with a change to the model) trains in both directions (as processes of their own, side by
    side), is scored at its last checkpoint and lands in the table, the others are left
    untrained, and the results stay out of the repository's results/. Every candidate's profile
    is built, so a change that names no field of the configuration fails here too."""
    import full_search as search

    for name in search.CANDIDATES:
        search.candidate_profile("ci", name)  # the configurations check their fields
    searched = ["layers_3"]
    done, out = dry_run("search", tmp_path, SEARCH_ONLY=",".join(searched))
    for direction in search.DIRECTIONS:
        folder = out / "ci-search" / direction
        records = [json.loads(line) for line in (folder / "search.jsonl").read_text().splitlines()]
        assert sorted(r["name"] for r in records) == sorted(searched)
        for record in records:
            assert record["direction"] == direction
            assert record["end"] == 1 and record["averaged_steps"] == [1]
            assert record["valid_sentences"] == 3 and record["valid_ppl"] > 1
        manifest = json.loads((folder / "manifest.json").read_text())
        expected = {name: 1 if name in searched else 0 for name in search.CANDIDATES}
        assert manifest["trained_to"] == expected
        assert (manifest["src"], manifest["tgt"]) == tuple(direction.split("-"))
        assert done.stdout.count(f"{direction} ") >= len(searched)
    assert done.stdout.count("<- best") == 2 * len(searched)
    assert not (ROOT / "results" / "ci-search").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_fast_paths_step_runs_on_a_cpu(tmp_path):
    """DRY_RUN=1 runs perf.sh's fast_paths step at toy size on a CPU: both of its runs write
    their JSON, each fast path's candidate beside ours and nn.Transformer."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DRY_RUN": "1", "PYTHON": sys.executable}

    def perf(step: str) -> subprocess.CompletedProcess:
        command = ["bash", "tools/gpu/perf.sh", step]
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)

    done = perf("fast_paths")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = out / "results" / "perf-dry-run"
    for name, candidate in (
        ("packing", "ours, packed, torch.compile"),
        ("buckets", "ours, packed, buckets, fused Adam, torch.compile"),
    ):
        results = json.loads((folder / f"train_step_fast_{name}.json").read_text())["results"]
        assert {"ours", "nn.Transformer", "ours, fused Adam", candidate} <= set(
            results["candidates"]
        )
        assert results["candidates"][candidate]["packing"] == "masks"  # a CPU: no flex backward
    refused = perf("train_step")
    assert refused.returncode == 2 and "fast_paths step alone" in refused.stderr


def test_each_search_candidate_changes_what_its_name_says():
    import dataclasses

    from full_search import CANDIDATES, candidate_profile

    from transformer_lib.recipe import PROFILES

    base = PROFILES["full"]
    for name, (model_changes, training_changes) in CANDIDATES.items():
        profile = candidate_profile("full", name)
        assert profile.training.keep_checkpoints >= profile.training.max_steps  # every one kept
        kept = dataclasses.replace(
            profile.training, keep_checkpoints=base.training.keep_checkpoints
        )
        assert dataclasses.replace(base.training, **training_changes) == kept, name
        assert dataclasses.replace(base.model, **model_changes) == profile.model, name
        assert profile.vocab_size == base.vocab_size and profile.max_len == base.max_len
    assert CANDIDATES["profile"] == ({}, {}), "the yardstick is the profile itself"


@pytest.mark.skipif(
    not (ROOT / "results" / "multi30k-de-en" / "model.safetensors").is_file(),
    reason="no recorded full run",
)
def test_the_recorded_run_is_scored_like_the_candidates(tmp_path):
    """`full_search.py recorded` scores the shipped model of the recorded run at each alpha asked
    for, once: a second call adds nothing."""
    command = [sys.executable, "tools/full_search.py", "--results", str(tmp_path), "recorded"]
    command += ["--directions", "de-en", "--alphas", "0.6,1.2", "--limit", "3", "--device", "cpu"]
    for _ in range(2):
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
    lines = (tmp_path / "de-en" / "recorded.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["alpha"] for r in records] == [0.6, 1.2]
    folder = ROOT / "results" / "multi30k-de-en"
    manifest = json.loads((folder / "manifest.json").read_text())
    for record in records:
        assert record["end"] == manifest["training"]["steps"]
        assert record["model"]["sha256"] == manifest["shipped_model"]["sha256"]["model.safetensors"]
        assert record["valid_sentences"] == 3 and record["valid_ppl"] > 1
    assert records[0]["valid_ppl"] == records[1]["valid_ppl"]  # alpha changes the search only
    scored = json.loads((tmp_path / "de-en" / "recorded.manifest.json").read_text())
    assert scored["device"].startswith("CPU") and "recorded" in scored["command"]
