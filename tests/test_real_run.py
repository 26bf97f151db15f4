"""The real run (the chapter "The real run"): a clean stop at a time limit that resumes exactly, the
script end to end at the `ci` profile (stop, resume, report), and the check that every report's
bleu.json is what sacreBLEU computes from its hypotheses and the references."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import built_once
from toy_seq2seq import ToyModel, toy_batches

from transformer_lib import training
from transformer_lib.book.report import REPORT_FILES, TEST_SPLITS, ReportError, read_report
from transformer_lib.checkpoints import load_checkpoint
from transformer_lib.data import multi30k_file
from transformer_lib.recipe import PROFILES
from transformer_lib.training import TrainingConfig

ROOT = Path(__file__).resolve().parent.parent
RECORDED = sorted((ROOT / "results").glob("multi30k-*"))
# The profiles trained again with other seeds: tools/laptop_seeds.sh, and on a GPU (results/README.md)
SEEDS = sorted((ROOT / "results").glob("*-seeds/*-seed_*"))
REPORT_JSON = ("config", "manifest", "bleu")

# ---------------------------------------------------------------- training stops at a time limit


def toy_run(folder: Path, time_limit: float | None, resume: bool) -> tuple[ToyModel, dict]:
    config = TrainingConfig(
        max_steps=12, warmup_steps=4, log_every=3, checkpoint_every=5, keep_checkpoints=5
    )
    torch.manual_seed(0)
    model = ToyModel()
    summary = training.train(
        model,
        toy_batches,
        config,
        folder,
        options=training.RunOptions(
            resume=resume, time_limit=time_limit, device="cpu", progress=False
        ),
    )
    return model, summary


def test_a_time_limit_stops_after_each_update_and_resuming_is_exact(tmp_path):
    straight, summary = toy_run(tmp_path / "straight", None, resume=False)
    assert summary["finished"] and summary["step"] == 12
    # A limit of 0 s stops after every update: 12 commands of one update each.
    steps = []
    for call in range(12):
        model, summary = toy_run(tmp_path / "stopped", 0.0, resume=call > 0)
        steps.append(summary["step"])
        assert summary["finished"] == (call == 11)
    assert steps == list(range(1, 13))
    for (name, a), (_, b) in zip(
        straight.state_dict().items(), model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    # The stops wrote last.pt only: the step files that averaging reads are the regular ones.
    names = sorted(p.name for p in (tmp_path / "stopped/checkpoints").iterdir())
    assert names == ["last.pt", "step-10.pt", "step-12.pt", "step-5.pt"]
    assert load_checkpoint(tmp_path / "stopped/checkpoints/last.pt")["step"] == 12


# ---------------------------------------------------------------- the script, end to end (ci)


def script(*options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "real_run.py"), *options],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def tiny_options(tmp: Path, *extra: str) -> list[str]:
    return [
        "--profile", "ci", "--src", "de", "--tgt", "en",
        "--work", str(tmp / "work"), "--results", str(tmp / "report"),
        "--max-steps", "3", "--limit", "4", "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory) -> Path:
    """A report written by the script for a `ci` run of 3 updates, made in two commands."""
    return built_once(tmp_path_factory, "real-run", write_tiny_report) / "report"


def write_tiny_report(tmp: Path) -> None:
    first = script(*tiny_options(tmp, "--time-limit", "0"))
    assert first.returncode == 0, first.stderr
    assert "run the same command again" in first.stdout
    assert not (tmp / "report").exists()  # no report before training is complete
    assert load_checkpoint(tmp / "work/checkpoints/last.pt")["step"] == 1
    second = script(*tiny_options(tmp))
    assert second.returncode == 0, second.stderr
    assert "report written" in second.stdout


@pytest.mark.slow
def test_the_script_writes_every_artifact(tiny_report):
    report = read_report(tiny_report)  # raises when a file is missing or short
    names = {p.name for p in tiny_report.iterdir()}
    assert set(REPORT_FILES) <= names
    assert {f"hyp.{split}.en.txt" for split in TEST_SPLITS} <= names
    assert not any(name.endswith(".pt") for name in names)  # weights stay in the work folder
    bleu = report["bleu"]
    assert list(bleu["splits"]) == list(TEST_SPLITS)
    assert (bleu["beam_size"], bleu["alpha"], bleu["limit"]) == (4, 0.6, 4)
    assert bleu["averaged_steps"] == [3]  # the time-limit stop at 1 wrote no step file
    for entry in bleu["splits"].values():
        assert entry["sentences"] == 4
        assert "tok:13a" in entry["bleu_signature"] and "case:mixed" in entry["bleu_signature"]
    assert "case:lc" in bleu["splits"]["test_2016_flickr"]["lowercase"]["bleu_signature"]
    assert report["config"]["run"] == {
        "data": "multi30k",
        "src": "de",
        "tgt": "en",
        "profile": "ci",
    }
    assert report["metrics"][-1]["step"] == 3
    manifest = report["manifest"]
    assert len(manifest["commands"]) == 2 and all("real_run.py" in c for c in manifest["commands"])
    assert "--resume" in manifest["train_commands"][1]
    assert manifest["training"]["steps"] == 3 and manifest["training"]["target_tokens_per_s"] > 0
    assert manifest["versions"]["sacrebleu"] == sacrebleu.__version__
    assert manifest["versions"]["torch"] == torch.__version__
    assert manifest["device"].startswith("CPU") and manifest["wall_s_all_commands"] > 0
    assert len(manifest["git_commit"] or "") == 40 or manifest["git_source"] == "environment"
    sources = [
        line.split("source: ", 1)[1]
        for line in report["samples"].splitlines()
        if "source: " in line
    ]
    assert sources == [source for source, _ in references("test_2016_flickr", "de", "en")[:4]]


@pytest.mark.slow
def test_attention_labels_fit_the_model_that_wrote_them(tiny_report):
    """The stored weights equal those the averaged model's decoder hands back, with the
    decoder fed <s> + translation; the labels spell the source and the translation."""
    from transformer_lib.evaluation import load_translator
    from transformer_lib.tokenizer import BOS_ID, EOS_ID

    attention = read_report(tiny_report)["attention"]
    assert len(attention["sentences"]) == 3
    model, tokenizer, _ = load_translator(tiny_report.parent / "work/average.pt")
    for sentence in attention["sentences"]:
        src = tokenizer.encode(sentence["source"]) + [EOS_ID]
        out = tokenizer.encode(sentence["translation"]) + [EOS_ID]
        with torch.no_grad():
            memory, weights = model.encode(torch.tensor([src])), []
            model.decode(torch.tensor([[BOS_ID] + out[:-1]]), memory, None, weights=weights)
        cross = torch.stack([found[0] for found in weights[1::2]])  # each layer's second
        stored = torch.tensor(sentence["weights"]["cross"])  # (N, h, T, S)
        assert stored.shape == cross.shape == (2, 4, len(out), len(src))
        assert torch.allclose(stored, cross, atol=6e-4)
        assert "".join(sentence["source_tokens"][:-1]) == sentence["source"].replace(" ", "")
        assert sentence["source_tokens"][-1] == "</s>"
        predicted = sentence["predicted_tokens"]
        assert len(predicted) == len(out) and predicted[-1] == "</s>"
        # A byte-level piece that is only part of a character (an untrained model writes such
        # pieces in any order) has no text of its own: its label is U+FFFD and cannot spell.
        if not any("\ufffd" in label for label in predicted):
            assert "".join(predicted[:-1]) == sentence["translation"].replace(" ", "")
        assert sentence["decoder_input_tokens"] == ["<s>"] + sentence["predicted_tokens"][:-1]
        decoder = torch.tensor(sentence["weights"]["decoder"])  # (N, h, T, T), causal
        assert decoder.triu(diagonal=1).abs().max() == 0
        # Each weight is rounded to 3 decimals: a row of T of them sums to 1 within T * 0.0005.
        assert torch.allclose(decoder.sum(-1), torch.ones(()), atol=5e-4 * len(out))


def own_copy(tiny_report: Path, tmp_path: Path) -> Path:
    """A copy of the tiny report's folder (work and report) for a test that runs the script again:
    the module's report stays as the script wrote it, whatever order the tests run in."""
    tmp = tmp_path / "real-run"
    shutil.copytree(tiny_report.parent, tmp)
    return tmp


