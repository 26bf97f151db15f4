"""Measure the translator page's models and write them under results/translator/ (the chapter
*Out of PyTorch* shows them).

    python tools/translator_report.py [--site _build/html] [--out results/translator]
                                      [--sentences N] [--repeats 3]

Run it on a machine doing nothing else, after ``make book`` (the page's graphs are measured as the
built site serves them). It writes, each with what it measured:

* ``sizes.json``: the reader's download, in bytes as served and gzip-compressed (as a server that
  compresses sends them): the runtime, and each model's graphs (float32, 8-bit) and tokenizer;
* ``bleu.json``: test_2016_flickr BLEU of each model with PyTorch and with Python's onnxruntime on
  the float32 and 8-bit graphs, greedy and beam 4 (with the α the page uses for the model, that of
  its report), and how many translations equal
  PyTorch's (sacreBLEU through ``transformer_lib.evaluation.corpus_scores``), with the batch size
  they were translated in: the 8-bit graphs quantize each activation with one scale for all the
  rows of a batch, so their translation of a sentence depends on the sentences beside it;
* ``hyp/<model>/<runtime>.<search>.txt``: the translations those scores are of, one a line, in
  the order of the test set: PyTorch's and the 8-bit graphs'. The float32 graphs' are PyTorch's
  line for line (the script refuses to write them otherwise), so their rows name PyTorch's file
  rather than a second copy of it; the manifest's ``translations`` says which file each row of
  ``bleu.json`` is scored from;
* ``browser.json``: the page in headless Chromium, ``--repeats`` times: its load time, each
  model's download and start, and the search for a 15-word sentence; each run is the complete
  translator check of ``make site-test``, which must pass;
* ``manifest.json``: the command, the commit, the machine, its load before and after, the versions
  of everything measured, the models' SHA-256 and the wall time.

The models are those the site serves; the PyTorch models are read from ``$TRANSFORMER_LIB_MODELS``
or ``results/`` and must be the ones the graphs were exported from: the inputs of the export (the
weights, the tokenizer and the architecture, ``export_inputs``) are compared, and recorded in the
manifest.

    python tools/translator_report.py --translations-only [--graphs _build/translator]

writes the translations behind the recorded ``bleu.json`` and measures nothing: no sizes, no
browser, no new scores. It runs the graphs that ``make translator`` exported into
``_build/translator`` (the site serves copies of these files, byte for byte), translates the test
set again as ``bleu.json``'s run did (in its batches, where it records them), and writes the
translations only if every row is reproduced: the same BLEU (to 1e-9), signature, α, sentences and
translations equal to PyTorch's. The manifest then gains ``translations``, with this command and
its machine; the recorded measurements are left as they are. Where the search's code has changed
since the recording (its batches, when it drops finished rows), the 8-bit rows are not reproduced,
and nothing is written.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
SPLIT = "test_2016_flickr"
TRANSLATIONS = "hyp"  # <out>/hyp/<model>/<runtime>.<search>.txt
# What a row measured again must reproduce of the recorded one (its seconds are a timing).
REPRODUCED = ("bleu", "bleu_signature", "alpha", "sentences", "same_as_pytorch")
BLEU_TOLERANCE = 1e-9  # the same translations give the same BLEU, up to the float's last digits


def gzip_size(path: Path) -> int:
    return len(gzip.compress(path.read_bytes(), compresslevel=6))


def sizes(site: Path, index: dict) -> dict:
    """Bytes of every file the reader downloads, as served and gzip-compressed."""
    from translator_check import MODELS

    static = site / "_static/translator"
    runtime = sorted((static / "vendor").glob("*.*js")) + sorted((static / "vendor").glob("*.wasm"))
    files = {"runtime": {p.name: p for p in runtime}}
    for name in index["models"]:
        folder = site / MODELS / name
        files[name] = {
            "float32": {g: folder / "float32" / g for g in ("encoder.onnx", "decoder.onnx")},
            "8bit": {g: folder / "8bit" / g for g in ("encoder.onnx", "decoder.onnx")},
            "tokenizer": {"tokenizer.json": folder / "tokenizer.json"},
        }

    def measure(group: dict) -> dict:
        if all(isinstance(v, Path) for v in group.values()):
            each = {k: {"bytes": p.stat().st_size, "gzip": gzip_size(p)} for k, p in group.items()}
            total = {key: sum(v[key] for v in each.values()) for key in ("bytes", "gzip")}
            return {"files": each, **total}
        return {key: measure(value) for key, value in group.items()}

    return measure(files)


def bleu(
    index: dict, models: Path, limit: int | None, batch_size: int | None = None
) -> tuple[dict, dict]:
    """BLEU of each model in PyTorch and through its graphs, greedy and beam 4 (``batch_size``
    sentences translated together: ``translate``'s default unless given), and the translations
    scored: ``{model: {"<runtime>, <search>": row}}`` and the same of the lines."""
    import torch

    from transformer_lib.book.translator_page import changed_inputs, export_inputs
    from transformer_lib.data import load_multi30k
    from transformer_lib.decoding import SearchConfig, translate
    from transformer_lib.evaluation import corpus_scores
    from transformer_lib.export import OnnxGraphs, serving_copy
    from transformer_lib.pretrained import load_pretrained

    torch.set_num_threads(1)  # onnxruntime runs on one thread too, as the page does
    results, translations = {}, {}
    for name, entry in index["models"].items():
        # An index written before the export recorded its inputs names the files' digests.
        exported_from = entry["inputs"] if "inputs" in entry else entry["model_sha256"]
        if changed_inputs(exported_from, export_inputs(models / name)):
            raise SystemExit(
                f"translator_report: {models / name} is not the model the site's graphs were "
                "exported from: run make book first"
            )
        model, tokenizer = load_pretrained(models / name)
        served = serving_copy(model, entry["served_length"])
        pairs = load_multi30k(SPLIT, entry["src"], entry["tgt"])[:limit]
        sources, references = [s for s, _ in pairs], [t for _, t in pairs]
        engines = {"pytorch": None}
        for form in ("float32", "8bit"):
            folder = Path(index["folder"]) / name / form
            engines[f"onnxruntime {form}"] = OnnxGraphs.load(folder).decoder_state
        results[name], translations[name] = {}, {}
        # The page's beam search: beam 4 with the α its model's report was scored with.
        size = {} if batch_size is None else {"batch_size": batch_size}
        beam = SearchConfig(beam_size=4, alpha=entry["alpha"], **size)
        for search_name, search in (
            ("greedy", SearchConfig(beam_size=1, **size)),
            ("beam 4", beam),
        ):
            outputs = {}
            for engine, state in engines.items():
                started = time.perf_counter()
                kwargs = {} if state is None else {"decoder_state": state}
                outputs[engine] = translate(served, tokenizer, sources, search, **kwargs)
                scores = corpus_scores(outputs[engine], references)
                same = sum(a == b for a, b in zip(outputs[engine], outputs["pytorch"], strict=True))
                translations[name][f"{engine}, {search_name}"] = outputs[engine]
                results[name][f"{engine}, {search_name}"] = {
                    "bleu": scores["bleu"],
                    "bleu_signature": scores["bleu_signature"],
                    "same_as_pytorch": same,
                    "alpha": search.alpha if search.beam_size > 1 else None,
                    "sentences": len(sources),
                    # The 8-bit graphs scale each activation over all the rows of a batch: a
                    # sentence's translation depends on the sentences translated with it.
                    "batch_size": search.batch_size,
                    "seconds": round(time.perf_counter() - started, 1),
                }
                alpha = f", alpha {search.alpha}" if search.beam_size > 1 else ""
                print(
                    f"{name} {engine}, {search_name}{alpha}: BLEU {scores['bleu']:.2f}, {same} same"
                )
    return results, translations


def translation_file(name: str, setting: str) -> str:
    """The file, relative to the report's folder, of a row of ``bleu.json`` (``"pytorch,
    greedy"``): ``hyp/<model>/pytorch.greedy.txt``."""
    runtime, search = setting.split(", ")
    return f"{TRANSLATIONS}/{name}/{runtime.replace(' ', '_')}.{search.replace(' ', '_')}.txt"


def stored_translations(translations: dict) -> tuple[dict, dict]:
    """Which file holds each row's translations (model -> row -> file) and each file's text.

    A row of the float32 graphs names PyTorch's file: their translations are PyTorch's, line for
    line, which is checked here (a second copy would add nothing but bytes)."""
    files, texts = {}, {}
    for name, rows in translations.items():
        files[name] = {}
        for setting, lines in rows.items():
            runtime, search = setting.split(", ")
            if runtime == "onnxruntime float32":
                if lines != rows[f"pytorch, {search}"]:
                    raise SystemExit(
                        f"translator_report: {name}'s float32 graphs do not write PyTorch's "
                        f"translations at {search}: their file would not be PyTorch's"
                    )
                setting = f"pytorch, {search}"
            if any("\n" in line for line in lines):
                raise SystemExit(
                    f"translator_report: a translation of {name}, {setting} spans lines"
                )
            files[name][f"{runtime}, {search}"] = translation_file(name, setting)
            texts[translation_file(name, setting)] = "".join(line + "\n" for line in lines)
    return files, texts


def write_translations(out: Path, translations: dict) -> dict:
    """Write the translations under ``out``; the manifest's entry that says where each row's are
    (``files``) and each file's SHA-256."""
    from transformer_lib.provenance import write_text_atomically

    files, texts = stored_translations(translations)  # every check before the first file
    for path, text in texts.items():
        write_text_atomically(out / path, text)
    for stale in (out / TRANSLATIONS).glob("*/*.txt"):  # an earlier record's
        if str(stale.relative_to(out)) not in texts:
            stale.unlink()
    digests = {path: hashlib.sha256(text.encode()).hexdigest() for path, text in texts.items()}
    return {"split": SPLIT, "files": files, "sha256": digests}


def unreproduced(recorded: dict, measured: dict) -> list[str]:
    """Where the rows measured again (``bleu.json``'s ``models``) differ from the recorded ones,
    in what :data:`REPRODUCED` names; their seconds may differ."""
    problems = []
    if recorded.keys() != measured.keys() or any(
        recorded[name].keys() != measured[name].keys() for name in recorded.keys() & measured.keys()
    ):
        problems.append(f"other rows: recorded {sorted(recorded)}, now {sorted(measured)}")
    for name in recorded.keys() & measured.keys():
        for setting in recorded[name].keys() & measured[name].keys():
            was, now = recorded[name][setting], measured[name][setting]
            for key in REPRODUCED:
                if key == "bleu":
                    same = abs(was[key] - now[key]) <= BLEU_TOLERANCE
                else:
                    same = was.get(key) == now.get(key)
                if not same:
                    problems.append(
                        f"{name}, {setting}: {key} {was.get(key)} recorded, {now.get(key)} now"
                    )
    return problems


def browser(site: Path, repeats: int) -> dict:
    """The translator check, ``repeats`` times, with the timings the page measured."""
    import site_check
    import translator_check
    from playwright.sync_api import sync_playwright

    runs = []
    with site_check.serve(site) as base, sync_playwright() as playwright:
        executable = site_check.find_chromium()
        browser_ = playwright.chromium.launch(executable_path=executable, headless=True)
        version = browser_.version
        try:
            for _ in range(repeats):
                report = translator_check.check_translator(
                    browser_,
                    site,
                    base,
                    lambda page, problems: site_check.watch(page, site, base, problems),
                )
                if not report.ok:
                    raise SystemExit("translator_report: the translator check failed (above)")
                runs.append(report.timings)
        finally:
            browser_.close()
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return {"chromium": version, "runs": runs, "median_ms": medians}


def describe(folder: Path, entry: dict) -> dict:
    """Which model was measured: its direction, the profile it was trained with, its files."""
    run = json.loads((folder / "config.json").read_text()).get("run", {})
    return {
        "folder": str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder),
        "src": entry["src"],
        "tgt": entry["tgt"],
        "profile": run.get("profile"),
        "model_sha256": entry["model_sha256"],
        "inputs": entry["inputs"],  # what the measured graphs were computed from
    }


