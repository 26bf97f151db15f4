"""When the translator page's recorded measurements are out of date (book/export.md,
book/translator.md): only when an input of the export changed, the weights, the tokenizer or the
architecture, never for a correction to the training record that config.json also holds."""

import copy
import json
from pathlib import Path

import pytest

from transformer_lib.book.translator_internals import measured_models
from transformer_lib.book.translator_page import (
    PAGE_MODELS,
    changed_inputs,
    export_inputs,
    export_key,
    outdated_measurements,
)
from transformer_lib.provenance import write_json

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "results" / "translator" / "manifest.json"  # tools/translator_report.py's
CURRENT = "the graphs of the models this page serves"


@pytest.fixture
def folder(tmp_path) -> Path:
    """A model folder's config.json and manifest.json, which are all that its inputs are read
    from (the manifest's digests are checked against the files before an export)."""
    model = {"d_model": 8, "n_heads": 2, "n_layers": 1, "norm_first": False, "pad_id": 0}
    config = {"training": {"max_steps": 7000}, "model": model, "run": {"src": "de", "tgt": "en"}}
    write_json(tmp_path / "config.json", config)
    digests = {name: f"{name}-1" for name in ("model.safetensors", "config.json", "tokenizer.json")}
    write_json(tmp_path / "manifest.json", {"shipped_model": {"format": 1, "sha256": digests}})
    return tmp_path


def edit(folder: Path, file: str, change) -> None:
    """Apply ``change`` to the folder's JSON ``file`` (config.json or manifest.json)."""
    value = json.loads((folder / file).read_text())
    change(value)
    write_json(folder / file, value)


def set_digest(folder: Path, name: str, digest: str) -> None:
    edit(folder, "manifest.json", lambda m: m["shipped_model"]["sha256"].__setitem__(name, digest))


def test_a_corrected_training_record_changes_no_input(folder):
    before = export_inputs(folder)
    files_before = json.loads((folder / "manifest.json").read_text())["shipped_model"]["sha256"]
    # The hand edit of the German -> English model: max_steps 7000 -> 6500, and its digest.
    edit(folder, "config.json", lambda c: c["training"].__setitem__("max_steps", 6500))
    set_digest(folder, "config.json", "config.json-2")
    after = export_inputs(folder)
    assert changed_inputs(before, after) == []
    assert changed_inputs(files_before, after) == []  # against a record of the files' digests
    # The cache key of the export is cautious: it changes, and the model is exported again.
    files_after = json.loads((folder / "manifest.json").read_text())["shipped_model"]["sha256"]
    assert export_key(files_before, 256) != export_key(files_after, 256)


@pytest.mark.parametrize(
    "name, change",
    [
        ("model.safetensors", lambda f: set_digest(f, "model.safetensors", "other weights")),
        ("tokenizer.json", lambda f: set_digest(f, "tokenizer.json", "other tokenizer")),
        # n_heads and norm_first change the graphs but not the shapes of the weights
        ("architecture", lambda f: edit(f, "config.json", lambda c: c["model"].update(n_heads=4))),
        (
            "architecture",
            lambda f: edit(f, "config.json", lambda c: c["model"].update(norm_first=True)),
        ),
    ],
)
def test_a_changed_input_is_named(folder, name, change):
    before = export_inputs(folder)
    change(folder)
    assert changed_inputs(before, export_inputs(folder)) == [name]


def test_a_record_of_file_digests_is_compared_on_the_weights_and_the_tokenizer(folder):
    files = json.loads((folder / "manifest.json").read_text())["shipped_model"]["sha256"]
    current = export_inputs(folder)
    assert changed_inputs({**files, "config.json": "another"}, current) == []
    assert changed_inputs({**files, "tokenizer.json": "another"}, current) == ["tokenizer.json"]
    assert changed_inputs({}, current) == ["model.safetensors", "tokenizer.json"]


def served_index() -> dict:
    """The page's index as export_page_models writes it, as far as the inputs go: those of the
    shipped models in results/, which the export reads."""
    return {
        "models": {name: {"inputs": export_inputs(ROOT / "results" / name)} for name in PAGE_MODELS}
    }


def test_the_recorded_measurements_are_of_the_models_served():
    """The chapter's sentence for results/translator/ as it is: current, although the German ->
    English model's config.json was corrected by hand after the measurements."""
    measured = json.loads(RECORDED.read_text())["models"]
    outdated = outdated_measurements(measured, served_index())
    assert outdated == {name: [] for name in PAGE_MODELS}, "run tools/translator_report.py again"
    assert measured_models(outdated) == CURRENT


@pytest.mark.parametrize("file", ["model.safetensors", "tokenizer.json"])
def test_other_weights_or_another_tokenizer_make_the_measurements_stale(file):
    measured = copy.deepcopy(json.loads(RECORDED.read_text())["models"])
    measured[PAGE_MODELS[0]]["model_sha256"][file] = "0" * 64  # measured on another version
    measured[PAGE_MODELS[0]].pop("inputs", None)
    outdated = outdated_measurements(measured, served_index())
    assert outdated == {PAGE_MODELS[0]: [file], PAGE_MODELS[1]: []}
    words = measured_models(outdated)
    assert words.startswith("graphs of earlier versions") and f"{file} of {PAGE_MODELS[0]}" in words


def test_a_model_not_measured_is_stale():
    measured = json.loads(RECORDED.read_text())["models"]
    del measured[PAGE_MODELS[1]]
    outdated = outdated_measurements(measured, served_index())
    assert outdated[PAGE_MODELS[1]] and measured_models(outdated) != CURRENT


def test_the_report_refuses_a_model_whose_inputs_are_not_the_graphs():
    """tools/translator_report.py measures PyTorch beside the graphs: the same inputs, or none."""
    import translator_report

    other = {**export_inputs(ROOT / "results" / PAGE_MODELS[0]), "model.safetensors": "0" * 64}
    index = {"models": {PAGE_MODELS[0]: {"inputs": other}}}
    with pytest.raises(SystemExit, match="run make book first"):
        translator_report.bleu(index, ROOT / "results", limit=1)
