"""Part I is written for a student: each chapter opens with two to four things the reader will be
able to do and closes its reading with "Check your understanding", two or three questions whose
answers are folded; the part stays within its word budget. Read from the chapters' Markdown; and
the rules that read them can fail."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
PART_ONE = [Path(entry["file"]).name for entry in TOC["parts"][0]["chapters"]]
BUDGET = ROOT.parent / "shared" / "tools" / "book_budget.py"
ANSWER = ":::{admonition} Answer\n:class: dropdown\n"


def shape_problems(text: str) -> list[str]:
    """What a Part I chapter lacks: its goals, or its questions with folded answers."""
    problems = []
    goals = re.search(r"^After this chapter you can:\n\n((?:- .*\n(?:  .*\n)*)+)", text, re.M)
    count = len(re.findall(r"^- ", goals[1], re.M)) if goals else 0
    if not 2 <= count <= 4:
        problems.append(f"{count} goals under 'After this chapter you can:' (two to four)")
    check = text.partition("\n## Check your understanding\n")[2].split("\n## ")[0]
    questions = re.findall(r"^\*\*\d\.\*\* ", check, re.M)
    if not 2 <= len(questions) <= 3:
        problems.append(f"{len(questions)} questions to check understanding (two or three)")
    if check.count(ANSWER) != len(questions):
        problems.append("each question has one answer, folded")
    return problems


@pytest.mark.parametrize("chapter", PART_ONE)
def test_a_part_one_chapter_opens_with_goals_and_checks_understanding(chapter):
    assert shape_problems((ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")) == []


def test_the_shape_check_sees_what_is_missing():
    goals = "After this chapter you can:\n\n- read it;\n- say it.\n\n"
    answer = f"{ANSWER}Because.\n:::\n\n"
    check = "## Check your understanding\n\n" + "".join(
        f"**{n}.** Why?\n\n{answer}" for n in (1, 2)
    )
    good = f"# A chapter\n\n{goals}Text.\n\n{check}## Exercises\n"
    assert shape_problems(good) == []
    assert "goals" in shape_problems(good.replace("- say it.\n", ""))[0]
    assert "questions" in shape_problems(good.replace("**2.** Why?", "Why?"))[0]
    assert shape_problems(good.replace(":class: dropdown\n", "", 1)) == [
        "each question has one answer, folded"
    ]


@pytest.mark.skipif(not BUDGET.is_file(), reason="the budgets live in ../shared/tools")
def test_part_one_stays_within_its_words():
    done = subprocess.run(
        [sys.executable, str(BUDGET)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    over = re.findall(r"^ +Part I: .* > .*$", done.stdout, re.M)  # under "over budget:"
    assert over == [], over
