"""Link each glossary term at its first use in each Part I chapter.

The terms are those of book/glossary.md. In a chapter's prose (code cells, headings, quotations,
math, code, links and emphasis left alone), the first use of a term must be the role
{term}`text <term>`, which the website turns into a link to the glossary.

    python tools/glossary_links.py            # list the first uses that are not linked
    python tools/glossary_links.py --write    # link them
"""

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "book" / "glossary.md"
# Spans a link must not go into: code and roles, math, links, emphasis, HTML, quotations.
PROTECTED = re.compile(
    "|".join(
        [
            r"(\{[\w:-]+\})?``.*?``",
            r"(\{[\w:-]+\})?`[^`]*`",
            r"\$\$.*?\$\$",
            r"\$[^$\n]*\$",
            r"\[[^\]]*\]\([^)]*\)",
            r"\*\*.+?\*\*",
            r"\*[^*]+\*",
            r"<[^>]+>",
            r'"[^"]*"',
            r"“[^”]*”",
        ]
    ),
    re.S,
)
ROLE = re.compile(r"\{term\}`([^`<]*?)(?:\s*<([^>]+)>)?`")
# Forms a term takes in the prose beyond its plural.
FORMS = {
    "auto-regressive": r"auto-?regressi(?:ve|on)",
    "BPE": r"BPE|byte-pair encoding",
    "hypothesis": r"hypothes[ie]s",
    "layer normalization": r"layer normali[sz]ation|LayerNorm",
    "query": r"quer(?:y|ies)",
    "teacher forcing": r"teacher[ -]forc(?:ing|ed)",
    "warm-up": r"warm-?ups?",
}


def glossary_terms(text: str) -> list[str]:
    """The terms of the glossary directive: its unindented lines."""
    block = text.split("```{glossary}", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and line[0] != " "]


def term_pattern(term: str) -> re.Pattern:
    form = FORMS.get(term, re.escape(term).replace(r"\-", "[-–]").replace("–", "[-–]") + "(?:e?s)?")
    return re.compile(rf"(?<![\w-])(?:{form})(?![\w-])", re.I)


def part_one_chapters() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    part = next(p for p in toc["parts"] if p["caption"].startswith("Part I:"))
    return [ROOT / f"{entry['file']}.md" for entry in part["chapters"]]


def prose_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of the prose paragraphs: outside the front matter and the fenced blocks, not
    headings, quotations, tables or directive lines."""
    blocks, offset, start = [], 0, None
    fence = "---" if text.startswith("---") else None  # what closes the open block, if any
    for number, line in enumerate(text.splitlines(keepends=True)):
        stripped = line.strip()
        prose = fence is None and stripped and not stripped.startswith(("#", ">", "|", ":", "```"))
        if prose:
            start = offset if start is None else start
        elif start is not None:
            blocks.append((start, offset))
            start = None
        if fence is None and stripped.startswith("```"):
            fence = "```"
        elif fence is not None and number > 0 and stripped.startswith(fence):
            fence = None
        offset += len(line)
    return blocks + ([(start, offset)] if start is not None else [])


def first_uses(text: str, terms: list[str]) -> dict[str, tuple[int, bool, re.Match | None]]:
    """For each term used in the prose: where it is first used, whether that use is linked."""
    found = {}
    for start, end in prose_blocks(text):
        block = text[start:end]
        for role in ROLE.finditer(block):
            target = (role.group(2) or role.group(1)).strip().lower()
            term = next((t for t in terms if t.lower() == target), None)
            if term and term not in found:
                found[term] = (start + role.start(), True, None)
        protected = [m.span() for m in PROTECTED.finditer(block)]
        for term in terms:
            for match in term_pattern(term).finditer(block):
                if any(a <= match.start() < b for a, b in protected):
                    continue
                if term not in found or found[term][0] > start + match.start():
                    found[term] = (start + match.start(), False, match)
                break
    return found


def link(text: str, terms: list[str]) -> str:
    """The chapter with each term's first use linked, longer terms first (a shorter term inside a
    longer one's link is then left alone)."""
    for term in sorted(terms, key=len, reverse=True):
        position, linked, match = first_uses(text, [term]).get(term, (0, True, None))
        if linked:
            continue
        word = match.group(0)
        role = f"{{term}}`{word}`" if word.lower() == term.lower() else f"{{term}}`{word} <{term}>`"
        text = text[:position] + role + text[position + len(word) :]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="link the first uses in place")
    args = parser.parse_args()
    terms, missing = glossary_terms(GLOSSARY.read_text()), []
    for chapter in part_one_chapters():
        text = chapter.read_text()
        if args.write:
            chapter.write_text(link(text, terms))
            continue
        for term, (position, linked, _) in first_uses(text, terms).items():
            if not linked:
                line = text.count("\n", 0, position) + 1
                missing.append(f"{chapter.relative_to(ROOT)}:{line}: {term!r} first used unlinked")
    print("\n".join(missing) or "every term is linked at its first use")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
