"""The Table 3 sweeps in results/ (chapter "Model variations"): every BLEU of every line, and of
each length group, is what sacreBLEU computes from the committed hypotheses and the references
read straight from the gzipped Multi30k files. Parametrized over the sweeps that exist; with none
there is nothing to check, and pytest reports the test as skipped.
"""

import gzip
import json
from pathlib import Path

import pytest
import sacrebleu
from helpers import require_multi30k

from transformer_lib.book.sweep import (
    BUCKETS_FILE,
    HYPOTHESES_FOLDER,
    MANIFEST_FILE,
    RESULTS_FILE,
    read_results,
)
from transformer_lib.data import multi30k_file

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = sorted(path.parent for path in (ROOT / "results").glob(f"table3*/{RESULTS_FILE}"))


def validation_references(src: str, tgt: str) -> list[str]:
    """The validation split's target sentences, read from the gzipped file itself."""
    require_multi30k()
    with gzip.open(multi30k_file("val", tgt), "rt", encoding="utf-8") as file:
        return file.read().splitlines()


def sweep_problems(folder: Path) -> list[str]:
    """Where a sweep's lines differ from sacreBLEU recomputed from their hypotheses files."""
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    references = validation_references(manifest["src"], manifest["tgt"])
    references = references[: manifest["valid_sentences"]]
    buckets = json.loads((folder / BUCKETS_FILE).read_text())
    problems = []
    if sorted(buckets["short"] + buckets["long"]) != list(range(len(references))):
        problems.append("the length groups are not a partition of the validation sentences")
    records = read_results(folder)
    if sorted(r["name"] for r in records) != sorted(manifest["variants"]):
        problems.append("the manifest does not list exactly the lines of the results")
    for record in records:
        name = record["name"]
        path = folder / HYPOTHESES_FOLDER / f"{name}.txt"
        if not path.is_file():
            problems.append(f"{name}: no hypotheses file")
            continue
        hypotheses = path.read_text(encoding="utf-8").split("\n")[:-1]  # one a line
        if len(hypotheses) != len(references):
            problems.append(f"{name}: {len(hypotheses)} hypotheses, {len(references)} references")
            continue
        bleu = sacrebleu.BLEU()
        score = bleu.corpus_score(hypotheses, [references]).score
        if abs(score - record["bleu"]) > 1e-9:
            problems.append(f"{name}: BLEU {record['bleu']} in the line, sacreBLEU {score}")
        if str(bleu.get_signature()) != record["bleu_signature"]:
            problems.append(f"{name}: signature {record['bleu_signature']}")
        for group, stored in record["bleu_by_length"].items():
            chosen = buckets[group]
            again = sacrebleu.corpus_bleu(
                [hypotheses[i] for i in chosen], [[references[i] for i in chosen]]
            ).score
            if abs(again - stored["bleu"]) > 1e-9 or stored["sentences"] != len(chosen):
                problems.append(
                    f"{name}, {group} sentences: BLEU {stored['bleu']}, sacreBLEU {again}"
                )
        if record["config"]["evaluation"]["split"] != "val":
            problems.append(f"{name}: not scored on the validation split")
    problems += replica_problems(records)
    return problems


def replica_problems(records: list[dict]) -> list[str]:
    """Where a line that repeats a variant with another seed differs from it in anything else,
    or repeats a variant the folder does not hold, or a seed the variant already has."""
    by_name = {r["name"]: r for r in records}
    problems, seeds = [], {}
    for record in records:
        variant = record.get("replica_of") or record["name"]
        seed = record["config"]["training"]["seed"]
        if seed in seeds.setdefault(variant, set()):
            problems.append(f"{record['name']}: a second run of {variant} with seed {seed}")
        seeds[variant].add(seed)
        if record.get("replica_of") is None:
            continue
        if variant not in by_name:
            problems.append(f"{record['name']}: repeats {variant}, which has no line")
            continue
        ours, theirs = (json.loads(json.dumps(r["config"])) for r in (record, by_name[variant]))
        for config in (ours, theirs):
            config["training"].pop("seed")
        if ours != theirs:
            problems.append(f"{record['name']}: differs from {variant} in more than its seed")
    return problems


@pytest.mark.parametrize("folder", SWEEPS, ids=[folder.name for folder in SWEEPS])
def test_recorded_sweeps_agree_with_sacrebleu(folder):
    assert sweep_problems(folder) == []
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["environment"]["git_commit"], "a recorded sweep names the commit that made it"
    assert all(invocation["command"] for invocation in manifest["invocations"])


