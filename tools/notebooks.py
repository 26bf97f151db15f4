"""Write each chapter as a Jupyter notebook (.ipynb) into _build/notebooks/, for readers who prefer
notebooks to the Markdown chapters.

Each notebook starts with the set-up cell the website's notebooks have (_ext/notebook_setup.py):
run from _build/notebooks/ it finds the clone around it and works from book/, so the chapter reads
../results as it does there. The copies live where neither the tests nor the book's build read
them. A notebook already there that differs from what the chapter gives (a reader ran or edited
it) is kept, and named; --force writes it again.

    python tools/notebooks.py            # make notebooks
    python tools/notebooks.py --force    # make notebooks FORCE=1
"""

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))
import book_site  # noqa: E402 - the site's extension: the set-up cell
import tangle  # noqa: E402 - the chapters in reading order

OUT = ROOT / "_build" / "notebooks"


def published_source() -> str:
    """The archive of the repository named in _config.yml, at its branch."""
    repository = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return book_site.archive_url(repository["url"], repository.get("branch", "main"))


def chapter_notebook(chapter: Path) -> str:
    """The chapter as notebook JSON, its first cell the set-up."""
    notebook = jupytext.read(chapter)
    setup = book_site.setup_cell_source(source=published_source())
    notebook.cells.insert(0, nbformat.v4.new_code_cell(setup, metadata={"tags": ["setup"]}))
    for number, cell in enumerate(notebook.cells):  # the same ids each time: a rerun compares
        cell["id"] = f"cell-{number}"
    return jupytext.writes(notebook, fmt="ipynb")


def write_notebooks(out: Path = OUT, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Write every chapter's notebook into ``out``; return (written, kept)."""
    out.mkdir(parents=True, exist_ok=True)
    written, kept = [], []
    for chapter in tangle.chapters_in_order(ROOT):
        path = out / f"{chapter.stem}.ipynb"
        text = chapter_notebook(chapter)
        if path.is_file() and path.read_text(encoding="utf-8") != text and not force:
            kept.append(path)
            continue
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=OUT, help="the folder (default _build/notebooks)"
    )
    parser.add_argument("--force", action="store_true", help="write over notebooks that differ")
    args = parser.parse_args(argv)
    written, kept = write_notebooks(args.out, args.force)
    print(f"notebooks: {len(written)} written into {args.out}")
    for path in kept:
        print(
            f"notebooks: kept {path.name}: it differs from its chapter (run or edited); "
            "make notebooks FORCE=1 writes it again"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
