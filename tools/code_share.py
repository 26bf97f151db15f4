"""How much of each chapter a reader sees as code: visible code lines against all its lines.

A code cell is visible unless a tag collapses or removes its input (``hide-input``,
``hide-cell``, ``remove-input``, ``remove-cell``). Lines are counted without the file's jupytext
header and without blank lines. The book's Part I keeps visible code at or below ``--limit`` of
a chapter (the idea being taught is expanded; plumbing is imported or collapsed).

    python tools/code_share.py              # a table of every chapter in _toc.yml
    python tools/code_share.py --check      # fail when a Part I chapter is over the limit
"""

import argparse
import sys
from pathlib import Path

import jupytext
import yaml

ROOT = Path(__file__).resolve().parents[1]
HIDING_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def parts(toc: dict) -> list[tuple[str, list[str]]]:
    """(caption, chapter paths) for each part of the table of contents, the root in the first."""
    found = []
    for number, part in enumerate(toc.get("parts", [{"chapters": toc.get("chapters", [])}])):
        files = [entry["file"] for entry in part["chapters"]]
        if number == 0:
            files.insert(0, toc["root"])
        found.append((part.get("caption", ""), files))
    return found


def count(chapter: Path) -> dict:
    """Non-blank lines of prose, of visible code and of collapsed or removed code."""
    notebook = jupytext.read(chapter)
    counts = {"prose": 0, "visible": 0, "hidden": 0}
    for cell in notebook.cells:
        lines = sum(1 for line in cell.source.splitlines() if line.strip())
        if cell.cell_type != "code":
            counts["prose"] += lines
        elif HIDING_TAGS & set(cell.metadata.get("tags", [])):
            counts["hidden"] += lines
        else:
            counts["visible"] += lines
    counts["total"] = sum(counts.values())
    counts["share"] = counts["visible"] / max(counts["total"], 1)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=0.45, help="Part I's largest share")
    parser.add_argument("--check", action="store_true", help="exit 1 when over the limit")
    args = parser.parse_args()
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    over = []
    print(f"{'chapter':28} {'lines':>6} {'prose':>6} {'code':>6} {'hidden':>6} {'code %':>7}")
    for number, (caption, files) in enumerate(parts(toc)):
        print(f"-- {caption or 'chapters'}")
        for name in files:
            path = ROOT / f"{name}.md"
            c = count(path)
            print(
                f"{name:28} {c['total']:6d} {c['prose']:6d} {c['visible']:6d} "
                f"{c['hidden']:6d} {c['share']:7.0%}"
            )
            if number == 0 and c["share"] > args.limit:
                over.append(f"{name} ({c['share']:.0%})")
    if args.check and over:
        print(f"over {args.limit:.0%} visible code: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