def command(argv: list[str] | None) -> str:
    return "python tools/translator_report.py " + " ".join(sys.argv[1:] if argv is None else argv)


def measure_all(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measure everything (sizes, BLEU with its translations, the browser) on the built site."""
    from translator_check import MODELS

    from transformer_lib.book.translator_page import models_folder
    from transformer_lib.provenance import environment, write_json

    index_path = args.site / MODELS / "translator.json"
    if not index_path.is_file():
        print(f"translator_report: {index_path} not found: run make book first", file=sys.stderr)
        return 2
    web_package = ROOT / "node_modules/onnxruntime-web/package.json"
    if not web_package.is_file():  # checked first: the manifest names the page's runtime
        print(f"translator_report: {web_package} not found: run make book first", file=sys.stderr)
        return 2
    started, load_before = time.perf_counter(), os.getloadavg()
    index = {**json.loads(index_path.read_text()), "folder": str(args.site / MODELS)}
    scores, translations = bleu(index, models_folder(), args.sentences)
    stored_translations(translations)  # its refusals, before the browser's minutes
    measured = {
        "sizes.json": sizes(args.site, index),
        "bleu.json": {"split": SPLIT, "models": scores},
        "browser.json": browser(args.site, args.repeats),
    }
    stored = write_translations(args.out, translations)
    for name, value in measured.items():
        write_json(args.out / name, value)
    import onnxruntime

    web = json.loads(web_package.read_text())["version"]
    write_json(
        args.out / "manifest.json",
        {
            "command": command(argv),
            **environment("cpu"),
            "onnxruntime": onnxruntime.__version__,
            "onnxruntime_web": web,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "models": {
                name: describe(models_folder() / name, entry)
                for name, entry in index["models"].items()
            },
            "sentences": args.sentences,
            "translations": stored,  # written by this command, from the scores' own run
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    print(f"translator report in {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


def graph_files(folder: Path, names) -> dict:
    """What a folder of exported graphs is: each model's export record (its key and the tools'
    versions) and the SHA-256 of each graph file."""
    found = {}
    for name in names:
        export = json.loads((folder / name / "export.json").read_text())
        found[name] = {
            "key": export["key"],
            "versions": export["versions"],
            "sha256": {
                str(path.relative_to(folder / name)): hashlib.sha256(path.read_bytes()).hexdigest()
                for path in sorted((folder / name).glob("*/*.onnx"))
            },
        }
    return found


def translations_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Translate again as the recorded ``bleu.json`` was measured, and write the translations
    only if every row is reproduced; the manifest gains their entry, nothing else changes."""
    from transformer_lib.book.translator_page import changed_inputs, export_inputs, models_folder
    from transformer_lib.provenance import environment, write_json

    index_path, started = args.graphs / "translator.json", time.perf_counter()
    if not index_path.is_file():
        print(f"translator_report: {index_path} not found: run make translator", file=sys.stderr)
        return 2
    index = {**json.loads(index_path.read_text()), "folder": str(args.graphs)}
    manifest = json.loads((args.out / "manifest.json").read_text())
    recorded_bleu = (args.out / "bleu.json").read_bytes()
    # The measured models are the models here (bleu() checks the graphs' against them too).
    changed = {
        name: changed_inputs(
            measured["inputs"] if "inputs" in measured else measured["model_sha256"],
            export_inputs(models_folder() / name),
        )
        for name, measured in manifest["models"].items()
    }
    if any(changed.values()) or index["models"].keys() != manifest["models"].keys():
        print(
            f"translator_report: the models measured are not those of {args.graphs} and "
            f"{models_folder()} (changed: {changed}; graphs of {sorted(index['models'])})",
            file=sys.stderr,
        )
        return 1
    recorded = json.loads(recorded_bleu)["models"]
    sizes = {row.get("batch_size") for rows in recorded.values() for row in rows.values()}
    batch_size = sizes.pop() if len(sizes) == 1 else None  # None: not recorded, the default
    scores, translations = bleu(index, models_folder(), manifest["sentences"], batch_size)
    problems = unreproduced(recorded, scores)
    if problems:
        print("translator_report: bleu.json is not reproduced; nothing written:", file=sys.stderr)
        print("\n".join(f"  {problem}" for problem in problems), file=sys.stderr)
        return 1
    import onnxruntime

    stored = write_translations(args.out, translations)
    manifest["translations"] = {
        "command": command(argv),
        **environment("cpu"),
        "onnxruntime": onnxruntime.__version__,
        "graphs": graph_files(args.graphs, index["models"]),  # the files run, which reproduced
        "reproduces": {"bleu.json": hashlib.sha256(recorded_bleu).hexdigest()},
        **stored,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    # Translations written by hand before, if any, are replaced: so is what said why.
    edits = [e for e in manifest.pop("hand_edits", []) if e.get("what") != "translations"]
    write_json(args.out / "manifest.json", {**manifest, **({"hand_edits": edits} if edits else {})})
    print(f"bleu.json reproduced; its translations in {args.out / TRANSLATIONS}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build/html")
    parser.add_argument("--out", type=Path, default=ROOT / "results/translator")
    parser.add_argument("--sentences", type=int, help="only the first N test sentences (a look)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the browser check")
    parser.add_argument(
        "--translations-only",
        action="store_true",
        help="only write the translations of the recorded bleu.json, if they reproduce it",
    )
    parser.add_argument(
        "--graphs",
        type=Path,
        default=ROOT / "_build/translator",
        help="the exported graphs that --translations-only runs (those the site copies)",
    )
    args = parser.parse_args(argv)
    if args.translations_only and args.sentences is not None:
        parser.error("--translations-only translates as many sentences as bleu.json's run did")
    if args.translations_only:
        return translations_only(args, argv)
    return measure_all(args, argv)


if __name__ == "__main__":
    sys.exit(main())
