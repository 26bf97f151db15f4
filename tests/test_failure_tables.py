"""The chapters of Part II end with a table of failure modes whose every row says what goes wrong,
what you see, what to do, and names a test of this suite: read here from the chapters' text,
without executing them, by the rules that ``failure_table`` applies when a chapter runs; and those
rules can fail."""

import ast
import re
from pathlib import Path

import pytest
import yaml

from transformer_lib.book.tables import failure_table, is_a_test

ROOT = Path(__file__).resolve().parent.parent
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
# Every chapter of Part II, as the table of contents lists them: a new one needs its table too.
PART_II = [
    Path(entry["file"]).name
    for part in TOC["parts"]
    if part.get("caption", "").startswith("Part II")
    for entry in part["chapters"]
]
NAMED = re.compile(r"tests/test_\w+\.py::\w+")
# A cell's source, after its short options (``:tags: [hide-input]`` collapses it on the website).
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?::[^\n]*\n)*(.*?)^```", flags=re.M | re.S)


def table_rows(section: str) -> list[tuple]:
    """The rows given to ``failure_table`` in the code cells of ``section``, read with ``ast``."""
    rows = []
    for source in CELL.findall(section):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "failure_table":
                rows += ast.literal_eval(node.args[0])
    return rows


@pytest.mark.parametrize("chapter", PART_II)
def test_the_chapter_ends_with_failure_modes_that_name_real_tests(chapter):
    text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    section = text.split("\n## Failure modes\n")[1]
    later = re.findall(r"^## (.+)$", section, flags=re.MULTILINE)
    assert later in ([], ["Exercises"]), f"sections after the failure modes: {later}"
    named = NAMED.findall(section)
    assert len(named) >= 4 and len(named) == len(set(named))
    rows = table_rows(section)
    assert [row[-1] for row in rows] == named, "every test the section names is a row's"
    short = [row[0] for row in rows if len(row) != 4 or not all(cell.strip() for cell in row)]
    assert not short, f"rows without four cells (wrong, see, do, test): {short}"
    missing = [test for test in named if not is_a_test(test, ROOT)]
    assert not missing, f"{chapter}.md names tests that do not exist: {missing}"


def test_a_row_that_names_no_test_is_refused():
    assert is_a_test("tests/test_training.py::test_rate_is_formula_3", ROOT)
    assert not is_a_test("tests/test_training.py::test_that_was_renamed", ROOT)
    assert not is_a_test("tests/test_training.py::run", ROOT)  # a helper, not a test
    assert not is_a_test("tests/test_nothing.py::test_x", ROOT)
    assert not is_a_test("book/training.md::test_x", ROOT)
    with pytest.raises(ValueError, match="test_that_was_renamed"):
        failure_table([("a", "b", "c", "tests/test_training.py::test_that_was_renamed")], ROOT)
    # A row of three cells (no "what to do") is refused too, even with a real test.
    with pytest.raises(ValueError, match="four cells"):
        failure_table([("a", "b", "tests/test_training.py::test_rate_is_formula_3")], ROOT)
    row = ("a", "b", "c", "tests/test_training.py::test_rate_is_formula_3")
    assert "| a | b | c | `tests/test_training.py::test_rate_is_formula_3` |" in (
        failure_table([row], ROOT).data
    )
