"""The chapters of Part II end with a table of failure modes whose every row says what goes wrong,
what you see, what to do, and names a test of this suite: read here from the chapters' Markdown;
and the rules that read them can fail."""

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
# Every chapter of Part II, as the table of contents lists them: a new one needs its table too.
# The summary that opens Part II is no chapter of machinery: its tables are the runs' records.
SUMMARY = "handbook"
PART_II = [
    Path(entry["file"]).name
    for part in TOC["parts"]
    if part.get("caption", "").startswith("Part II")
    for entry in part["chapters"]
    if Path(entry["file"]).name != SUMMARY
]
HEADER = ["what goes wrong", "what you see", "what to do", "the test"]
NAMED = re.compile(r"`(tests/test_\w+\.py::\w+)`")


def is_a_test(test: str, root: Path = ROOT) -> bool:
    """Whether ``test`` (``tests/test_x.py::test_name``) is a test function of ``root``."""
    file, _, name = test.partition("::")
    path = root / file
    if not (name.startswith("test_") and file.startswith("tests/") and path.is_file()):
        return False
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in body)


def table_rows(section: str) -> list[list[str]]:
    """The rows of the section's Markdown table under ``HEADER``, each a list of its cells."""
    lines = [line.strip() for line in section.split("\n") if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
    assert cells and cells[0] == HEADER, f"the table's header is {HEADER}, not {cells[:1]}"
    assert set(lines[1]) <= set("|-: "), "the header's rule follows the header"
    return cells[2:]


def failure_problems(section: str) -> list[str]:
    """What is wrong with a failure-mode section: rows without their four cells, tests named
    outside the table, twice, or not in the suite."""
    rows = table_rows(section)
    short = [row[0] for row in rows if len(row) != 4 or not all(row)]
    named = NAMED.findall(section)
    tests = [NAMED.fullmatch(row[-1]) for row in rows]
    problems = [f"rows without four cells (wrong, see, do, test): {short}"] if short else []
    if not all(tests) or [test[1] for test in tests] != named:
        problems.append("each row's last cell names a test, and the section names no other")
    if len(named) != len(set(named)):
        problems.append("a test is named twice")
    missing = [test for test in named if not is_a_test(test)]
    return problems + ([f"names tests that do not exist: {missing}"] if missing else [])


@pytest.mark.parametrize("chapter", PART_II)
def test_the_chapter_ends_with_failure_modes_that_name_real_tests(chapter):
    text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    section = text.split("\n## Failure modes\n")[1]
    later = re.findall(r"^## (.+)$", section, flags=re.MULTILINE)
    assert later in ([], ["Exercises"]), f"sections after the failure modes: {later}"
    section = section.split("\n## Exercises\n")[0]
    assert len(table_rows(section)) >= 4, "at least four ways it can go wrong"
    assert not failure_problems(section), f"{chapter}.md: {failure_problems(section)}"


def test_a_row_that_names_no_test_is_refused():
    assert is_a_test("tests/test_training.py::test_rate_is_formula_3")
    assert not is_a_test("tests/test_training.py::test_that_was_renamed")
    assert not is_a_test("tests/test_training.py::run")  # a helper, not a test
    assert not is_a_test("tests/test_nothing.py::test_x")
    assert not is_a_test("book/training.md::test_x")
    head = "| " + " | ".join(HEADER) + " |\n|---|---|---|---|\n"
    good = head + "| a | b | c | `tests/test_training.py::test_rate_is_formula_3` |\n"
    assert failure_problems(good) == []
    renamed = good.replace("formula_3", "formula_4")
    assert "do not exist" in failure_problems(renamed)[0]
    # A row of three cells (no "what to do") is refused too, even with a real test.
    assert "four cells" in failure_problems(good.replace("| c |", "|"))[0]
    assert failure_problems(good + good.split("\n")[2] + "\n") == ["a test is named twice"]
    with pytest.raises(AssertionError, match="header"):
        table_rows(good.replace("what to do", "fix"))
