"""`python -m transformer_lib` answers --help and reports a bad command clearly."""

import subprocess
import sys

import pytest
from helpers import built_once


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "transformer_lib", *args], capture_output=True, text=True
    )


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m transformer_lib" in result.stdout
    assert "commands:" in result.stdout


def test_no_command_prints_help():
    result = run()
    assert result.returncode == 0
    assert "usage:" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = run("no-such-command")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_the_package_is_light():
    """The package imports without torch or plotting libraries being loaded."""
    code = "import sys, transformer_lib; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_every_module_imports_where_there_is_no_fcntl(tmp_path):
    """Windows has no ``fcntl``: importing the library must not need it (the run cache's lock is lazy)."""
    code = f"""
import importlib, importlib.util, pkgutil, sys
from pathlib import Path
# sacrebleu's lock library picks its backend by platform when imported (msvcrt on Windows):
# import it first, as it is, so that only this package's own imports meet the missing fcntl.
if importlib.util.find_spec("portalocker"):
    import portalocker
sys.modules["fcntl"] = None  # "import fcntl" now fails, as on Windows
import transformer_lib
names = [m.name for m in pkgutil.iter_modules(transformer_lib.__path__) if m.name != "__main__"]
for name in names:
    importlib.import_module("transformer_lib." + name)
from transformer_lib.book.runs import _exclusive
with _exclusive(Path({str(tmp_path / "lock")!r})):
    pass
print(len(names))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 15  # every module was found and imported


FAULTS_OF_BLOCKS = """
import resource, sys
from transformer_lib.cli import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
faults = []
for _ in range(4):  # a 64 MiB block asked for, written and freed, as a search step does
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytes(1) * (64 << 20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))  # after the first block
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_keep_freed_memory_serves_a_freed_block_again_without_page_faults():
    """As glibc is by default, each 64 MiB block is mapped afresh (16,384 pages faulted in);
    kept, the blocks after the first reuse its pages. The library itself sets nothing."""
    faults = {
        how: int(subprocess.check_output([sys.executable, "-c", FAULTS_OF_BLOCKS, how], text=True))
        for how in ("as it is", "kept")
    }
    pages = 3 * (64 << 20) // 4096
    assert faults["as it is"] >= pages and faults["kept"] < pages // 10, faults


def test_the_command_keeps_freed_memory_before_it_runs(monkeypatch):
    """``python -m transformer_lib`` makes the setting first, then runs the command."""
    import runpy

    import transformer_lib.cli as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append("keep"))
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 0)
    with pytest.raises(SystemExit) as exit_status:
        runpy.run_module("transformer_lib", run_name="__main__")
    assert calls == ["keep", "main"] and exit_status.value.code == 0


def test_average_writes_the_mean(tmp_path):
    import torch

    from transformer_lib.checkpoints import load_checkpoint, save_checkpoint

    for step, value in [(1, 2.0), (2, 4.0)]:
        state = {"model": {"w": torch.full((3,), value)}, "step": step, "config": {"model": {}}}
        save_checkpoint(state, tmp_path / f"step-{step}.pt")
    result = run(
        "average",
        "--out",
        str(tmp_path / "avg.pt"),
        *(str(tmp_path / f"step-{s}.pt") for s in (1, 2)),
    )
    assert result.returncode == 0, result.stderr
    assert torch.equal(load_checkpoint(tmp_path / "avg.pt")["model"]["w"], torch.full((3,), 3.0))