@pytest.mark.slow
def test_running_again_after_the_report_rewrites_it_without_training(tiny_report, tmp_path):
    tmp = own_copy(tiny_report, tmp_path)
    again = script(*tiny_options(tmp))
    assert again.returncode == 0, again.stderr
    assert "trained to step" not in again.stdout  # nothing left to train
    commands = read_report(tmp / "report")["manifest"]["commands"]
    assert len(commands) == 3 and commands[-1].count("--time-limit") == 0
    assert len(read_report(tiny_report)["manifest"]["commands"]) == 2  # the module's, untouched


@pytest.mark.slow
def test_search_options_reach_the_report(tiny_report, tmp_path):
    """--beam, --alpha and --extra-length travel as one SearchConfig into the report (the limit
    itself is tested in test_decoding.py)."""
    tmp = own_copy(tiny_report, tmp_path)
    options = tiny_options(tmp, "--beam", "1", "--alpha", "0", "--extra-length", "2")
    options[options.index("--results") + 1] = str(tmp / "greedy")
    done = script(*options)
    assert done.returncode == 0, done.stderr
    bleu = read_report(tmp / "greedy")["bleu"]
    assert (bleu["beam_size"], bleu["alpha"], bleu["max_length"]) == (1, 0.0, "input + 2")
    assert all(entry["sentences"] == 4 for entry in bleu["splits"].values())


