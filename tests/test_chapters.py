"""Every chapter in _toc.yml executes top to bottom: a cell that raises fails its test.

Each chapter is executed the way the book build executes it (MyST-NB's reader, its own folder as
working directory, the book's timeout) and the execution is stored in the build's jupyter-cache
(tools/book_cache.py), so that `make book` after `make test` does not run the chapters again. A
chapter already cached for the current code, library and results passed this test before.
"""

import book_cache
import jupytext
import nbclient
import pytest
import tangle
from nbclient.exceptions import CellExecutionError

CHAPTERS = tangle.chapters_in_order(tangle.Path(__file__).resolve().parent.parent)


def execute(path, timeout=900):
    notebook = jupytext.read(path)
    client = nbclient.NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return notebook


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_chapter_executes(chapter):
    if book_cache.is_cached(chapter):
        return  # executed successfully with this very code and these inputs
    error = book_cache.execute_and_cache(chapter)
    if error is not None:
        pytest.fail(f"{chapter.name} failed while executing a cell:\n{error}", pytrace=False)
    assert book_cache.is_cached(chapter)  # the build will find it


def test_every_chapter_is_a_myst_notebook(root):
    """Chapters are Markdown notebooks with a jupytext header; no .ipynb is kept in book/."""
    assert CHAPTERS, "_toc.yml names no chapter"
    for chapter in CHAPTERS:
        assert chapter.suffix == ".md", f"{chapter} is not a MyST Markdown chapter"
        header = chapter.read_text(encoding="utf-8").split("---")[1]
        assert "format_name: myst" in header and "kernelspec" in header, chapter
    assert not list((root / "book").rglob("*.ipynb"))


def test_a_failing_cell_fails_execution_and_names_it(tmp_path):
    from helpers import write_chapter

    chapter = write_chapter(
        tmp_path / "broken.md", "Broken", "x = 1", "raise ValueError('cell two')"
    )
    with pytest.raises(CellExecutionError, match="cell two"):
        execute(chapter, timeout=120)


def test_a_changed_library_empties_the_book_cache(tmp_path, monkeypatch):
    """The cache is keyed on the library and results too, not only on a chapter's code."""
    (tmp_path / "transformer_lib").mkdir()
    module = tmp_path / "transformer_lib" / "model.py"
    module.write_text("x = 1\n")
    (tmp_path / "_config.yml").write_text("execute: {}\n")
    monkeypatch.setattr(book_cache, "ROOT", tmp_path)
    monkeypatch.setattr(book_cache, "CACHE", tmp_path / "_build" / ".jupyter_cache")
    monkeypatch.setattr(book_cache, "STAMP", book_cache.CACHE / "inputs.sha256")
    assert book_cache.refresh()  # a new cache
    marker = book_cache.CACHE / "an-execution"
    marker.write_text("kept while nothing changes")
    assert not book_cache.refresh() and marker.exists()
    module.write_text("x = 2\n")
    assert book_cache.refresh() and not marker.exists()
