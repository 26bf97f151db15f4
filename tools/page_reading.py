"""Read a built page as a reader reads it, and name what nobody meant to show.

The browser check (``site_check.py``) asks whether a page renders; this asks what it shows. From a
page's HTML it reports, quoting the offending text:

1. a cell output that is a bare value: the repr of a number or a string (``'900'``,
   ``0.06508799999999997``), as a glued value shows when it is not hidden, or as a cell's last
   expression leaves it when nobody meant it to be read;
2. an absolute path of a machine that built the book (its working folder, a home, a temporary
   folder), in the text or in an output;
3. markup left unrendered in the text: ``$…$`` or ``\\(`` outside math, a MyST role such as
   ``{glue:text}`` or ``{ref}``, a literal ``:::``;
4. an image without alt text, or whose alt text is a file name; a picture or chart produced by a
   cell that stands in no figure with a caption.

It also counts the outputs a reader sees, so that a page that grows fifty outputs shows in CI's
log. Code (``pre``, ``code``) is read only for paths: it may show markup on purpose.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bs4 import BeautifulSoup, Tag

# Folders of other machines that a recorded run or a build may leak: homes and temporary folders.
MACHINE_PATHS = (
    r"/tmp/",
    r"/var/tmp/",
    r"/var/folders/",
    r"/private/var/",
    r"/root/",
    r"/home/[^/\s]+/",
    r"/Users/[^/\s]+/",
    r"[A-Za-z]:\\Users\\",
)
# A path starts a word: not inside a URL ("https://host/tmp/...") nor a relative path ("a/tmp/").
PATH_START = r"(?<![\w/.:~-])"
# Math the page left as TeX: a dollar before a TeX command or around TeX syntax, a lone letter
# between dollars, or TeX's inline delimiters.
RAW_MATH = re.compile(r"\$[^$\n]*\\[A-Za-z]|\$[^$\n]*[\\^_{}][^$\n]*\$|\$[A-Za-z]\$|\\\(|\\\)")
RAW_ROLES = re.compile(r"\{(?:glue(?::\w+)?|ref|doc|term|eq|numref|download|cite)\}|:::")
IMAGE_FILE = re.compile(r"(^|[/\\])[^/\\\s]+\.(?:png|jpe?g|svg|gif|webp)$", re.IGNORECASE)
CHART_SELECTOR = "img, div[id^=altair-viz-], div.vega-embed, svg"
# Where text is code, math, or no text at all.
NOT_PROSE = ("pre", "code", "script", "style", "mjx-container", "svg", "math")
BARE_TYPES = (int, float, complex, str, bytes, bool, type(None))


@dataclass
class Reading:
    """What a reader sees on one page that nobody meant to show, and how many outputs it has."""

    problems: list[str] = field(default_factory=list)
    outputs: int = 0  # cell outputs on the page, collapsed ones included
    collapsed: int = 0  # of which the reader sees only after opening a collapsed cell


def machine_paths(extra: Iterable[str | Path] = ()) -> re.Pattern:
    """A pattern for absolute paths of a building machine: ``MACHINE_PATHS``, this machine's
    temporary folder, and ``extra`` folders (the build's working folder, its home)."""
    folders = [re.escape(str(Path(p)).rstrip("/") + "/") for p in (*extra, tempfile.gettempdir())]
    alternatives = "|".join(dict.fromkeys([*folders, *MACHINE_PATHS]))
    return re.compile(PATH_START + rf"(?:{alternatives})[^\s'\"<>)\]]*")


def bare_value(text: str) -> bool:
    """Whether ``text`` is nothing but the repr of numbers or strings (one, or a tuple of them)."""
    text = text.strip()
    if not text:
        return False
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    if isinstance(value, tuple):  # a cell that ends in ``a, b``; a list may be meant to be read
        return bool(value) and all(isinstance(item, BARE_TYPES) for item in value)
    return isinstance(value, BARE_TYPES)


def quote(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def prose(content: Tag) -> str:
    """The page's text outside code and math, each block on a line of its own; the code and math
    are taken out of ``content`` (read last, after the rules that need them)."""
    for element in content.select(", ".join(NOT_PROSE) + ", .math, .highlight"):
        element.decompose()
    return content.get_text("\n")


def output_problems(content: Tag, reading: Reading) -> None:
    """Rule 1, and the count: every output of every cell."""
    for output in content.select("div.cell_output > *"):
        reading.outputs += 1
        if output.find_parent("details") is not None:
            reading.collapsed += 1
        classes = set(output.get("class", []))
        if classes & {"text_plain", "stream"} and bare_value(output.get_text()):
            reading.problems.append(
                f"a bare value shown as a cell's output: {quote(output.get_text())} (glue it "
                "hidden, glue(name, value, display=False), or print what the text discusses)"
            )


def picture_problems(content: Tag, reading: Reading) -> None:
    """Rule 4: alt text for every image; a caption for every picture a cell draws."""
    for image in content.select("img"):
        alt = (image.get("alt") or "").strip()
        if not alt:
            reading.problems.append(f"an image without alt text: {image.get('src')}")
        elif IMAGE_FILE.search(alt):
            reading.problems.append(f"an image whose alt text is a file name: {quote(alt)}")
    for output in content.select("div.cell_output"):
        for picture in output.select(CHART_SELECTOR):
            if picture.find_parent("svg") or picture.find_parent("div", class_="vega-embed"):
                continue  # a part of a picture counted already
            figure = picture.find_parent("figure")
            caption = figure.find("figcaption") if figure is not None else None
            if caption is None or not caption.get_text(strip=True):
                what = picture.get("src") or picture.get("id") or picture.name
                reading.problems.append(
                    f"a chart without a caption: {what} (give its cell mystnb.figure.caption)"
                )


def read_page(html: str, paths: re.Pattern) -> Reading:
    """What is wrong with one page as a reader sees it (rules 1 to 4 of the module's docstring)."""
    soup = BeautifulSoup(html, "html.parser")
    content = soup.select_one("article") or soup.body or soup
    for element in content.select("script, style"):
        element.decompose()
    reading = Reading()
    output_problems(content, reading)
    for found in dict.fromkeys(m.group(0) for m in paths.finditer(content.get_text(" "))):
        reading.problems.append(f"a path of the machine that built the book: {quote(found)}")
    picture_problems(content, reading)
    text = prose(content)
    for pattern, what in ((RAW_MATH, "math left as TeX"), (RAW_ROLES, "MyST markup left raw")):
        for line in text.splitlines():
            if pattern.search(line):
                reading.problems.append(f"{what}: {quote(line)}")
    return reading


def notebook_problems(path: Path, paths: re.Pattern) -> list[str]:
    """Build paths in a notebook the site publishes or ``make notebooks`` writes (its sources and
    outputs), and glued values it displays."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    problems = []
    for number, cell in enumerate(notebook.get("cells", [])):
        text = json.dumps([cell.get("source"), cell.get("outputs", [])], ensure_ascii=False)
        for found in dict.fromkeys(m.group(0) for m in paths.finditer(text.replace("\\n", " "))):
            problems.append(f"cell {number}: a path of the machine that built the book: {found!r}")
        for output in cell.get("outputs", []):
            glued = output.get("metadata", {}).get("scrapbook", {})
            if glued and not glued.get("mime_prefix"):
                problems.append(f"cell {number}: glued value {glued.get('name')!r} is displayed")
    return problems
