"""Tangle the book into the library: copy every exported code cell of book/ into transformer_lib/.

A code cell whose first line is ``#| export: <module>`` is copied, in book order (the order of
``_toc.yml``), into ``transformer_lib/<module>.py``; a dotted name writes into a subpackage, as nbdev
does (``#| export: book.charts`` writes ``transformer_lib/book/charts.py``). Every generated module
starts with a header that names its chapter(s) and says to edit the book instead; each copied cell
is preceded by a marker giving the chapter, line and cell it came from. Every module of the library
ends with its ``__all__``: the names the API page (``book/api.md``) documents for it, in book order,
so that the page and the surface are one list. The book's own machinery (``book.*``) is no API: its
chapters import what they use by name, and it declares no ``__all__``.

Rules (each is an error with a message that names the place):

* exported cells hold imports, constants, ``def`` and ``class`` only (demonstrations stay in the book);
* a top-level name defined twice in one module is an error, and so is a name the API page
  documents that no chapter defines;
* a file in ``transformer_lib/`` that no chapter generates is an error, except the hand-written
  package plumbing: each package's ``__init__.py`` (a subpackage the tangle writes into must have
  one) and ``__main__.py``;
* ``--check`` regenerates everything in memory and fails, naming the file, when the library on
  disk differs from the book. It reads only the working tree, never git.

Usage::

    python tools/tangle.py            # rewrite transformer_lib/ from the book
    python tools/tangle.py --check    # fail if transformer_lib/ is not what the book generates
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext
import yaml

PACKAGE = "transformer_lib"
# Hand-written files that no chapter generates: the packages' markers and the `python -m` entry
# point.
HAND_WRITTEN_NAMES = frozenset({"__init__.py", "__main__.py"})
EXPORT_RE = re.compile(r"^#\|\s*export:\s*(?P<module>\S*)\s*$")
MODULE_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
# What an exported cell may contain at top level: the reusable part of a chapter, nothing that runs.
ALLOWED_STATEMENTS = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


class TangleError(Exception):
    """The book cannot be tangled, or the library differs from it; the message says where."""


@dataclass(frozen=True)
class ExportedCell:
    chapter: str  # path relative to the book root, e.g. "book/attention.md"
    line: int  # 1-based line in the chapter where the cell's code starts
    index: int  # 1-based index of the cell in the notebook jupytext reads
    module: str
    code: str  # the cell's source without the export line

    @property
    def origin(self) -> str:
        return f"{self.chapter}:{self.line} (cell {self.index})"


def module_file(module: str) -> str:
    """The file a module name is written to, relative to the package: ``book.charts`` ->
    ``book/charts.py``."""
    return module.replace(".", "/") + ".py"


def _is_hand_written(rel: str) -> bool:
    """Whether ``rel`` (relative to the package) is plumbing written by hand: any package's
    ``__init__.py``, and the top level's ``__main__.py``."""
    return Path(rel).name == "__init__.py" or rel == "__main__.py"


def chapters_in_order(root: Path) -> list[Path]:
    """The chapter files named in ``_toc.yml``, in reading order."""
    toc_path = root / "_toc.yml"
    if not toc_path.is_file():
        raise TangleError(f"{toc_path} not found: the tangle reads the chapters from _toc.yml")
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8")) or {}
    names: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    names.append(node[key])
            for key in ("chapters", "sections", "parts"):
                for child in node.get(key) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(toc)
    paths = []
    for name in names:
        candidates = (
            [root / name] if Path(name).suffix else [root / f"{name}.md", root / f"{name}.ipynb"]
        )
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise TangleError(f"_toc.yml names {name!r}, but no such chapter file exists")
        paths.append(found)
    return paths


def _line_of(text: str, code: str, start: int) -> tuple[int, int]:
    """Line number (1-based) where ``code`` first occurs in ``text`` at or after offset ``start``."""
    first = code.splitlines()[0] if code else ""
    pos = text.find(first, start)
    if pos < 0:  # jupytext normalised something; fall back to the last known place
        pos = start
    return text.count("\n", 0, pos) + 1, pos + len(first)


