"""The website build executes every chapter and fails, naming the chapter and cell, on an error."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_chapter, write_toc

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"


def build(book: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JUPYTER_BOOK, "build", "--all", str(book)], capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def throwaway_book(tmp_path, root) -> Path:
    """A copy of our _config.yml (and the extension it loads) with a tiny book of its own."""
    shutil.copy(root / "_config.yml", tmp_path / "_config.yml")
    shutil.copytree(root / "_ext", tmp_path / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    write_chapter(tmp_path / "book/intro.md", "Intro", "print('hello')")
    return tmp_path


@pytest.mark.slow
def test_a_raising_cell_fails_the_build_naming_chapter_and_cell(throwaway_book):
    write_chapter(
        throwaway_book / "book/broken.md",
        "Broken",
        "x = 1",
        "raise RuntimeError('deliberate failure in the second cell')",
    )
    write_toc(throwaway_book, "book/intro", "book/broken")
    result = build(throwaway_book)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "book/broken.md" in output  # the chapter
    assert "raise RuntimeError('deliberate failure in the second cell')" in output  # the cell
    assert "In[2]" in output  # and its position


@pytest.mark.slow
def test_a_sound_book_builds_and_executes(throwaway_book):
    """The same configuration builds when nothing raises, and the cell output is in the page."""
    write_chapter(throwaway_book / "book/fine.md", "Fine", "print(6 * 7)")
    write_toc(throwaway_book, "book/intro", "book/fine")
    result = build(throwaway_book)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    page = (throwaway_book / "_build/html/book/fine.html").read_text(encoding="utf-8")
    assert "42" in page  # executed at build time, not copied from a stored output
