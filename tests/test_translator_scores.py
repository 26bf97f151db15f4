"""Every score of results/translator/bleu.json (the translator page's models in PyTorch and
through their float32 and 8-bit graphs, written by tools/translator_report.py) recomputed by
sacreBLEU from the translations committed beside it and the references; and the script's
refusals, which keep a record and its translations from drifting apart."""

import copy
import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import sacrebleu
from helpers import require_multi30k

from transformer_lib.data import multi30k_file

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "results" / "translator"
sys.path.insert(0, str(ROOT / "tools"))
import translator_report  # noqa: E402


def references(split: str, language: str) -> list[str]:
    """The reference side of a test set, read straight from the gzipped file."""
    with gzip.open(multi30k_file(split, language), "rt", encoding="utf-8") as file:
        return file.read().splitlines()


def score_problems(folder: Path) -> list[str]:
    """Where ``folder/bleu.json`` differs from what sacreBLEU recomputes from the translations
    that the manifest's ``translations`` names for each row (each file checked against its
    SHA-256): BLEU to 1e-9, its signature, the number of sentences, and how many translations
    are PyTorch's (a float32 row whose translations are all PyTorch's names PyTorch's file)."""
    bleu = json.loads((folder / "bleu.json").read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    stored, problems = manifest["translations"], []
    if stored["split"] != bleu["split"]:
        problems.append(f"translations of {stored['split']}, scores of {bleu['split']}")

    def lines(file: str) -> list[str]:
        text = (folder / file).read_text(encoding="utf-8")
        if hashlib.sha256(text.encode()).hexdigest() != stored["sha256"][file]:
            problems.append(f"{file}: not the file the manifest names (SHA-256)")
        return text.splitlines()

    for name, rows in bleu["models"].items():
        refs = references(bleu["split"], manifest["models"][name]["tgt"])
        files = stored["files"].get(name, {})
        for setting, row in rows.items():
            if setting not in files or f"pytorch, {setting.split(', ')[1]}" not in files:
                problems.append(f"{name}, {setting}: no translations")
                continue
            found = lines(files[setting])
            pytorch = lines(files[f"pytorch, {setting.split(', ')[1]}"])
            metric = sacrebleu.BLEU()
            score = metric.corpus_score(found, [refs[: len(found)]]).score
            same = sum(a == b for a, b in zip(found, pytorch, strict=True))
            recomputed = {"sentences": len(found), "same_as_pytorch": same}
            recomputed["bleu_signature"] = str(metric.get_signature())
            for key, value in recomputed.items():
                if value != row[key]:
                    problems.append(f"{name}, {setting}: {key} {row[key]}, recomputed {value}")
            if abs(score - row["bleu"]) > 1e-9:
                problems.append(f"{name}, {setting}: bleu {row['bleu']}, sacreBLEU {score}")
    return problems


def test_every_score_of_the_translator_page_is_recomputed_from_its_translations():
    require_multi30k()
    assert score_problems(RECORDED) == []
    bleu = json.loads((RECORDED / "bleu.json").read_text())["models"]
    files = json.loads((RECORDED / "manifest.json").read_text())["translations"]["files"]
    for name, rows in bleu.items():  # the float32 graphs' translations are PyTorch's, one copy
        for search in ("greedy", "beam 4"):
            float32 = rows[f"onnxruntime float32, {search}"]
            assert float32["same_as_pytorch"] == float32["sentences"]
            assert (
                files[name][f"onnxruntime float32, {search}"] == files[name][f"pytorch, {search}"]
            )


@pytest.mark.parametrize(
    "changed, rows",
    [
        ("onnxruntime 8bit, beam 4", {"onnxruntime 8bit, beam 4"}),
        # PyTorch's file is also the float32 graphs', and the 8-bit rows count against it.
        ("pytorch, greedy", {"pytorch, greedy", "onnxruntime float32, greedy"}),
    ],
)
def test_the_check_finds_a_changed_translation(tmp_path, changed, rows):
    require_multi30k()
    folder = tmp_path / "translator"
    shutil.copytree(RECORDED, folder)
    name = "multi30k-de-en-laptop"
    file = json.loads((folder / "manifest.json").read_text())["translations"]["files"][name]
    path = folder / file[changed]
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0] = references("test_2016_flickr", "en")[0]  # a perfect first translation
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    problems = score_problems(folder)
    assert f"{file[changed]}: not the file the manifest names (SHA-256)" in problems
    bleu_rows = {p.partition(": bleu ")[0] for p in problems if ": bleu " in p}
    assert bleu_rows == {f"{name}, {row}" for row in rows}


def test_a_row_measured_again_must_reproduce_the_recorded_one():
    recorded = json.loads((RECORDED / "bleu.json").read_text())["models"]
    measured = copy.deepcopy(recorded)
    for rows in measured.values():
        for row in rows.values():
            row["seconds"] *= 2  # a timing: not reproduced, not compared
            row["batch_size"] = 64  # not recorded there: not compared
    assert translator_report.unreproduced(recorded, measured) == []
    row = measured["multi30k-en-de-laptop"]["onnxruntime 8bit, greedy"]
    row["bleu"] += 1e-8
    row["same_as_pytorch"] -= 1
    assert translator_report.unreproduced(recorded, measured) == [
        f"multi30k-en-de-laptop, onnxruntime 8bit, greedy: bleu {row['bleu'] - 1e-8} recorded, "
        f"{row['bleu']} now",
        f"multi30k-en-de-laptop, onnxruntime 8bit, greedy: same_as_pytorch "
        f"{row['same_as_pytorch'] + 1} recorded, {row['same_as_pytorch']} now",
    ]
    del measured["multi30k-en-de-laptop"]
    assert translator_report.unreproduced(recorded, measured)[0].startswith("other rows")


def test_only_pytorchs_and_the_8_bit_translations_are_stored():
    rows = {"pytorch, greedy": ["a", "b"], "onnxruntime float32, greedy": ["a", "b"]}
    rows["onnxruntime 8bit, greedy"] = ["a", "c"]
    files, texts = translator_report.stored_translations({"m": rows})
    assert files["m"] == {
        "pytorch, greedy": "hyp/m/pytorch.greedy.txt",
        "onnxruntime float32, greedy": "hyp/m/pytorch.greedy.txt",
        "onnxruntime 8bit, greedy": "hyp/m/onnxruntime_8bit.greedy.txt",
    }
    assert texts == {
        "hyp/m/pytorch.greedy.txt": "a\nb\n",
        "hyp/m/onnxruntime_8bit.greedy.txt": "a\nc\n",
    }
    rows["onnxruntime float32, greedy"] = ["a", "c"]  # not PyTorch's: its file would lie
    with pytest.raises(SystemExit, match="do not write PyTorch's translations"):
        translator_report.stored_translations({"m": rows})
