"""Part I reads as the paper, on the website and in Jupyter: the code a reader sees expanded stays
a minority of each chapter, and so does all its code, collapsed cells counted."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import code_share  # noqa: E402

PART_ONE = code_share.parts(yaml.safe_load((ROOT / "_toc.yml").read_text()))[0][1]


@pytest.mark.parametrize("chapter", PART_ONE)
def test_a_part_one_chapter_keeps_both_limits(chapter):
    if chapter in code_share.EXCEPTIONS:
        pytest.skip(code_share.EXCEPTIONS[chapter])
    c = code_share.count(ROOT / f"{chapter}.md")
    assert c["visible_share"] <= code_share.VISIBLE_LIMIT, f"{c['visible_share']:.1%} visible"
    assert c["code_share"] <= code_share.ALL_CODE_LIMIT, f"{c['code_share']:.1%} code in all"


def test_the_exceptions_are_part_one_chapters_and_say_why():
    assert set(code_share.EXCEPTIONS) <= set(PART_ONE)
    assert all(reason.strip() for reason in code_share.EXCEPTIONS.values())


def test_collapsed_cells_count_as_code(tmp_path):
    """Two measures of one chapter: the collapsed cell is left out of the visible share only."""
    from helpers import write_chapter

    # Two cells, each after a line of prose; the second collapsed on the website.
    chapter = write_chapter(
        tmp_path / "chapter.md", "A chapter", "x = 1", ":tags: [hide-input]\n\ny = 2"
    )
    c = code_share.count(chapter)
    assert (c["prose"], c["visible"], c["hidden"]) == (3, 1, 1)  # the title and two lines
    assert c["visible_share"] == 1 / 5 and c["code_share"] == 2 / 5
    assert code_share.over_limits("book/x", c, visible=0.45, all_code=0.35)  # 40% > 35%
    assert not code_share.over_limits("book/x", c, visible=0.45, all_code=0.4)


def test_the_command_line_check_passes():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "code_share.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_docstring_counts_as_prose(tmp_path):
    """The documentation of an exported function is read as text, its body as code."""
    from helpers import write_chapter

    cell = 'def f():\n    """What f does,\n\n    in two lines."""\n    return 1'
    chapter = write_chapter(tmp_path / "chapter.md", "A chapter", cell, "%time f()")
    c = code_share.count(chapter)
    # the title and two lines of prose, two of docstring; the def, the return and the magic
    assert (c["prose"], c["visible"], c["hidden"]) == (5, 3, 0)
