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
  PyTorch's (sacreBLEU through ``transformer_lib.evaluation.corpus_scores``);
* ``browser.json``: the page in headless Chromium, ``--repeats`` times: its load time, each
  model's download and start, and the search for a 15-word sentence; each run is the complete
  translator check of ``make site-test``, which must pass;
* ``manifest.json``: the command, the commit, the machine, its load before and after, the versions
  of everything measured, the models' SHA-256 and the wall time.

The models are those the site serves; the PyTorch models are read from ``$TRANSFORMER_LIB_MODELS``
or ``results/`` and must be the ones the graphs were exported from: the inputs of the export (the
weights, the tokenizer and the architecture, ``export_inputs``) are compared, and recorded in the
manifest.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
SPLIT = "test_2016_flickr"


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


def bleu(index: dict, models: Path, limit: int | None) -> dict:
    """BLEU of each model in PyTorch and through its graphs, greedy and beam 4."""
    import torch

    from transformer_lib.book.translator_page import changed_inputs, export_inputs
    from transformer_lib.data import load_multi30k
    from transformer_lib.decoding import GREEDY, SearchConfig, translate
    from transformer_lib.evaluation import corpus_scores
    from transformer_lib.export import OnnxGraphs, serving_copy
    from transformer_lib.pretrained import load_pretrained

    torch.set_num_threads(1)  # onnxruntime runs on one thread too, as the page does
    results = {}
    for name, entry in index["models"].items():
        if changed_inputs(entry.get("inputs", {}), export_inputs(models / name)):
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
        results[name] = {}
        # The page's beam search: beam 4 with the α its model's report was scored with.
        beam = SearchConfig(beam_size=4, alpha=entry["alpha"])
        for search_name, search in (("greedy", GREEDY), ("beam 4", beam)):
            outputs = {}
            for engine, state in engines.items():
                started = time.perf_counter()
                kwargs = {} if state is None else {"decoder_state": state}
                outputs[engine] = translate(served, tokenizer, sources, search, **kwargs)
                scores = corpus_scores(outputs[engine], references)
                same = sum(a == b for a, b in zip(outputs[engine], outputs["pytorch"], strict=True))
                results[name][f"{engine}, {search_name}"] = {
                    "bleu": scores["bleu"],
                    "bleu_signature": scores["bleu_signature"],
                    "same_as_pytorch": same,
                    "alpha": search.alpha if search.beam_size > 1 else None,
                    "sentences": len(sources),
                    "seconds": round(time.perf_counter() - started, 1),
                }
                alpha = f", alpha {search.alpha}" if search.beam_size > 1 else ""
                print(
                    f"{name} {engine}, {search_name}{alpha}: BLEU {scores['bleu']:.2f}, {same} same"
                )
    return results


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build/html")
    parser.add_argument("--out", type=Path, default=ROOT / "results/translator")
    parser.add_argument("--sentences", type=int, help="only the first N test sentences (a look)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the browser check")
    args = parser.parse_args(argv)
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
    measured = {
        "sizes.json": sizes(args.site, index),
        "bleu.json": {"split": SPLIT, "models": bleu(index, models_folder(), args.sentences)},
        "browser.json": browser(args.site, args.repeats),
    }
    for name, value in measured.items():
        write_json(args.out / name, value)
    import onnxruntime

    web = json.loads(web_package.read_text())["version"]
    write_json(
        args.out / "manifest.json",
        {
            "command": "python tools/translator_report.py " + " ".join(argv or sys.argv[1:]),
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
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.perf_counter() - started, 1),
        },
    )
    print(f"translator report in {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