def exported_cells(root: Path, chapter: Path) -> list[ExportedCell]:
    """The exported code cells of one chapter, in order."""
    rel = chapter.relative_to(root).as_posix()
    text = chapter.read_text(encoding="utf-8")
    notebook = jupytext.reads(text, fmt=chapter.suffix.lstrip("."))
    cells = []
    cursor = 0
    for index, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        source = cell.source
        head, _, body = source.partition("\n")
        line, cursor = _line_of(text, source, cursor)
        match = EXPORT_RE.match(head.strip())
        if head.lstrip().startswith("#|") and "export" in head and match is None:
            raise TangleError(
                f"{rel}:{line}: malformed export line {head!r}; write '#| export: <module>'"
            )
        if match is None:
            continue
        module = match["module"]
        if not MODULE_NAME_RE.match(module) or _is_hand_written(module_file(module)):
            raise TangleError(
                f"{rel}:{line}: {module!r} is not a module the tangle may write; "
                "use a lower-case Python module name such as 'attention' or 'book.charts'"
            )
        cells.append(ExportedCell(rel, line + 1, index, module, body.strip("\n")))
    return cells


def _check_cell(cell: ExportedCell) -> dict[str, int]:
    """Parse one exported cell; return the top-level names it defines, with their lines."""
    try:
        tree = ast.parse(cell.code)
    except SyntaxError as err:
        raise TangleError(
            f"{cell.origin}: exported cell does not parse: {err.msg} (line {err.lineno} of the cell)"
        ) from err
    names: dict[str, int] = {}
    for node in tree.body:
        is_docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not isinstance(node, ALLOWED_STATEMENTS) and not is_docstring:
            raise TangleError(
                f"{cell.origin}: exported cells hold imports, constants, def and class only; "
                f"move the {type(node).__name__} statement on line {node.lineno} of the cell to a cell "
                "without '#| export'"
            )
        defined: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined = [node.name]
        elif isinstance(node, ast.Assign):
            defined = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined = [node.target.id]
        for name in defined:
            if name in names:
                raise TangleError(f"{cell.origin}: {name!r} is defined twice in the same cell")
            names[name] = node.lineno
    return names


API_PAGE = Path("book") / "api.md"
# One entry of the API page: ".. autoclass:: transformer_lib.<module>.<Name>" (or autofunction).
API_ENTRY = re.compile(rf"^\.\. auto(?:class|function):: {PACKAGE}\.(\w+)\.(\w+)$", re.M)


def documented_names(root: Path) -> dict[str, list[str]]:
    """The names the API page documents, by library module; none where the book has no page."""
    page = root / API_PAGE
    found: dict[str, list[str]] = {}
    if page.is_file():
        for module, name in API_ENTRY.findall(page.read_text(encoding="utf-8")):
            found.setdefault(module, []).append(name)
    return found


def header(chapters: list[str]) -> str:
    sources = ", ".join(chapters)
    return (
        f"# Generated by tools/tangle.py from {sources}.\n"
        "# Do not edit this file: edit the book, then run `make tangle` (python tools/tangle.py).\n"
    )


