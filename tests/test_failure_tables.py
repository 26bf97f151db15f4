"""The chapters of Part II end with a table of failure modes whose every row names a test of this
suite: read here from the chapters' text, without executing them, by the rule that
``failure_table`` applies when a chapter runs; and that rule can fail."""

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


@pytest.mark.parametrize("chapter", PART_II)
def test_the_chapter_ends_with_failure_modes_that_name_real_tests(chapter):
    text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    section = text.split("\n## Failure modes\n")[1]
    later = re.findall(r"^## (.+)$", section, flags=re.MULTILINE)
    assert later in ([], ["Exercises"]), f"sections after the failure modes: {later}"
    named = NAMED.findall(section)
    assert len(named) >= 4 and len(named) == len(set(named))
    missing = [test for test in named if not is_a_test(test, ROOT)]
    assert not missing, f"{chapter}.md names tests that do not exist: {missing}"


def test_a_row_that_names_no_test_is_refused():
    assert is_a_test("tests/test_training.py::test_rate_is_formula_3", ROOT)
    assert not is_a_test("tests/test_training.py::test_that_was_renamed", ROOT)
    assert not is_a_test("tests/test_training.py::run", ROOT)  # a helper, not a test
    assert not is_a_test("tests/test_nothing.py::test_x", ROOT)
    assert not is_a_test("book/training.md::test_x", ROOT)
    with pytest.raises(ValueError, match="test_that_was_renamed"):
        failure_table([("a", "b", "tests/test_training.py::test_that_was_renamed")], ROOT)
