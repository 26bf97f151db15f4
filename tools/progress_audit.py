"""Which cells of the chapters run long without showing progress, as a reader in Jupyter meets them.

Each chapter is executed as a notebook from book/ (as the book's build does, but with the reader's
settings: TRANSFORMER_LIB_BOOK_BUILD unset, so the library's tqdm bars are on), on a cold cache
of training runs (an empty TRANSFORMER_LIB_RUNS), and every cell's wall time is recorded with
whether its output holds a progress bar. A cell that ran longer than --seconds without one is
listed; the exit status is 1 when there is such a cell.

    python tools/progress_audit.py                       # every chapter (as long as make test)
    python tools/progress_audit.py training decoding     # some chapters, by stem
    python tools/progress_audit.py --out results/progress-audit/cells.jsonl

Timings depend on the machine and its load: the list says which cells need a bar on this one.
"""

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbclient
import nbclient.exceptions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import tangle  # noqa: E402 - the chapters in reading order

# A tqdm bar as text ("40%|████      | 4/10 [00:02<00:03, 2.0it/s]") or as a Jupyter widget.
BAR_TEXT = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+(?:\.\d+)?(?:it|s)/(?:s|it)\]")
WIDGET = "application/vnd.jupyter.widget-view+json"


def shows_progress(outputs: list) -> bool:
    """Whether a cell's outputs hold a tqdm bar, as text (a stream or a display) or a widget."""
    for output in outputs:
        if output.get("output_type") == "stream" and BAR_TEXT.search(output.get("text", "")):
            return True
        data = output.get("data", {})
        if WIDGET in data or BAR_TEXT.search(str(data.get("text/plain", ""))):
            return True
    return False


def audit_chapter(chapter: Path, timeout: int) -> list[dict]:
    """Execute ``chapter`` and return one record per code cell: its time and whether it showed
    progress."""
    notebook = jupytext.read(chapter)
    started: dict[int, float] = {}
    records: list[dict] = []

    def on_start(cell, cell_index):
        started[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index, execute_reply):
        seconds = time.perf_counter() - started[cell_index]
        records.append(
            {
                "chapter": chapter.stem,
                "cell": cell_index,
                "seconds": round(seconds, 1),
                "progress": shows_progress(cell.get("outputs", [])),
                "first_line": cell.source.strip().splitlines()[0][:80] if cell.source else "",
            }
        )

    client = nbclient.NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(chapter.parent)}},
        on_cell_start=on_start,
        on_cell_executed=on_executed,
    )
    client.execute()
    return records


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/progress_audit.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("chapters", nargs="*", help="chapter stems (default: every chapter)")
    parser.add_argument("--seconds", type=float, default=5.0, help="a long cell (default 5 s)")
    parser.add_argument("--out", type=Path, help="write every cell's record here (JSON lines)")
    parser.add_argument("--timeout", type=int, default=900, help="per cell, in seconds")
    args = parser.parse_args()
    chapters = tangle.chapters_in_order(ROOT)
    if args.chapters:
        unknown = set(args.chapters) - {c.stem for c in chapters}
        if unknown:
            parser.error(f"no chapter named {', '.join(sorted(unknown))} in _toc.yml")
        chapters = [c for c in chapters if c.stem in args.chapters]
    os.environ.pop("TRANSFORMER_LIB_BOOK_BUILD", None)  # the reader's settings: bars on
    os.environ["TRANSFORMER_LIB_RUNS"] = tempfile.mkdtemp(prefix="cold-runs-")
    records = []
    failed = []
    for chapter in chapters:
        try:
            records += audit_chapter(chapter, args.timeout)
        except nbclient.exceptions.CellExecutionError as err:  # the rest are still audited
            failed.append(chapter.stem)
            print(f"{chapter.stem}: a cell failed: {str(err).splitlines()[-1]}", flush=True)
            continue
        silent = [r for r in records if r["chapter"] == chapter.stem and not r["progress"]]
        longest = max((r["seconds"] for r in silent), default=0.0)
        print(f"{chapter.stem}: longest cell without a bar {longest:.0f} s", flush=True)
    if args.out:
        from transformer_lib.provenance import environment, write_json, write_text_atomically

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(args.out, "".join(json.dumps(r) + "\n" for r in records))
        command = shlex.join(["python", "tools/progress_audit.py", *sys.argv[1:]])
        manifest = {**environment("cpu"), "command": command, "seconds": args.seconds}
        write_json(args.out.with_suffix(".manifest.json"), manifest)
    long_and_silent = [r for r in records if r["seconds"] > args.seconds and not r["progress"]]
    for r in long_and_silent:
        print(f"  {r['chapter']} cell {r['cell']}: {r['seconds']:.0f} s, no bar: {r['first_line']}")
    print(f"{len(long_and_silent)} cell(s) over {args.seconds:g} s without a progress bar")
    if failed:
        print(f"failed before their end (not audited after the failing cell): {', '.join(failed)}")
    return 1 if long_and_silent or failed else 0


if __name__ == "__main__":
    sys.exit(main())