def render(root: Path) -> dict[str, str]:
    """Generate every library module from the book: ``{"attention.py": source, ...}``."""
    by_module: dict[str, list[ExportedCell]] = {}
    for chapter in chapters_in_order(root):
        for cell in exported_cells(root, chapter):
            by_module.setdefault(cell.module, []).append(cell)

    modules, documented = {}, documented_names(root)
    for module, cells in by_module.items():
        defined_at: dict[str, str] = {}
        for cell in cells:
            for name, line in _check_cell(cell).items():
                where = f"{cell.chapter}:{cell.line + line - 1}"
                if name in defined_at:
                    raise TangleError(
                        f"{where}: {name!r} is already defined for {PACKAGE}/{module}.py at "
                        f"{defined_at[name]}; rename one of them"
                    )
                defined_at[name] = where
        undefined = [name for name in documented.get(module, []) if name not in defined_at]
        if undefined:
            raise TangleError(
                f"{API_PAGE} documents {', '.join(f'{PACKAGE}.{module}.{n}' for n in undefined)}"
                ", which no chapter defines: export it or drop its entry"
            )
        chapters = list(dict.fromkeys(cell.chapter for cell in cells))
        parts = [header(chapters)]
        for cell in cells:
            parts.append(f"\n\n# %% {cell.origin}\n{cell.code}\n")
        if not module.startswith("book."):  # the library: its surface is the API page's
            parts.append(all_statement([n for n in defined_at if n in documented.get(module, [])]))
        modules[module_file(module)] = "".join(parts)
    return modules


LINE_LENGTH = 100  # ruff's line-length (pyproject.toml): the generated modules are ruff-formatted


def all_statement(names: list[str]) -> str:
    """The module's closing ``__all__`` as ruff format writes it: on one line where it fits, else
    one name a line."""
    if not names:
        return "\n\n__all__: list[str] = []\n"
    one_line = "__all__ = [" + ", ".join(f'"{name}"' for name in names) + "]"
    if len(one_line) <= LINE_LENGTH:
        return f"\n\n{one_line}\n"
    lines = "".join(f'    "{name}",\n' for name in names)
    return f"\n\n__all__ = [\n{lines}]\n"


def orphans(library: Path, generated: dict[str, str]) -> list[str]:
    """Python files in the library that no chapter generates (sub-packages included)."""
    found = []
    for path in sorted(library.rglob("*.py")):
        rel = path.relative_to(library).as_posix()
        if rel not in generated and not _is_hand_written(rel):
            found.append(f"{PACKAGE}/{rel}")
    return found


def packages_without_marker(library: Path, generated: dict[str, str]) -> list[str]:
    """Subpackages the book writes into that have no hand-written ``__init__.py``."""
    folders = sorted({Path(name).parent for name in generated} - {Path(".")})
    return [
        f"{PACKAGE}/{folder.as_posix()}/ has no __init__.py; write one that says what it holds"
        for folder in folders
        if not (library / folder / "__init__.py").is_file()
    ]


def differences(root: Path, generated: dict[str, str]) -> list[str]:
    """Library files whose content on disk is not what the book generates."""
    library = root / PACKAGE
    stale = []
    for name, source in sorted(generated.items()):
        path = library / name
        if not path.is_file():
            stale.append(f"{PACKAGE}/{name} is missing")
        elif path.read_text(encoding="utf-8") != source:
            stale.append(f"{PACKAGE}/{name} differs from the book")
    return stale


def tangle(root: Path, check: bool = False) -> list[str]:
    """Write (or with ``check``, compare) the generated modules; return the files concerned."""
    generated = render(root)
    library = root / PACKAGE
    problems = [
        f"{name} is not generated by any chapter; delete it or export it from the book"
        for name in orphans(library, generated)
    ] + packages_without_marker(library, generated)
    if check:
        problems += differences(root, generated)
        if problems:
            raise TangleError(
                "the library is out of step with the book:\n  "
                + "\n  ".join(problems)
                + "\nrun `make tangle` and commit the result"
            )
        return sorted(generated)
    if problems:
        raise TangleError("\n".join(problems))
    library.mkdir(exist_ok=True)
    for name, source in generated.items():
        path = library / name
        if not path.is_file() or path.read_text(encoding="utf-8") != source:
            path.write_text(source, encoding="utf-8")
    return sorted(generated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if the library differs from the book"
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the book's root folder (holding _toc.yml); default: this repository",
    )
    args = parser.parse_args(argv)
    try:
        files = tangle(args.root, check=args.check)
    except TangleError as err:
        print(f"tangle: {err}", file=sys.stderr)
        return 1
    verb = "up to date" if args.check else "written"
    print(f"tangle: {len(files)} module(s) {verb}: {', '.join(files) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
