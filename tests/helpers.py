"""Small helpers the tests share: the data, throw-away books, comparing tensors exactly."""

import os
from pathlib import Path

import pytest
import torch

# The Multi30k copy the tests read: $TRANSFORMER_LIB_DATA, else ../shared/data/multi30k.
MULTI30K = Path(
    os.environ.get("TRANSFORMER_LIB_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
)


def require_multi30k() -> Path:
    """The Multi30k folder; a test that needs it fails (never skips) when the files are missing,
    so that a run without the data cannot pass by testing less."""
    if not (MULTI30K / "train.de.gz").is_file():
        pytest.fail(
            f"the Multi30k files are missing from {MULTI30K}: set TRANSFORMER_LIB_DATA to a folder "
            "that holds them (the Makefile uses ../shared/data/multi30k when it exists)",
            pytrace=False,
        )
    return MULTI30K


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
