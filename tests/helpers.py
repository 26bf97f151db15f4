"""Small helpers the tests share: writing throw-away books, comparing tensors exactly."""

from pathlib import Path

import torch

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def code_cell(source: str) -> str:
    return f"```{{code-cell}} ipython3\n{source.strip()}\n```\n"


def write_chapter(path: Path, title: str, *cells: str) -> Path:
    """A MyST notebook with a title and the given code cells, separated by prose."""
    body = "\n".join(f"Some prose.\n\n{code_cell(cell)}" for cell in cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{HEADER}\n# {title}\n\n{body}", encoding="utf-8")
    return path


def write_toc(root: Path, *chapters: str) -> None:
    """A Jupyter Book table of contents: the first chapter is the root page."""
    lines = ["format: jb-book", f"root: {chapters[0]}"]
    if len(chapters) > 1:
        lines.append("chapters:")
        lines += [f"  - file: {name}" for name in chapters[1:]]
    (root / "_toc.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def assert_close(actual, expected, atol=1e-10):
    """Equal within ``atol`` and no relative slack: for float64 comparisons with a reference."""
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=atol)