def test_average_of_a_missing_checkpoint_is_one_line_and_status_2(tmp_path):
    result = run("average", "--out", str(tmp_path / "avg.pt"), str(tmp_path / "none.pt"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: no checkpoint at {tmp_path / 'none.pt'}: check the path, or train the run first"
    )
    assert not (tmp_path / "avg.pt").exists()


def test_average_into_a_missing_folder_is_a_usage_error(tmp_path):
    result = run("average", "--out", str(tmp_path / "no" / "avg.pt"), str(tmp_path / "x.pt"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


# --- train: errors are one line with status 2; a short run writes a run folder and resumes.


def train(*options):
    return run("train", "--profile", "ci", "--src", "de", "--tgt", "en", "--quiet", *options)


def test_train_with_a_missing_data_folder_is_a_usage_error(tmp_path):
    result = train("--out", str(tmp_path / "run"), "--data-dir", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "is not a folder" in result.stderr and "Traceback" not in result.stderr


def test_train_into_an_unwritable_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = train("--out", str(blocker / "run"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot write to the output folder")
    assert len(result.stderr.strip().splitlines()) == 1


def test_train_same_language_twice_is_refused(tmp_path):
    result = run("train", "--profile", "ci", "--src", "de", "--tgt", "de", "--out", str(tmp_path))
    assert result.returncode == 2 and "both 'de'" in result.stderr


def test_train_bad_option_value_is_a_usage_error(tmp_path):
    result = run("train", "--profile", "huge", "--src", "de", "--tgt", "en", "--out", str(tmp_path))
    assert result.returncode == 2 and "invalid choice: 'huge'" in result.stderr


def test_resume_without_a_run_is_refused(tmp_path):
    result = train("--out", str(tmp_path / "run"), "--resume")
    assert result.returncode == 2 and "nothing to resume" in result.stderr


@pytest.mark.slow
def test_train_writes_a_run_and_resumes_it(tmp_path):
    import json

    import torch

    from transformer_lib.checkpoints import load_checkpoint

    out = tmp_path / "run"
    first = train("--out", str(out), "--max-steps", "2")
    assert first.returncode == 0, first.stderr
    assert "trained to step 2" in first.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["run"] == {"data": "multi30k", "src": "de", "tgt": "en", "profile": "ci"}
    assert (out / "tokenizer.json").is_file()
    again = train("--out", str(out), "--max-steps", "2")
    assert again.returncode == 2 and "--resume" in again.stderr  # a run is never overwritten
    resumed = train("--out", str(out), "--max-steps", "4", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    state = load_checkpoint(out / "checkpoints" / "last.pt")
    assert state["step"] == 4 and isinstance(state["tokenizer"], str)
    assert state["search"] == {"beam_size": 4, "alpha": 0.6, "extra_length": 50}  # ci's: §6.1's
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 4
    assert torch.isfinite(torch.stack([p.float().sum() for p in state["model"].values()])).all()


@pytest.mark.slow
def test_train_under_torchrun_with_two_processes(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "transformer_lib", "train", "--profile", "ci", "--src", "en", "--tgt", "de",
        "--out", str(out), "--max-steps", "2", "--quiet",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    from transformer_lib.checkpoints import load_checkpoint

    state = load_checkpoint(out / "checkpoints" / "last.pt")
    assert state["step"] == 2 and len(state["rng"]) == 2  # both processes' random states
    from transformer_lib.recipe import PROFILES

    # the profile's tokens per update, shared out: each process batches half of them
    per_update = PROFILES["ci"].training.max_tokens
    assert state["config"]["training"]["max_tokens"] * 2 == per_update


@pytest.mark.slow
def test_train_on_own_files_in_another_language_pair(tmp_path):
    import json

    from transformer_lib.checkpoints import load_checkpoint

    corpus = {
        "train.en": ["A dog runs.", "Two cats sleep.", "A man reads."] * 5,
        "train.fr": ["Un chien court.", "Deux chats dorment.", "Un homme lit."] * 5,
        "valid.en": ["A cat runs."],
        "valid.fr": ["Un chat court."],
    }
    for name, lines in corpus.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "run"
    result = run(
        "train", "--profile", "ci", "--src", "en", "--tgt", "fr", "--out", str(out), "--quiet",
        "--train", str(tmp_path / "train.en"), str(tmp_path / "train.fr"),
        "--valid", str(tmp_path / "valid.en"), str(tmp_path / "valid.fr"), "--max-steps", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_config = json.loads((out / "config.json").read_text())["run"]
    assert run_config["data"] == "files" and (run_config["src"], run_config["tgt"]) == ("en", "fr")
    names = ["train.en", "train.fr", "valid.en", "valid.fr"]
    assert run_config["files"] == [str((tmp_path / name).resolve()) for name in names]
    assert load_checkpoint(out / "checkpoints" / "last.pt")["step"] == 2
    checkpoint = str(out / "checkpoints" / "last.pt")
    translated = subprocess.run(
        [sys.executable, "-m", "transformer_lib", "translate", "--checkpoint", checkpoint],
        input="A dog sleeps.\nTwo men read.\n",
        capture_output=True,
        text=True,
    )
    assert translated.returncode == 0 and len(translated.stdout.split("\n")) == 3
    refused = run("evaluate", "--checkpoint", checkpoint)  # Multi30k has no English-French split
    assert refused.returncode == 2 and "trained on your own files" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1


# --- translate and evaluate, with a checkpoint of a few updates (its translations are poor, but
# --- everything around them is what these tests check).


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return built_once(tmp_path_factory, "cli", train_three_updates) / "run/checkpoints/last.pt"


def train_three_updates(folder):
    result = train("--out", str(folder / "run"), "--max-steps", "3")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_translate_keeps_lines_in_order_with_empty_and_over_long_ones(checkpoint):
    import torch

    from transformer_lib.decoding import SearchConfig, translate
    from transformer_lib.evaluation import load_translator

    lines = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde\u2028spielen im Schnee.", "Hund " * 1500]
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lib", "translate", "--checkpoint", str(checkpoint)]
        + ["--beam", "2"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split("\n")
    assert outputs[-1] == "" and len(outputs) == len(lines) + 1  # one line out per line in
    assert outputs[1] == ""
    assert "warning: sentence 4 has" in result.stderr and "Traceback" not in result.stderr
    model, tokenizer, _ = load_translator(checkpoint)
    torch.manual_seed(0)
    expected = translate(model, tokenizer, lines[:3], SearchConfig(beam_size=2))
    assert outputs[:3] == expected  # the command is the library function


def test_translate_bad_beam_is_a_usage_error(tmp_path):
    result = run("translate", "--checkpoint", str(tmp_path / "x.pt"), "--beam", "0")
    assert result.returncode == 2 and "--beam" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "options, own, expected",
    [
        ([], (2, 1.8, 7), (2, 1.8, 7)),  # the model's own search
        ([], None, (4, 0.6, 50)),  # a model without one: §6.1's
        (["--alpha", "0.25"], (2, 1.8, 7), (2, 0.25, 7)),  # an option replaces its one setting
        (["--beam", "1", "--extra-length", "3"], (4, 1.8, 50), (1, 1.8, 3)),
    ],
)
def test_the_search_is_the_models_own_and_an_option_replaces_its_setting(options, own, expected):
    """The rule of translate (model_search): the command line searches as Python does."""
    from types import SimpleNamespace

    from transformer_lib.cli import _search, build_parser
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.pretrained import ModelRecord

    args = build_parser().parse_args(["translate", "--model", "m", *options, "--batch-size", "8"])
    model = SimpleNamespace(record=None if own is None else ModelRecord(SearchConfig(*own)))
    found = _search(args, model)
    assert (found.beam_size, found.alpha, found.extra_length, found.batch_size) == (*expected, 8)
    assert _search(args).beam_size == (expected[0] if "--beam" in options else 4)  # no model yet


def test_translate_missing_checkpoint_is_a_usage_error(tmp_path):
    result = run("translate", "--checkpoint", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and "no checkpoint at" in result.stderr


def test_translate_checkpoint_without_tokenizer_is_refused(tmp_path):
    import torch

    from transformer_lib.checkpoints import save_checkpoint

    path = tmp_path / "bare.pt"
    save_checkpoint({"model": {"w": torch.zeros(2)}, "step": 1, "config": {}}, path)
    result = run("translate", "--checkpoint", str(path))
    assert result.returncode == 2 and "no tokenizer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_evaluate_writes_what_sacrebleu_computes_from_the_files(checkpoint, tmp_path):
    import json

    from transformer_lib.data import load_multi30k

    out = tmp_path / "scores.json"
    result = run(
        "evaluate", "--checkpoint", str(checkpoint), "--beam", "1", "--limit", "30", "--quiet"
    )
    assert result.returncode == 0, result.stderr
    default = checkpoint.with_name("last.test_2016_flickr.json")
    assert default.is_file() and "BLEU signature: nrefs:1" in result.stdout
    result = run(
        "evaluate", "--checkpoint", str(checkpoint), "--beam", "1", "--limit", "30", "--quiet",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    scores = json.loads(out.read_text())
    hypotheses = tmp_path / scores["hypotheses"]
    assert scores["sentences"] == 30 and len(hypotheses.read_text().splitlines()) == 30
    references = tmp_path / "ref.en"
    pairs = load_multi30k("test_2016_flickr", "de", "en")[:30]
    references.write_text("".join(target + "\n" for _, target in pairs))
    program = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(references),
            "-i",
            str(hypotheses),
            "-b",
            "-w",
            "4",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert round(scores["bleu"], 4) == float(program.stdout.strip())


def test_evaluate_unknown_split_is_one_line(checkpoint):
    result = run("evaluate", "--checkpoint", str(checkpoint), "--split", "test_2099")
    assert result.returncode == 2 and "test_2099" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flag,mode", [(["--compile"], "default"), ([], None)])
def test_train_compile_reaches_the_recipe(tmp_path, monkeypatch, flag, mode):
    """--compile asks the recipe for torch.compile's default mode; without it the profile's."""
    from transformer_lib import cli, recipe

    calls = []

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return {"step": 1, "wall_s": 0.0, "valid": None, "finished": True}

    monkeypatch.setattr(recipe, "train_translation", recorded)
    argv = ["train", "--profile", "ci", "--src", "de", "--tgt", "en", "--out", str(tmp_path / "r")]
    assert cli.main([*argv, *flag]) == 0
    assert calls[0]["compile_mode"] == mode


def test_the_engine_choices_are_the_librarys():
    """--engine lists its choices itself, so that --help loads no torch: they are the library's."""
    import argparse

    from transformer_lib import cli, engine

    parser = argparse.ArgumentParser()
    cli._add_search_options(parser)
    choices = next(action.choices for action in parser._actions if action.dest == "engine")
    assert tuple(choices) == engine.ENGINES


def test_the_version_is_read_only_when_asked(monkeypatch, capsys):
    """Reading it scans every installed package (importlib.metadata): no other command waits."""
    import importlib.metadata

    import transformer_lib
    from transformer_lib import cli

    monkeypatch.delitem(vars(transformer_lib), "__version__", raising=False)
    asked = []
    monkeypatch.setattr(importlib.metadata, "version", lambda name: asked.append(name) or "9.9")
    cli.build_parser().parse_args(["translate", "--model", "m"])
    assert asked == []
    assert cli.main(["--version"]) == 0 and capsys.readouterr().out == "9.9\n"
    assert asked == ["transformer_lib"]
    vars(transformer_lib).pop("__version__", None)  # read again, for real, by the next asker


def test_loading_leaves_the_parsed_arguments_as_they_were(monkeypatch):
    """--engine onednn runs on the CPU: the command picks it without writing into its arguments."""
    from transformer_lib import cli, pretrained

    devices = []
    monkeypatch.setattr(pretrained, "load_pretrained", lambda name, device: devices.append(device))
    args = cli.build_parser().parse_args(["translate", "--model", "m", "--engine", "onednn"])
    before = vars(args).copy()
    with pytest.raises(TypeError):  # the stand-in returns no model: loading stops there
        cli._load(args)
    assert vars(args) == before and str(devices[0]) == "cpu"