@pytest.mark.parametrize(
    "options, message",
    [
        (["--results", "results/multi30k-de-en"], "reserved for complete runs"),
        (  # another seed's run of a recorded profile belongs beside the recorded one, not in it
            ["--results", "results/multi30k-de-en-laptop", "--profile", "laptop", "--seed", "1"],
            "reserved for complete runs",
        ),
        (
            ["--results", "results/multi30k-de-en", "--profile", "laptop", "--beam", "2"],
            "evaluated as the recipe does",
        ),
        (  # a length penalty other than the one the profile's runs are evaluated with
            ["--results", "results/multi30k-de-en", "--profile", "laptop", "--alpha", "0.01"],
            "evaluated as the recipe does",
        ),
        (["--beam", "0"], "beam_size must be at least 1"),
        (["--tgt", "de"], "both 'de'"),
        (["--data-dir", "/no/such/folder"], "is not a folder"),
        (["--max-steps", "0"], "at least 1"),
        (["--time-limit", "-1"], "number of seconds"),
    ],
)
def test_usage_errors_are_one_line_and_status_2(tmp_path, options, message):
    base = ["--profile", "ci", "--src", "de", "--tgt", "en", "--work", str(tmp_path / "w")]
    base += ["--results", str(tmp_path / "r")]
    result = script(*base, *options)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()  # refused before anything was written


# ---------------------------------------------------------------- a report read back


def smallest_report(folder: Path) -> Path:
    """The smallest folder read_report accepts: every file of REPORT_FILES, and one split of two
    translations."""
    folder.mkdir()
    for name in REPORT_FILES:
        (folder / name).write_text("{}\n")
    (folder / "metrics.jsonl").write_text('{"kind": "train"}\n')
    (folder / "samples.md").write_text("# Sample translations\n")
    entry = {"hypotheses": "hyp.test_2016_flickr.en.txt", "sentences": 2}
    (folder / "bleu.json").write_text(json.dumps({"splits": {"test_2016_flickr": entry}}))
    (folder / entry["hypotheses"]).write_text("A dog runs.\nTwo cats sleep.\n")
    return folder


def test_an_incomplete_report_is_refused_naming_what_is_missing(tmp_path):
    folder = smallest_report(tmp_path / "report")
    lines = read_report(folder)["hypotheses"]["test_2016_flickr"]
    assert lines == ["A dog runs.", "Two cats sleep."]
    hypotheses = folder / "hyp.test_2016_flickr.en.txt"
    hypotheses.write_text("A dog runs.\n")  # cut short: fewer lines than bleu.json scored
    with pytest.raises(ReportError, match="has 1 lines and bleu.json scored 2"):
        read_report(folder)
    hypotheses.unlink()
    with pytest.raises(ReportError, match=r"hyp\.test_2016_flickr\.en\.txt, which is missing"):
        read_report(folder)
    (folder / "samples.md").unlink()
    with pytest.raises(ReportError, match=r"is not a complete report: samples\.md missing"):
        read_report(folder)


# ---------------------------------------------------------------- bleu.json against sacreBLEU