def test_the_checker_catches_a_changed_hypothesis(tmp_path):
    """A sweep of two made-up lines, scored here with sacreBLEU, passes; one changed word fails
    it, naming the line."""
    references = validation_references("en", "de")[:6]
    hypotheses = {"base": references[:3] + ["Ein Hund."] * 3, "A-h1": ["Ein Mann."] * 6}
    buckets = {"short_len": 12, "short": [0, 2, 4], "long": [1, 3, 5]}
    (tmp_path / HYPOTHESES_FOLDER).mkdir()
    lines = []
    for name, hyps in hypotheses.items():
        (tmp_path / HYPOTHESES_FOLDER / f"{name}.txt").write_text("".join(h + "\n" for h in hyps))
        bleu = sacrebleu.BLEU()
        by_length = {}
        for group in ("short", "long"):
            chosen = buckets[group]
            score = sacrebleu.corpus_bleu(
                [hyps[i] for i in chosen], [[references[i] for i in chosen]]
            )
            by_length[group] = {"bleu": score.score, "sentences": 3}
        record = {"name": name, "row": "base" if name == "base" else "A", "parameters": 1}
        record |= {"valid_ppl": 1.0, "config": {"evaluation": {"split": "val"}, "training": {}}}
        record["config"]["training"]["seed"] = 0 if name == "base" else 1
        record |= {"bleu": bleu.corpus_score(hyps, [references]).score, "bleu_by_length": by_length}
        record["bleu_signature"] = str(bleu.get_signature())
        lines.append(json.dumps(record))
    (tmp_path / RESULTS_FILE).write_text("\n".join(lines) + "\n")
    (tmp_path / BUCKETS_FILE).write_text(json.dumps(buckets))
    manifest = {"src": "en", "tgt": "de", "valid_sentences": 6, "variants": ["A-h1", "base"]}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert sweep_problems(tmp_path) == []
    changed = ["Ein Hund.", *hypotheses["base"][1:]]  # the first line was the reference
    (tmp_path / HYPOTHESES_FOLDER / "base.txt").write_text("".join(h + "\n" for h in changed))
    problems = sweep_problems(tmp_path)
    assert problems and all(p.startswith("base") for p in problems)


def test_the_checker_catches_a_replica_that_is_not_one():
    """A rerun must be its variant with another seed: another model, another variant's name or
    a seed used twice is reported."""

    def run(name, seed, replica_of=None, d_model=128):
        config = {"model": {"d_model": d_model}, "training": {"seed": seed, "max_steps": 900}}
        return {"name": name, "replica_of": replica_of, "config": config}

    good = [run("A-h1", 0), run("A-h1-seed1", 1, "A-h1"), run("A-h1-seed2", 2, "A-h1")]
    assert replica_problems(good) == []
    assert (
        "more than its seed" in replica_problems([*good[:2], run("A-h1-seed2", 2, "A-h1", 64)])[0]
    )
    assert "has no line" in replica_problems([run("B-seed1", 1, "B")])[0]
    assert "seed 1" in replica_problems([*good, run("A-h1-again", 1, "A-h1")])[0]


# --- a committed sweep stays recognised by the code that reads and resumes it -----------------
# The profile each committed folder was made with: its folder name, as tools/table3.py writes it.
FOLDER_PROFILE = {"table3": "full", "table3-cpu": "cpu"}


@pytest.mark.parametrize("folder", SWEEPS, ids=[folder.name for folder in SWEEPS])
def test_a_committed_sweep_is_of_its_profile_in_the_code(folder):
    """Fails when SWEEP_PROFILES drifts from what a committed folder was made with: the chapter
    would lose the folder's paper rows and verdicts, and tools/table3.py would not resume it."""
    from transformer_lib.book.verdicts import profile_name

    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert profile_name(manifest) == FOLDER_PROFILE[folder.name], (
        f"{folder.name}/manifest.json is not of SWEEP_PROFILES[{FOLDER_PROFILE[folder.name]!r}]"
    )


def test_the_identity_takes_a_later_setting_at_its_default_and_sees_a_changed_one():
    from transformer_lib.book.variations import SWEEP_PROFILES, sweep_identity
    from transformer_lib.provenance import jsonable

    written = jsonable(SWEEP_PROFILES["cpu"])
    del written["training"]["cooldown_steps"]  # a setting the code gained after the folder
    del written["model"]["feed_forward"]
    assert sweep_identity(written) == sweep_identity(SWEEP_PROFILES["cpu"])
    written["training"]["lr_scale"] = 1.0
    assert sweep_identity(written) != sweep_identity(SWEEP_PROFILES["cpu"])


@pytest.mark.slow
def test_the_sweep_tool_resumes_the_committed_cpu_sweep(tmp_path):
    """tools/table3.py --profile cpu on a copy of results/table3-cpu: its own BPE vocabulary is
    trained again (the same), the folder is accepted as this sweep's, and with no time to start
    a variant nothing is trained and no line changes."""
    import shutil
    import subprocess
    import sys

    folder = ROOT / "results" / "table3-cpu"
    out, work = tmp_path / "out", tmp_path / "work"
    shutil.copytree(folder, out)
    command = [sys.executable, str(ROOT / "tools" / "table3.py"), "--profile", "cpu"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(work), "--budget-s", "1", "--quiet"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "TRANSFORMER_LIB_DATA": str(require_multi30k())},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / RESULTS_FILE).read_bytes() == (folder / RESULTS_FILE).read_bytes()
