"""Export the models the translator page offers as ONNX graphs, for the website (make book).

    python tools/export_translator.py [--out _build/translator] [--models DIR]

The models are read from ``--models``, else ``$TRANSFORMER_LIB_MODELS``, else ``results/``: the
shipped ``multi30k-de-en-laptop`` and ``multi30k-en-de-laptop`` folders. Each is written to
``<out>/<name>/`` as float32 and 8-bit graphs with its tokenizer, and ``<out>/translator.json``
indexes them (see the chapter *Out of PyTorch*). A model whose files, code and tool versions have
not changed since its last export is not exported again. A missing or damaged model is reported
in one line, with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "translator")
    parser.add_argument("--models", type=Path, help="the folder holding the shipped models")
    args = parser.parse_args(argv)
    from transformer_lib.book.translator_page import export_page_models
    from transformer_lib.export import ExportError
    from transformer_lib.pretrained import ModelNotFoundError, PretrainedError

    started = time.perf_counter()
    try:
        export_side_by_side(args.out, args.models)
        index = export_page_models(args.out, args.models)  # each model is exported by now
    except (ExportError, ModelNotFoundError, PretrainedError) as err:
        print(f"export_translator: {err}", file=sys.stderr)
        return 2
    for name, entry in index["models"].items():
        sizes = {
            form: sum(entry["bytes"][f"{form}/{graph}.onnx"] for graph in ("encoder", "decoder"))
            for form in ("float32", "8bit")
        }
        print(
            f"{name}: graphs {sizes['float32'] / 1e6:.1f} MB (float32), "
            f"{sizes['8bit'] / 1e6:.1f} MB (8-bit)"
        )
    print(f"translator models in {args.out}, ready in {time.perf_counter() - started:.0f} s")
    return 0


def export_side_by_side(out: Path, models: Path | None) -> None:
    """Export each page model in a process of its own, all at once: an export runs on one core
    for most of its time. A failure is raised again by the export that follows in this process."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from transformer_lib.book.translator_page import PAGE_MODELS, export_page_models

    with ProcessPoolExecutor(len(PAGE_MODELS), mp_context=get_context("spawn")) as pool:
        for name in PAGE_MODELS:
            pool.submit(export_page_models, out, models, names=[name])


if __name__ == "__main__":
    sys.exit(main())
