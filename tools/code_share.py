"""How much of each chapter is code: the code a reader sees, and all the code a notebook holds.

Two shares of a chapter's non-blank lines (the jupytext header left out):

- **visible**: code cells that are shown expanded on the website. A cell is collapsed or removed
  there by a tag (``hide-input``, ``hide-cell``, ``remove-input``, ``remove-cell``);
- **all code**: every code cell, collapsed or not. In Jupyter the website's collapsed cells are
  ordinary cells, so this is the share of code a reader meets who runs the chapter as a notebook.

A docstring is counted as prose, wherever it stands: it is the documentation of the exported
names (the API reference page is written from it), read as text, not as code.

Part I keeps visible code at or below ``--visible`` and all code at or below ``--all`` of each
chapter: the idea being taught is expanded, plumbing lives in Part II and is imported.

    python tools/code_share.py              # a table of every chapter in _toc.yml
    python tools/code_share.py --check      # fail when a Part I chapter is over either limit
"""

import argparse
import ast
import sys
from pathlib import Path

import jupytext
import yaml

ROOT = Path(__file__).resolve().parents[1]
HIDING_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
VISIBLE_LIMIT = 0.45  # Part I's largest share of visible code
ALL_CODE_LIMIT = 0.55  # Part I's largest share of code, collapsed cells counted
# Part I chapters the limits do not hold for yet, each with the reason.
EXCEPTIONS: dict[str, str] = {}


def parts(toc: dict) -> list[tuple[str, list[str]]]:
    """(caption, chapter paths) for each part of the table of contents, the root in the first."""
    found = []
    for number, part in enumerate(toc.get("parts", [{"chapters": toc.get("chapters", [])}])):
        files = [entry["file"] for entry in part["chapters"]]
        if number == 0:
            files.insert(0, toc["root"])
        found.append((part.get("caption", ""), files))
    return found


def docstring_lines(source: str) -> int:
    """Non-blank lines of the docstrings in a code cell's source (0 when it does not parse, as a
    cell with IPython's magics does not)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    lines = source.splitlines()
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    span = lines[first.lineno - 1 : first.end_lineno]
                    found += sum(1 for line in span if line.strip())
    return found


def count(chapter: Path) -> dict:
    """Non-blank lines of prose, of visible code and of collapsed or removed code, and the two
    shares: ``visible_share`` (visible code) and ``code_share`` (all code)."""
    notebook = jupytext.read(chapter)
    counts = {"prose": 0, "visible": 0, "hidden": 0}
    for cell in notebook.cells:
        lines = sum(1 for line in cell.source.splitlines() if line.strip())
        if cell.cell_type != "code":
            counts["prose"] += lines
            continue
        documentation = docstring_lines(cell.source)
        counts["prose"] += documentation
        if HIDING_TAGS & set(cell.metadata.get("tags", [])):
            counts["hidden"] += lines - documentation
        else:
            counts["visible"] += lines - documentation
    counts["total"] = sum(counts.values())
    total = max(counts["total"], 1)
    counts["visible_share"] = counts["visible"] / total
    counts["code_share"] = (counts["visible"] + counts["hidden"]) / total
    return counts


def over_limits(name: str, c: dict, visible: float, all_code: float) -> list[str]:
    """The limits a Part I chapter exceeds, as text (none for an exception)."""
    if name in EXCEPTIONS:
        return []
    problems = []
    if c["visible_share"] > visible:
        problems.append(f"{name}: {c['visible_share']:.1%} visible code (limit {visible:.0%})")
    if c["code_share"] > all_code:
        problems.append(f"{name}: {c['code_share']:.1%} code in all (limit {all_code:.0%})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visible", type=float, default=VISIBLE_LIMIT, help="visible code")
    parser.add_argument("--all", type=float, default=ALL_CODE_LIMIT, help="all code")
    parser.add_argument("--check", action="store_true", help="exit 1 when over a limit")
    args = parser.parse_args()
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    over = []
    print(
        f"{'chapter':28} {'lines':>6} {'prose':>6} {'code':>6} {'hidden':>6} "
        f"{'visible %':>9} {'all code %':>10}"
    )
    for number, (caption, files) in enumerate(parts(toc)):
        print(f"-- {caption or 'chapters'}")
        for name in files:
            c = count(ROOT / f"{name}.md")
            note = "  (not held: see EXCEPTIONS)" if number == 0 and name in EXCEPTIONS else ""
            print(
                f"{name:28} {c['total']:6d} {c['prose']:6d} {c['visible']:6d} {c['hidden']:6d} "
                f"{c['visible_share']:9.0%} {c['code_share']:10.0%}{note}"
            )
            if number == 0:
                over += over_limits(name, c, args.visible, args.all)
    if args.check and over:
        print("over the limits:\n  " + "\n  ".join(over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
