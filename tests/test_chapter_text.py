"""A chapter's prose says each thing once: no heading twice within one section, no paragraph or
sentence of 80 characters or more twice, no run of WORDS words (80 characters or more) twice,
and no line of prose twice in a row (the marks that a merge or an edit left two copies of a
passage, whole or in part)."""

import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("*.md"))
LONG = 80  # characters from which a repeated paragraph or sentence is a repeat, not a phrase
WORDS = 16  # words in a row from which a repeat inside other sentences is one (a rule restated
# in other words around it is not: its 15 words recur in the real run's two decisions)


def prose(chapter_text: str) -> str:
    """The Markdown cells of a chapter, fenced blocks (code, math, directives) left out."""
    notebook = jupytext.reads(chapter_text, fmt="md:myst")
    cells = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    text = "\n\n".join(cells)
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)


def repeated_headings(text: str) -> list[str]:
    """Headings that appear twice under the same parent heading."""
    found, path, children = [], [], {}
    for hashes, title in re.findall(r"^(#{1,6}) +(.+?)\s*$", text, flags=re.M):
        level = len(hashes)
        path = [(lvl, name) for lvl, name in path if lvl < level]
        siblings = children.setdefault(tuple(path), set())
        if title in siblings:
            found.append(title)
        siblings.add(title)
        path.append((level, title))
    return found


def repeated_passages(text: str) -> list[str]:
    """Paragraphs and sentences of LONG characters or more that appear twice, and lines of prose
    that follow an identical line."""
    found = []
    blocks = [" ".join(b.split()) for b in re.split(r"\n\s*\n", text) if b.strip()]
    paragraphs = [b for b in blocks if not b.startswith(("#", "|", "$$", ":::"))]
    sentences = [s for p in paragraphs for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z*`(])", p)]
    for kind, items in (("paragraph", paragraphs), ("sentence", sentences)):
        seen = set()
        for item in items:
            if len(item) >= LONG and item in seen:
                found.append(f"{kind}: {item[:120]}")
            seen.add(item)
    seen_runs: dict[str, tuple[int, int]] = {}
    for number, paragraph in enumerate(paragraphs):
        words = paragraph.split()
        for start in range(len(words) - WORDS + 1):
            run = " ".join(words[start : start + WORDS])
            first = seen_runs.setdefault(run, (number, start))
            elsewhere = first[0] != number or start >= first[1] + WORDS  # not overlapping itself
            if len(run) >= LONG and first != (number, start) and elsewhere:
                found.append(f"words: {run[:120]}")
    lines = text.splitlines()
    for before, line in zip(lines, lines[1:], strict=False):
        if line.strip() and line == before and not line.lstrip().startswith(("|", "-", "*")):
            found.append(f"line: {line[:120]}")
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_a_chapter_says_each_thing_once(chapter):
    text = prose(chapter.read_text(encoding="utf-8"))
    assert not repeated_headings(text), f"headings twice in one section: {repeated_headings(text)}"
    assert not repeated_passages(text), "repeated text:\n" + "\n".join(repeated_passages(text))


def test_the_checks_see_each_kind_of_repeat():
    sentence = "A sentence long enough to count as a passage of its own, not a phrase that recurs."
    text = (
        "# Title\n\n## Exercises\n\nOne.\n\n## Exercises\n\nTwo.\n\n"
        f"{sentence} And more.\n\nOther words. {sentence}\n\n"
        "a line of prose that a merge left twice\na line of prose that a merge left twice\n"
    )
    assert repeated_headings(text) == ["Exercises"]
    found = repeated_passages(text)
    assert any(f.startswith("sentence: A sentence long") for f in found)
    assert any(f.startswith("line: a line of prose") for f in found)
    clause = "a clause that an editor's merge left behind at the end of a sentence, in the middle"
    clause += " of a paragraph"
    assert repeated_passages(f"First we say {clause}.\n\nThen we say {clause} again.")
    # the same heading under two different sections is not a repeat
    assert repeated_headings("# A\n\n## Notes\n\n# B\n\n## Notes\n") == []


def _glossary_links():
    import importlib.util

    path = ROOT / "tools" / "glossary_links.py"
    spec = importlib.util.spec_from_file_location("glossary_links", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_glossary_term_is_linked_where_a_part_one_chapter_first_uses_it():
    tool = _glossary_links()
    terms = tool.glossary_terms(tool.GLOSSARY.read_text())
    assert len(terms) >= 30, terms
    unlinked = [
        f"{chapter.name}: {term}"
        for chapter in tool.part_one_chapters()
        for term, (_, linked, _) in tool.first_uses(chapter.read_text(), terms).items()
        if not linked
    ]
    assert not unlinked, unlinked


def test_the_glossary_check_sees_an_unlinked_first_use():
    tool = _glossary_links()
    text = (
        'Intro.\n\n```{code-cell}\nx = "beam search"\n```\n\n'
        "Beam search keeps $k$ prefixes; then {term}`beam search` again. `softmax` is code.\n"
    )
    uses = tool.first_uses(text, ["beam search", "softmax"])
    assert uses["beam search"][1] is False and "softmax" not in uses  # prose first, code ignored
    linked = tool.link(text, ["beam search"])
    assert linked.count("{term}`Beam search`") == 1  # a term role ignores case
    assert tool.first_uses(linked, ["beam search"])["beam search"][1] is True