def references(split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    """The test pairs read straight from the gzipped files (the library only finds them)."""

    def lines(language: str) -> list[str]:
        with gzip.open(multi30k_file(split, language), "rt", encoding="utf-8") as file:
            return file.read().splitlines()

    return list(zip(lines(src), lines(tgt), strict=True))


def bleu_problems(folder: Path, name: str = "bleu.json") -> list[str]:
    """Where ``folder/name`` differs from sacreBLEU recomputed from its hypotheses: the files its
    splits name, beside it, with the same prefix as its own name (``width_128-de-en.``)."""
    bleu, prefix = json.loads((folder / name).read_text()), name.removesuffix("bleu.json")
    problems = []
    for split, entry in bleu["splits"].items():
        hypotheses = (folder / f"{prefix}{entry['hypotheses']}").read_text().splitlines()
        refs = [tgt for _, tgt in references(split, bleu["src"], bleu["tgt"])]
        if bleu.get("limit") is None and len(hypotheses) != len(refs):
            problems.append(f"{split}: {len(hypotheses)} hypotheses for {len(refs)} references")
        refs = refs[: len(hypotheses)]
        metrics = {"bleu": sacrebleu.BLEU(), "chrf": sacrebleu.CHRF()}
        stored = {"bleu": entry, "chrf": entry}
        if "lowercase" in entry:
            metrics["lowercase"] = sacrebleu.BLEU(lowercase=True)
            stored["lowercase"] = entry["lowercase"]
        for key, metric in metrics.items():
            score = metric.corpus_score(hypotheses, [refs]).score
            field = "chrf" if key == "chrf" else "bleu"
            if abs(score - stored[key][field]) > 1e-9:
                problems.append(f"{split} {key}: bleu.json {stored[key][field]}, sacreBLEU {score}")
            if str(metric.get_signature()) != stored[key][f"{field}_signature"]:
                problems.append(f"{split} {key}: signature {stored[key][f'{field}_signature']}")
    if bleu["src"] == "de" and bleu["tgt"] == "en" and "test_2016_flickr" not in bleu["splits"]:
        problems.append("test_2016_flickr is missing")
    return problems


# Every test score under results/, but the translator page's (tests/test_translator_scores.py) and those
# written with their translations as one tab-separated file (at-paper-alpha, tested below).
SCORES = sorted(
    p
    for p in (ROOT / "results").rglob("*bleu.json")
    if p.parent.name not in ("translator", "at-paper-alpha")
)


@pytest.mark.parametrize("path", SCORES, ids=[str(p.relative_to(ROOT / "results")) for p in SCORES])
def test_every_test_score_is_recomputed_from_its_committed_translations(path):
    assert bleu_problems(path.parent, path.name) == []


@pytest.mark.slow
def test_the_checker_accepts_the_tiny_report_and_catches_a_changed_one(tiny_report, tmp_path):
    assert bleu_problems(tiny_report) == []
    changed = tmp_path / "changed"
    shutil.copytree(tiny_report, changed)
    path = changed / "hyp.test_2017_mscoco.en.txt"
    lines = path.read_text().splitlines()
    lines[0] = references("test_2017_mscoco", "de", "en")[0][1]  # a perfect first translation
    path.write_text("\n".join(lines) + "\n")
    problems = bleu_problems(changed)
    assert problems and all(p.startswith("test_2017_mscoco") for p in problems)


@pytest.mark.parametrize("folder", RECORDED, ids=[folder.name for folder in RECORDED])
def test_recorded_runs_agree_with_sacrebleu(folder):
    report = read_report(folder)  # complete, hypotheses as long as scored
    assert bleu_problems(folder) == []
    assert report["bleu"]["limit"] is None and list(report["bleu"]["splits"]) == list(TEST_SPLITS)
    # results/multi30k-<src>-<tgt> holds the full profile's run, ...-laptop the laptop profile's.
    profile = "laptop" if folder.name.endswith("-laptop") else "full"
    assert report["config"]["run"]["profile"] == profile
    assert report["manifest"]["profile"] == profile
    assert report["manifest"]["training"]["steps"] == PROFILES[profile].training.max_steps
    # evaluated as the recipe evaluates: §6.1's beam, the profile's length penalty
    assert (report["bleu"]["beam_size"], report["bleu"]["alpha"]) == (4, PROFILES[profile].alpha)
    assert report["manifest"]["git_commit"], "a recorded run names the commit that made it"
    # The shipped config says what the model ran, not what its first command was set up for.
    assert report["config"]["training"]["max_steps"] == report["manifest"]["training"]["steps"]


# The fields tools/real_run.py writes into a command's entry of the manifest's command log.
SCRIPT_FIELDS = {"command", "started", "train_command", "trained_to", "report", "wall_s"}
# A command that a script of this repository ran: a tool, a benchmark, or the library's command
# line (directly or under torchrun). Anything else (a copy, a command typed by hand) was not.
SCRIPT_COMMAND = re.compile(
    r"^(python3? (tools/|benchmarks/|-m transformer_lib |-m torch\.distributed\.run .*-m transformer_lib )"
    r"|bash tools/)"
)


def manifests_under(results: Path) -> list[tuple[Path, dict]]:
    """Every manifest under ``results``: the files named ``*manifest*.json`` and the ``manifest``
    of any other JSON file there (the benchmarks write theirs inside the measurements)."""
    found = []
    for path in sorted(results.rglob("*.json")):
        value = json.loads(path.read_text())
        if "manifest" in path.name:
            found.append((path, value))
        elif isinstance(value, dict) and isinstance(value.get("manifest"), dict):
            found.append((path, value["manifest"]))
    return found


def entries(value, where: str = "") -> list[tuple[str, dict]]:
    """Each object inside ``value`` with its place (``command_log[0]``, ``invocations[2]``)."""
    found = [(where, value)] if isinstance(value, dict) else []
    children = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in children if isinstance(value, dict | list) else ():
        place = f"{where}[{key}]" if isinstance(key, int) else (f"{where}.{key}" if where else key)
        found += entries(child, place) if isinstance(child, dict | list) else []
    return found


def unmarked_entries(manifest: dict) -> list[str]:
    """What in a manifest no script wrote and nothing marks: a command no script of this
    repository ran, a note, a field that tools/real_run.py does not write into its command log, or
    an entry marked by hand that ``hand_edits`` does not explain."""
    problems = [f"hand_edits[{i}]: say what and why" for i, edit in
                enumerate(manifest.get("hand_edits", [])) if not (edit.get("what") and edit.get("why"))]  # fmt: skip
    explained = {edit.get("what") for edit in manifest.get("hand_edits", [])}
    by_hand = set()
    for where, entry in entries(manifest):
        marked = entry.get("written_by_hand") is True
        if marked:
            by_hand.add(entry.get("command"))
            if where not in explained:
                problems.append(f"{where}: marked by hand, but hand_edits does not say why")
            continue
        unexplained = {"note"} & set(entry)
        if where.startswith("command_log["):
            unexplained |= set(entry) - SCRIPT_FIELDS
        commands = [v for k, v in entry.items() if k.endswith("command") and isinstance(v, str)]
        unexplained |= {c for c in commands if not SCRIPT_COMMAND.match(c)}
        problems += (
            [f"{where or 'the manifest'}: {sorted(unexplained)} unmarked"] if unexplained else []
        )
    listed = [c for key in ("commands", "train_commands") for c in manifest.get(key, [])]
    problems += [f"{c!r} is no script's command" for c in listed
                 if not SCRIPT_COMMAND.match(c) and c not in by_hand]  # fmt: skip
    return problems


MANIFESTS = manifests_under(ROOT / "results")


@pytest.mark.parametrize(
    "path, manifest", MANIFESTS, ids=[str(p.relative_to(ROOT / "results")) for p, _ in MANIFESTS]
)
def test_what_no_script_wrote_is_marked(path, manifest):
    assert unmarked_entries(manifest) == []
    # A record names the commit of its code; one that says its tree was dirty says how, unless it
    # was written before manifests recorded that (it then has no source_sha256 either).
    code = manifest.get("environment", manifest)
    assert code.get("git_commit"), "name the commit"
    for said in (code, code.get("git_checkout") or {}):
        if said.get("git_dirty") and "source_sha256" in code:
            assert said.get("git_changed") and said.get("git_diff_sha256"), "say what was dirty"


def test_the_marking_check_finds_what_no_script_wrote():
    """Each kind of unmarked entry is caught; marking it with its reason clears it."""
    entry = {"command": "cp runs/a runs/b", "started": "2026-11-26T20:00:41Z", "wall_s": 0.0}
    manifest = {"commands": ["cp runs/a runs/b"], "command_log": [entry], "git_commit": "abc"}
    assert len(unmarked_entries(manifest)) == 2  # the entry, and the list that repeats it
    manifest["command_log"][0] = {**entry, "written_by_hand": True}
    assert unmarked_entries(manifest) == [
        "command_log[0]: marked by hand, but hand_edits does not say why"
    ]
    manifest["hand_edits"] = [{"what": "command_log[0]", "why": "copied by hand"}]
    assert unmarked_entries(manifest) == []
    script = "python tools/real_run.py --profile laptop"
    noted = {"command_log": [{"command": script, "note": "stopped by hand"}]}
    assert unmarked_entries(noted) == ["command_log[0]: ['note'] unmarked"]
    inside = {"invocations": [{"command": "python tools/table3.py"}, {"command": "rm -r runs"}]}
    assert unmarked_entries(inside) == ["invocations[1]: ['rm -r runs'] unmarked"]


@pytest.mark.parametrize("folder", SEEDS, ids=[f"{f.parent.name}/{f.name}" for f in SEEDS])
def test_the_other_seeds_are_their_profiles_recipe_and_agree_with_sacrebleu(folder):
    # Their models stay in the runs' folders, so the report is read file by file.
    report = {name: json.loads((folder / f"{name}.json").read_text()) for name in REPORT_JSON}
    assert bleu_problems(folder) == []
    seed, profile = int(folder.name.rpartition("seed_")[2]), folder.parent.name.split("-")[0]
    training = report["config"]["training"]
    assert seed != 0 and training["seed"] == seed, "another seed than the recorded run's"
    assert training["max_steps"] == report["manifest"]["training"]["steps"]
    assert report["manifest"]["training"]["steps"] == PROFILES[profile].training.max_steps
    assert report["bleu"]["alpha"] == PROFILES[profile].alpha


AT_PAPER_ALPHA = sorted((ROOT / "results").glob("at-paper-alpha/*.bleu.json"))


@pytest.mark.parametrize("path", AT_PAPER_ALPHA, ids=[path.name for path in AT_PAPER_ALPHA])
def test_the_scores_at_the_papers_alpha_are_of_the_shipped_weights(path):
    """tools/score_at_alpha.py: the shipped model's own weights, its report's search but α, and
    scores that sacreBLEU recomputes from the hypotheses written beside them."""
    scored = json.loads(path.read_text())
    folder = ROOT / "results" / scored["model"]["folder"]
    report = json.loads((folder / "bleu.json").read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    shipped = manifest["shipped_model"]["sha256"]["model.safetensors"]
    assert scored["model"]["sha256"] == shipped, "scored from the weights the report ships"
    assert scored["alpha"] == 0.6 != report["alpha"]
    for key in ("src", "tgt", "beam_size", "max_length", "averaged_steps", "limit"):
        assert scored[key] == report[key], key
    lines = path.with_name(path.name.removesuffix(".bleu.json") + ".hyp.tsv").read_text()
    hypotheses = {}
    for line in lines.splitlines():
        split, _, hypothesis = line.partition("\t")
        hypotheses.setdefault(split, []).append(hypothesis)
    assert list(hypotheses) == list(scored["splits"]) == list(report["splits"])
    for split, entry in scored["splits"].items():
        refs = [tgt for _, tgt in references(split, scored["src"], scored["tgt"])]
        assert len(hypotheses[split]) == len(refs) == entry["sentences"]
        metrics = {"bleu": sacrebleu.BLEU(), "chrf": sacrebleu.CHRF()}
        for key, metric in metrics.items():
            assert metric.corpus_score(hypotheses[split], [refs]).score == entry[key], split
            assert str(metric.get_signature()) == entry[f"{key}_signature"]
        if "lowercase" in entry:
            lower = sacrebleu.BLEU(lowercase=True).corpus_score(hypotheses[split], [refs])
            assert lower.score == entry["lowercase"]["bleu"]


def test_the_retrained_seed_is_the_hour_runs_seed_bit_for_bit():
    """results/README.md: laptop-seeds/en-de-seed_1 trained the recipe with seed 1 again, and
    its weights are those of laptop-search-2/hour/seed_1-en-de, whose translations were not
    kept; so the hour run's validation scores (evaluation-choices) are this report's model's."""
    again = json.loads((ROOT / "results/laptop-seeds/en-de-seed_1/manifest.json").read_text())
    hour = json.loads(
        (ROOT / "results/laptop-search-2/hour/seed_1-en-de.manifest.json").read_text()
    )
    weights = [m["shipped_model"]["sha256"]["model.safetensors"] for m in (again, hour)]
    assert weights[0] == weights[1]


def test_the_test_scores_seen_are_what_the_history_says():
    """results/test-scores-seen.json, written again from git's history, is unchanged: a new
    version of a recorded run's scores, or a changed target, needs the file written again."""
    if (
        not (ROOT / ".git").exists()
        or subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        != "false"
    ):
        pytest.skip("needs the repository's whole history (a clone, not an archive)")
    script = ROOT / "tools" / "test_scores_seen.py"
    done = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
