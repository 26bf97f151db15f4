"""The chapters of Part II end with a table of failure modes whose every row says what goes wrong,
what you see and what to do; the appendix page *The failure modes' tests* names, row by row, the
test of this suite that checks it: read here from the Markdown; and the rules that read them can
fail."""

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
# The summary that opens Part II is no chapter of machinery: its tables are the runs' records.
SUMMARY = "handbook"
RECORD = ROOT / "book" / "failure_tests.md"


def has_failure_modes(entry: dict) -> bool:
    return "\n## Failure modes\n" in (ROOT / f"{entry['file']}.md").read_text(encoding="utf-8")


# Every chapter of Part II (a new one needs its table too), and the appendix's that have one.
CHAPTERS = [
    Path(entry["file"]).name
    for part in TOC["parts"]
    for entry in part["chapters"]
    if Path(entry["file"]).name != SUMMARY
    and (
        part["caption"].startswith("Part II")
        or part["caption"].startswith("Appendix")
        and has_failure_modes(entry)
    )
]
HEADER = ["what goes wrong", "what you see", "what to do"]
NAMED = re.compile(r"`(tests/test_\w+\.py::\w+)`")


def is_a_test(test: str, root: Path = ROOT) -> bool:
    """Whether ``test`` (``tests/test_x.py::test_name``) is a test function of ``root``."""
    file, _, name = test.partition("::")
    path = root / file
    if not (name.startswith("test_") and file.startswith("tests/") and path.is_file()):
        return False
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in body)


def table_rows(section: str, header: list[str]) -> list[list[str]]:
    """The rows of the section's Markdown table under ``header``, each a list of its cells."""
    lines = [line.strip() for line in section.split("\n") if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
    assert cells and cells[0] == header, f"the table's header is {header}, not {cells[:1]}"
    assert set(lines[1]) <= set("|-: "), "the header's rule follows the header"
    return cells[2:]


def record_rows(section: str) -> list[tuple[str, str]]:
    """The record's list under a chapter's heading: (what goes wrong, the test's cell) a line."""
    lines = [line[2:] for line in section.split("\n") if line.startswith("- ")]
    return [tuple(line.rpartition(": `tests/")[::2]) for line in lines]


def failure_problems(chapter_section: str, record_section: str) -> list[str]:
    """What is wrong with a chapter's failure modes and their record: rows without their cells,
    rows the record lacks or adds, tests named twice or not in the suite."""
    rows = table_rows(chapter_section, HEADER)
    record = record_rows(record_section)
    short = [row[0] for row in rows if len(row) != 3 or not all(row)]
    problems = [f"rows without three cells (wrong, see, do): {short}"] if short else []
    if [row[0] for row in rows] != [row[0] for row in record]:
        problems.append("the record's rows are not the chapter's rows, in the chapter's order")
    tests = [NAMED.fullmatch(f"`tests/{test}") for _, test in record]
    named = NAMED.findall(record_section)
    if not all(tests) or [test[1] for test in tests] != named:
        problems.append("each line of the record names a test, and the record names no other")
    if len(named) != len(set(named)):
        problems.append("a test is named twice")
    missing = [test for test in named if not is_a_test(test)]
    return problems + ([f"names tests that do not exist: {missing}"] if missing else [])


def record_section(chapter: str) -> str:
    """The part of the appendix page that names the tests of ``chapter``'s failure modes."""
    sections = RECORD.read_text(encoding="utf-8").split(f"\n(failure-tests-{chapter})=\n")
    assert len(sections) == 2, f"{RECORD.name} has no section (failure-tests-{chapter})="
    return sections[1].split("\n(failure-tests-")[0]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chapter_ends_with_failure_modes_whose_tests_are_real(chapter):
    text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    section = text.split("\n## Failure modes\n")[1]
    later = re.findall(r"^## (.+)$", section, flags=re.MULTILINE)
    assert later in ([], ["Exercises"]), f"sections after the failure modes: {later}"
    section = section.split("\n## Exercises\n")[0]
    assert len(table_rows(section, HEADER)) >= 4, "at least four ways it can go wrong"
    assert f"<failure-tests-{chapter}>`" in section, "the section links to its tests"
    assert not failure_problems(section, record_section(chapter)), (
        f"{chapter}.md: {failure_problems(section, record_section(chapter))}"
    )


def test_no_test_is_named_for_two_rows():
    named = NAMED.findall(RECORD.read_text(encoding="utf-8"))
    assert len(named) == len(set(named)), "a test is named for two rows"


def test_a_row_that_names_no_test_is_refused():
    assert is_a_test("tests/test_training.py::test_rate_is_formula_3")
    assert not is_a_test("tests/test_training.py::test_that_was_renamed")
    assert not is_a_test("tests/test_training.py::run")  # a helper, not a test
    assert not is_a_test("tests/test_nothing.py::test_x")
    assert not is_a_test("book/training.md::test_x")
    chapter = "| " + " | ".join(HEADER) + " |\n|---|---|---|\n| a | b | c |\n"
    record = "- a: `tests/test_training.py::test_rate_is_formula_3`\n"
    assert failure_problems(chapter, record) == []
    renamed = record.replace("formula_3", "formula_4")
    assert "do not exist" in failure_problems(chapter, renamed)[0]
    # A row of two cells (no "what to do") is refused, and so is a record that lost a row.
    assert "three cells" in failure_problems(chapter.replace("| c |", "|"), record)[0]
    assert "not the chapter's rows" in failure_problems(chapter + "| d | e | f |\n", record)[0]
    twice = record + record
    assert "a test is named twice" in failure_problems(chapter + "| a | b | c |\n", twice)
    with pytest.raises(AssertionError, match="header"):
        table_rows(chapter.replace("what to do", "fix"), HEADER)
