"""Every chapter in _toc.yml executes top to bottom: a cell that raises fails its test.

The notebooks are read with jupytext and run with nbclient, in the chapter's own folder, as
Jupyter Book runs them. `make book` executes them again while building the website.
"""

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
    try:
        execute(chapter)
    except CellExecutionError as err:
        pytest.fail(f"{chapter.name} failed while executing a cell:\n{err}", pytrace=False)


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
