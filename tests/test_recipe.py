"""The run cache, ``book.runs.cached_run``: a run is trained once per profile, languages and library
hash, found again without training, and an interrupted one is finished.

A tiny profile on the first few hundred Multi30k pairs keeps each training to a few seconds.
"""

import dataclasses
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import MULTI30K, require_multi30k

import transformer_lib
from transformer_lib import recipe
from transformer_lib.book import runs
from transformer_lib.checkpoints import CheckpointError, load_checkpoint
from transformer_lib.data import load_multi30k
from transformer_lib.model import TransformerConfig
from transformer_lib.tokenizer import VOCAB_SIZE
from transformer_lib.training import TrainingConfig

SHARED = MULTI30K
needs_data = pytest.mark.usefixtures("multi30k")

TINY = recipe.Profile(
    model=TransformerConfig(
        VOCAB_SIZE, VOCAB_SIZE, d_model=16, d_ff=32, n_heads=2, n_layers=1, dropout=0.1
    ),
    training=TrainingConfig(
        max_steps=3, warmup_steps=2, max_tokens=200, log_every=1, checkpoint_every=1
    ),
    vocab_size=300,
    max_len=32,
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The first pairs of Multi30k's training and validation splits, as plain files (which
    ``multi30k_file`` takes as they are)."""
    require_multi30k()
    folder = tmp_path_factory.mktemp("multi30k")
    for split, count in (("train", 300), ("val", 20)):
        pairs = load_multi30k(split, "de", "en", SHARED)[:count]
        for i, language in enumerate(("de", "en")):
            text = "".join(pair[i] + "\n" for pair in pairs)
            (folder / f"{split}.{language}").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """The ``tiny`` profile, a runs folder under tmp_path, and a library hash the test sets."""
    monkeypatch.setitem(recipe.PROFILES, "tiny", TINY)
    monkeypatch.setenv("TRANSFORMER_LIB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(runs, "library_hash", lambda: "0123456789abcdef")
    return tmp_path / "runs"


def count_trainings(monkeypatch) -> list[dict]:
    """Record the keyword arguments of every call of ``train_translation`` (which still trains)."""
    calls, original = [], runs.train_translation

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(runs, "train_translation", counted)
    return calls


def steps(run: Path) -> int:
    return load_checkpoint(run / "checkpoints" / "last.pt")["step"]


@needs_data
def test_the_first_call_trains_and_the_second_finds_the_run(tiny, data_dir, monkeypatch):
    calls = count_trainings(monkeypatch)
    run = runs.cached_run("tiny", "de", "en", data_dir=data_dir)
    assert run == tiny / "tiny-de-en-0123456789abcdef"
    assert steps(run) == TINY.training.max_steps
    assert len(calls) == 1 and calls[0]["resume"] is False
    before = (run / "checkpoints" / "last.pt").stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(runs, "train_translation", no_training)
    assert runs.cached_run("tiny", "de", "en", data_dir=data_dir, runs_dir=tiny) == run
    assert (run / "checkpoints" / "last.pt").stat().st_mtime_ns == before


@needs_data
def test_another_library_hash_is_another_run(tiny, data_dir, monkeypatch):
    calls = count_trainings(monkeypatch)
    first = runs.cached_run("tiny", "de", "en", data_dir=data_dir)
    monkeypatch.setattr(runs, "library_hash", lambda: "fedcba9876543210")
    second = runs.cached_run("tiny", "de", "en", data_dir=data_dir)
    assert second != first and second.name == "tiny-de-en-fedcba9876543210"
    assert len(calls) == 2 and steps(second) == TINY.training.max_steps
    # The languages are part of the key too.
    third = runs.cached_run("tiny", "en", "de", data_dir=data_dir)
    assert third.name == "tiny-en-de-fedcba9876543210" and len(calls) == 3


@needs_data
def test_an_interrupted_run_is_finished(tiny, data_dir, monkeypatch):
    run = tiny / "tiny-de-en-0123456789abcdef"
    recipe.train_translation(
        "tiny", "de", "en", run, data_dir=data_dir, max_steps=2, progress=False
    )
    assert steps(run) == 2
    calls = count_trainings(monkeypatch)
    assert runs.cached_run("tiny", "de", "en", data_dir=data_dir) == run
    assert [call["resume"] for call in calls] == [True]
    assert steps(run) == TINY.training.max_steps


@needs_data
@pytest.mark.parametrize("changed", ["model", "languages"])
def test_a_resume_with_another_model_or_language_pair_is_refused(
    tiny, data_dir, monkeypatch, changed
):
    """The same profile's name, but another model (its dropout: the weights would load) or the
    other direction: the run folder's checkpoint refuses to be continued by either."""
    out = tiny / "run"
    recipe.train_translation(
        "tiny", "de", "en", out, data_dir=data_dir, max_steps=2, progress=False
    )
    src, tgt, message = "de", "en", "model.dropout: 0.1 in the checkpoint, 0.2 now"
    if changed == "model":
        model = dataclasses.replace(TINY.model, dropout=0.2)
        monkeypatch.setitem(recipe.PROFILES, "tiny", dataclasses.replace(TINY, model=model))
    else:
        src, tgt, message = "en", "de", "'src': 'de', 'tgt': 'en'"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        recipe.train_translation(
            "tiny", src, tgt, out, data_dir=data_dir, resume=True, progress=False
        )
    assert steps(out) == 2  # nothing was trained


def test_the_tests_never_train_into_the_users_cache():
    """conftest.py names the session's runs folder (unless the caller did): a chapter or a test
    that calls cached_run without a runs_dir trains there, never in ~/.cache."""
    folder = runs.cache_folder("runs", "TRANSFORMER_LIB_RUNS")  # where cached_run trains
    assert folder == Path(os.environ["TRANSFORMER_LIB_RUNS"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transformer_lib"
    assert folder != cache / "runs"
    assert os.environ["TRANSFORMER_LIB_DATA"]  # the data is read, never downloaded into the cache


def test_an_unknown_profile_names_the_choices(tiny):
    with pytest.raises(ValueError, match="unknown profile 'huge'") as error:
        runs.cached_run("huge", "de", "en")
    assert all(name in str(error.value) for name in recipe.PROFILES)
    assert not tiny.exists()  # refused before anything was made


@pytest.fixture
def library_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the package's source that ``library_hash`` reads instead of the real one."""
    copy = tmp_path / "transformer_lib"
    shutil.copytree(
        Path(transformer_lib.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.setattr(transformer_lib, "__file__", str(copy / "__init__.py"))
    return copy


def test_the_library_hash_follows_the_source(library_copy):
    """The real ``library_hash`` (not the fixture's) changes when any module's source does."""
    copy = library_copy
    before = runs.library_hash()
    assert before == runs.library_hash()
    model = copy / "model.py"
    model.write_text(model.read_text(encoding="utf-8") + "\n# a comment\n", encoding="utf-8")
    assert runs.library_hash() != before


def test_the_library_hash_ignores_the_books_machinery(library_copy):
    """A chart or a table edited in the book retrains no cached run: only the library's own
    modules identify the code that trains, not ``transformer_lib.book``."""
    before = runs.library_hash()
    charts = library_copy / "book" / "charts.py"
    charts.write_text(charts.read_text(encoding="utf-8") + "\n# a comment\n", encoding="utf-8")
    assert runs.library_hash() == before


def test_the_library_hash_ignores_the_tangles_line_markers(library_copy):
    """Prose moved in a chapter shifts the markers of the cells below it, not the code."""
    copy = library_copy
    before = runs.library_hash()
    model = copy / "model.py"
    text = model.read_text(encoding="utf-8")
    assert "\n# %% book/" in text
    model.write_text(re.sub(r"(# %% book/\S+\.md:)(\d+)", r"\g<1>9\2", text), encoding="utf-8")
    assert model.read_text(encoding="utf-8") != text
    assert runs.library_hash() == before


def test_a_profile_of_any_number_of_processes_keeps_its_tokens_per_update():
    """Under torchrun a process's budget is the profile's tokens per update over the processes
    (the two-process run of tests/test_cli.py checks it end to end); a number of processes that
    does not divide it is refused, saying so."""
    training = recipe.PROFILES["full"].training
    assert recipe._shared_out(training, 1, "full") == training
    assert recipe._shared_out(training, 8, "full").max_tokens * 8 == training.max_tokens
    with pytest.raises(recipe.RecipeError, match="do not divide among 3 processes"):
        recipe._shared_out(training, 3, "full")


@needs_data
def test_a_profile_made_for_two_processes_refuses_one(tiny, data_dir, tmp_path):
    """A profile with a fixed number of processes (the laptop's two) says how to start it,
    before it trains anything."""
    pair = dataclasses.replace(TINY, processes=2)
    with pytest.raises(recipe.RecipeError, match="trains as 2 processes and this is 1"):
        recipe.train_translation(pair, "de", "en", tmp_path / "run", data_dir=data_dir)
    assert not (tmp_path / "run" / "checkpoints").exists()
