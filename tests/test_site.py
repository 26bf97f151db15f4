"""The website: pages that work offline, checked in a real browser, notebooks that set up, and
the translator page's own code against the library it mirrors.

The browser check of the whole book runs in CI as `make site-test`, after `make book` (pytest runs
before any book exists). Here the same check runs on a small book built with our configuration,
where we know what each page holds, and it must also fail when a page is broken.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import site_check
import torch
import translator_check
import yaml
from helpers import built_once, require_multi30k, write_chapter, write_toc

from transformer_lib import data

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
import book_site  # noqa: E402 - the extension lives in _ext/, outside the package

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
# owner/name of the repository the site's buttons point to: _config.yml's, or the publishing
# workflow's BOOK_REPOSITORY (see _ext/book_site.py)
REPOSITORY = os.environ.get("BOOK_REPOSITORY", "").strip("/") or yaml.safe_load(
    (ROOT / "_config.yml").read_text()
)["repository"]["url"].removeprefix("https://github.com/")
CHROMIUM = site_check.find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not found: the browser check needs Debian's package "
    "(apt-get install chromium); CI installs it in .ci/run",
)

MATH_CHAPTER = (
    "Inline math $d_k$, and a numbered equation:\n\n"
    "$$\nw = \\mathrm{softmax}(q K^\\top / \\sqrt{d_k})\n$$ (eq-weights)\n\n"
    "See {eq}`eq-weights` and the [charts](charts.md).\n"
)
# A figure's caption, as the book gives every picture a cell draws (MyST-NB's cell metadata).
CAPTION = "---\nmystnb:\n  figure:\n    caption: {}\n---\n"
# A link inside an inline SVG, as the book's Figures 1 and 2 draw them: its href is no string.
SVG_LINK_CELL = (
    CAPTION.format("A link to the charts.")
    + """from IPython.display import HTML

HTML('<svg xmlns="http://www.w3.org/2000/svg" width="160" height="30">'
     '<a href="charts.html#charts"><text x="4" y="20">to the charts</text></a></svg>')"""
)
CHART_CELL = (
    CAPTION.format("A grid of cells, coloured by a weight.")
    + """import altair as alt

cells = [{"x": x, "y": y, "w": (x * y) % 5} for x in range(4) for y in range(4)]
alt.Chart(alt.Data(values=cells)).mark_rect().encode(
    x="x:O", y="y:O", color="w:Q", tooltip=["x:O", "y:O", "w:Q"]
).properties(width=300, height=300)"""
)

# What a reader should never see, each as a chapter really makes it: a glued value left displayed
# and a bare value, a temporary folder printed, a picture without a caption, and math broken by a
# line that Markdown reads as a list item.
STRAY_CELLS = (
    "from myst_nb import glue\n\nglue('updates', '225 updates')\n0.06508799999999997",
    "import tempfile\n\nprint('written to', tempfile.mkdtemp())",
    "import matplotlib.pyplot as plt\n\nplt.plot([3, 2, 1])\nplt.show()",
)
BROKEN_MATH = (
    "The floor is $H(q) = -(1 - \\epsilon) \\log(1 - \\epsilon)\n- \\epsilon \\log \\epsilon$.\n"
)


@pytest.fixture(scope="module")
def small_site(tmp_path_factory, root) -> Path:
    """A two-chapter book with math and two charts, built with our _config.yml and _ext/."""
    book = built_once(tmp_path_factory, "site", lambda folder: build_small_site(folder, root))
    return book / "_build/html"


def build_small_site(book: Path, root: Path) -> None:
    shutil.copy(root / "_config.yml", book / "_config.yml")
    shutil.copytree(root / "_ext", book / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    intro = write_chapter(book / "book/intro.md", "Intro", "print('the intro ran')", SVG_LINK_CELL)
    intro.write_text(intro.read_text() + "\n" + MATH_CHAPTER, encoding="utf-8")
    write_chapter(book / "book/charts.md", "Charts", CHART_CELL, CHART_CELL)
    write_chapter(book / "book/reader.md", "Reader", *STRAY_CELLS)
    reader = book / "book/reader.md"
    reader.write_text(reader.read_text() + "\n" + BROKEN_MATH, encoding="utf-8")
    write_toc(book, "book/intro", "book/charts", "book/reader")
    result = subprocess.run(
        [JUPYTER_BOOK, "build", "--all", str(book)], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


# --- what the build writes -------------------------------------------------------------------
@pytest.mark.slow
def test_pages_load_nothing_from_another_host(small_site):
    """Every script and style the pages load is served from the site (MathJax, vega, fonts)."""
    for page in ["book/intro.html", "book/charts.html"]:
        text = (small_site / page).read_text(encoding="utf-8")
        sources = [part.split('"')[0] for part in text.split(' src="')[1:]]
        assert sources and all("://" not in source for source in sources), sources
    assert (small_site / "_static/mathjax/tex-chtml.js").is_file()
    assert (small_site / "_static" / book_site.VEGA_SCRIPT).stat().st_size > 100_000
    charts = (small_site / "book/charts.html").read_text(encoding="utf-8")
    assert book_site.VEGA_SCRIPT in charts
    assert book_site.VEGA_SCRIPT not in (small_site / "book/intro.html").read_text()


@pytest.mark.slow
def test_downloadable_notebooks_start_with_the_set_up_cell(small_site):
    for name in ["intro", "charts"]:
        notebook = json.loads((small_site / f"_sources/book/{name}.ipynb").read_text())
        first = notebook["cells"][0]
        assert book_site.SETUP_TAG in first["metadata"]["tags"]
        source = "".join(first["source"])
        assert "def set_up()" in source and "find_multi30k(root)" in source
        assert f"https://github.com/{REPOSITORY}/archive/" in source
        assert any("the intro ran" in "".join(c["source"]) for c in notebook["cells"]) == (
            name == "intro"
        )


@pytest.mark.slow
def test_launch_links_open_the_published_notebook(small_site):
    page = (small_site / "book/charts.html").read_text(encoding="utf-8")
    notebook = f"{REPOSITORY}/blob/gh-pages/_sources/book/charts.ipynb"
    assert f"https://colab.research.google.com/github/{notebook}" in page
    assert f"https://mybinder.org/v2/gh/{REPOSITORY}/gh-pages?urlpath=lab/tree/" in page
    assert "_sources/book/charts.ipynb" in page  # the download button
    assert (small_site / "binder/requirements.txt").read_text().startswith("transformer_lib[")


# --- the browser check -----------------------------------------------------------------------
@pytest.mark.slow
@needs_chromium
def test_every_page_renders_in_chromium(small_site, tmp_path):
    shots = tmp_path / "shots"
    reports = site_check.check_site(small_site, shots, search_term="Charts", log=lambda _: None)
    by_page = {report.page: report for report in reports}
    assert {"book/intro.html", "book/charts.html", "search.html"} <= set(by_page)
    for report in reports:
        assert report.ok or "book/reader." in report.page, (report.page, report.problems)
    assert by_page["book/intro.html"].outputs == 2  # the print and the figure
    assert by_page["_sources/book/intro.ipynb"].ok
    stray = " ".join(by_page["book/reader.html"].problems)
    for kind in [
        "bare value",
        "path of the machine",
        "math left",
        "without a caption",
        "file name",
    ]:
        assert kind in stray, (kind, stray)
    assert "'updates' is displayed" in " ".join(by_page["_sources/book/reader.ipynb"].problems)
    assert by_page["book/intro.html"].math == 2  # one inline, one displayed
    assert by_page["book/charts.html"].charts == 2
    assert by_page["book/charts.html"].tooltips == 2  # interactive, not a static picture
    assert by_page["book/intro.html"].screenshot.stat().st_size > 10_000


@pytest.mark.slow
@needs_chromium
def test_the_check_fails_on_a_broken_page(small_site, tmp_path, monkeypatch):
    # Its math and charts never render: each page waits for them until the timeout, which a
    # page this small does not need at its full length.
    monkeypatch.setattr(site_check, "RENDER_TIMEOUT_MS", 8_000)
    broken = tmp_path / "html"
    shutil.copytree(small_site, broken)
    (broken / "_static" / book_site.VEGA_SCRIPT).unlink()  # charts would need the CDN
    (broken / "_static/mathjax/tex-chtml.js").unlink()
    intro = broken / "book/intro.html"
    page = intro.read_text().replace("</article>", '<a href="gone.html">gone</a></article>', 1)
    intro.write_text(page.replace("charts.html#charts", "charts.html#no-such-box"))
    reports = {
        r.page: r for r in site_check.check_site(broken, None, search_term=None, log=lambda _: None)
    }
    charts = " ".join(reports["book/charts.html"].problems)
    assert "2 of 2 charts not rendered" in charts
    assert "request to another host" in charts and "HTTP 404" in charts
    intro_problems = " ".join(reports["book/intro.html"].problems)
    assert "math elements not rendered" in intro_problems
    assert "broken link to book/gone.html" in intro_problems
    assert "broken link to book/charts.html#no-such-box" in intro_problems  # inside the SVG


def test_no_page_is_a_failure_not_a_pass(tmp_path):
    (tmp_path / "index.html").write_text("<html></html>")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static/page.html").write_text("<html></html>")
    assert site_check.site_pages(tmp_path) == [tmp_path / "index.html"]
    (tmp_path / "index.html").unlink()
    with pytest.raises(site_check.SiteCheckError, match="build the book first"):
        site_check.check_site(tmp_path)
    assert site_check.main(["--site", str(tmp_path)]) == 2


def test_internal_links_are_checked_with_their_anchors(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book/a.html").write_text('<h1 id="top">A</h1><span id="x"></span>')
    base = "http://127.0.0.1:1/"
    assert site_check.link_problem(tmp_path, base, base + "book/a.html#top") is None
    assert site_check.link_problem(tmp_path, base, "https://example.org/x.html") is None
    assert "no such anchor" in site_check.link_problem(tmp_path, base, base + "book/a.html#y")
    assert "no such file" in site_check.link_problem(tmp_path, base, base + "book/b.html")


# --- the notebooks' set-up cell, run ---------------------------------------------------------
def test_set_up_cell_fetches_multi30k_into_the_cache_when_no_copy_is_at_hand(tmp_path):
    """In a clone, with no data directory given and none beside it, the cell fills the cache and
    points TRANSFORMER_LIB_DATA at it. The files come from a copy put in the cache (no network
    here). (tests/test_notebooks.py runs the cell outside a clone.)"""
    shared = require_multi30k()
    cache = tmp_path / "cache/transformer_lib/multi30k"
    cache.mkdir(parents=True)
    for name in data.MULTI30K_SHA256:
        shutil.copy(Path(shared, name), cache / name)
    source = book_site.setup_cell_source(source="http://127.0.0.1:9/unused.tar.gz")
    env = {k: v for k, v in os.environ.items() if k != data.DATA_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    clone = tmp_path / "clone"
    (clone / "book").mkdir(parents=True)
    for name in ("_toc.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, clone / name)
    (clone / "results").mkdir()
    (clone / "transformer_lib").symlink_to(ROOT / "transformer_lib")
    result = subprocess.run(
        [sys.executable, "-c", f"{source}\nprint(os.environ['TRANSFORMER_LIB_DATA'])"],
        cwd=clone / "book",
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == str(cache)


# --- the translator page's own code ----------------------------------------------------------
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="Node.js not found: the translator page's code is tested with node"
)


def run_node(script: str, *arguments) -> object:
    done = subprocess.run(
        [NODE, str(ROOT / "tests/js" / script), *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


class TableState:
    """A decoder state whose logits are a row of a random table picked by a hash of the prefix:
    the same in tests/js/search_cases.mjs, so both languages search the same distributions."""

    def __init__(self, table: torch.Tensor, start: int):
        self.table, self.hashes = table, [start]

    def step(self, tokens):
        rows = len(self.table)
        self.hashes = [
            (h * 31 + t + 1) % rows for h, t in zip(self.hashes, tokens.tolist(), strict=True)
        ]
        return self.table[self.hashes]

    def select(self, rows):
        self.hashes = [self.hashes[row] for row in rows.tolist()]


@needs_node
def test_the_pages_searches_are_the_decoding_chapters(tmp_path):
    """greedy and beamSearch of web/translator/search.js against greedy_search and beam_search on
    the same distributions: the same tokens, log-probabilities and scores."""
    from transformer_lib.decoding import beam_search, greedy_search, length_penalty

    generator = np.random.default_rng(0)
    table = torch.from_numpy((generator.standard_normal((997, 6)) * 3).astype(np.float32))
    cases = [
        {"start": start, "bos": 0, "eos": 1, "maxLength": limit, "beam": beam, "alpha": alpha}
        for start in range(12)
        for limit in (1, 4, 9)
        for beam, alpha in ((0, 0.0), (1, 0.6), (2, 0.0), (4, 0.6), (5, 2.0))
    ]
    (tmp_path / "cases.json").write_text(
        json.dumps({"table": table.tolist(), "vocab": 6, "rows": 997, "cases": cases})
    )
    page = run_node("search_cases.mjs", tmp_path / "cases.json")
    assert page["penalty"] == length_penalty(7, 0.6)
    lengths = set()
    for case, found in zip(cases, page["found"], strict=True):
        state, limit = TableState(table, case["start"]), torch.tensor([case["maxLength"]])
        if case["beam"] == 0:
            tokens = greedy_search(state, 0, 1, limit)[0]
            assert found == {"tokens": tokens, "ended": len(tokens) < case["maxLength"]}, case
        else:
            best = beam_search(state, 0, 1, limit, case["beam"], case["alpha"])[0]
            assert found["tokens"] == best.tokens, case
            assert found["logProb"] == pytest.approx(best.log_prob, rel=1e-6, abs=1e-6)
            assert found["score"] == pytest.approx(best.score, rel=1e-6, abs=1e-6)
        lengths.add(len(found["tokens"]))
    assert len(lengths) > 3  # outputs that end early and outputs cut at the limit


@needs_node
def test_the_pages_tokenizer_is_the_books(tmp_path, root):
    """web/translator/tokenizer.js over the vendored library encodes, decodes and labels pieces
    exactly as BPETokenizer and the recorded runs' labels do, odd text included."""
    from transformer_lib.book.report import token_labels
    from transformer_lib.tokenizer import BOS_ID, EOS_ID, BPETokenizer

    library = root / "node_modules/@huggingface/tokenizers/dist/tokenizers.min.mjs"
    assert library.is_file(), "node_modules is not installed: run make test (it runs npm ci)"
    corpus = ["Zwei Hunde spielen im Schnee.", "Two dogs are playing in the snow.", "Ein Mädchen"]
    tokenizer = BPETokenizer.train(corpus * 5, 400)
    tokenizer.save(tmp_path / "tokenizer.json")
    sentences = [
        *corpus,
        "Süße Äpfel, größer als Fuß!",
        "Ein Hund 🐕 läuft <s> </s> im  Schnee.",
        "",
        "  two spaces first",
        "tab\tand\u00a0no-break space",
        "日本語のテキスト",
        "Hund",
    ]
    (tmp_path / "sentences.json").write_text(json.dumps(sentences))
    page = run_node("tokenize.mjs", tmp_path / "tokenizer.json", tmp_path / "sentences.json")
    for text, shown in zip(sentences, page, strict=True):
        ids = tokenizer.encode(text)
        assert shown["ids"] == ids, text
        assert shown["text"] == tokenizer.decode([*ids, EOS_ID, 9]), text
        assert shown["labels"] == token_labels(tokenizer, [BOS_ID, *ids, EOS_ID]), text


def test_the_translator_check_covers_what_the_page_must_handle():
    for sentences in translator_check.SENTENCES.values():
        assert len(sentences["one word"].split()) == 1
        assert len(sentences["60 words"].split()) == 60
        assert len(sentences["15 words"].split()) == 15
        assert set("äöüß") & set(sentences["umlauts and ß"]) and "ß" in sentences["umlauts and ß"]
        assert any(ord(character) > 0xFFFF for character in sentences["an emoji"])
        assert len(sentences) >= 5


def test_the_translator_check_fails_on_a_translation_unlike_pythons():
    expected = {
        "source": [5, 6, 2],
        "output": [7, 8],
        "ended": True,
        "text": "a b",
        "rows": ["a", "b", "</s>"],
        "columns": ["x", "y", "</s>"],
        "attention": [[0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0.0, 0.5, 0.5]],
    }
    cells = [[r, c, w] for r, row in enumerate(expected["attention"]) for c, w in enumerate(row)]
    shown = {
        "data": {"state": "done", "sourceIds": "5 6 2", "targetIds": "7 8"},
        "status": "Translated",
        "output": "a b",
        "rows": 3,
        "columns": 3,
        "rowLabels": ["a", "b", "</s>"],
        "columnLabels": ["x", "y", "</s>"],
        "weights": cells,
    }
    assert translator_check.compare(shown, expected, "same", 0.0005) == []
    wrong = {**shown, "data": {**shown["data"], "targetIds": "7 9"}, "output": "a c"}
    problems = " ".join(translator_check.compare(wrong, expected, "wrong", 0.0005))
    assert "output pieces differ" in problems and "text differ" in problems
    shifted = {**shown, "weights": [[r, c, 0.4 if c == 0 else w] for r, c, w in cells]}
    problems = " ".join(translator_check.compare(shifted, expected, "shifted", 0.0005))
    assert "sums to" in problems and "weights differ" in problems
    failed = {**shown, "data": {"state": "error"}, "status": "Type a sentence first."}
    assert "did not translate" in translator_check.compare(failed, expected, "x", 0.0005)[0]


def test_the_translator_files_and_their_absence_are_reported(tmp_path, root):
    (tmp_path / "models").mkdir()
    found = book_site.translator_files(root, tmp_path / "nothing", tmp_path / "models", tmp_path)
    problems = " ".join(found["problems"])
    assert "npm ci --ignore-scripts" in problems and "make book" in problems
    assert set(found["files"]) == {tmp_path / p.name for p in (root / "web/translator").glob("*")}


def test_the_models_index_cannot_close_its_script_element():
    class App:
        book_site_translator_index = json.dumps({"note": "</script><b>"})

        def add_js_file(self, *args, **kwargs):
            self.js = args

        def add_css_file(self, *args, **kwargs):
            self.css = args

    app, context = App(), {"body": f"<p>before</p>{book_site.TRANSLATOR_INDEX}"}
    book_site.add_translator(app, context)
    assert "</script><b>" not in context["body"] and "<\\/script><b>" in context["body"]
    assert app.js == ("translator/translator.js",) and app.css == ("translator/translator.css",)
    filled = context["body"].split('id="translator-index">')[1].split("</script>")[0]
    assert json.loads(filled) == {"note": "</script><b>"}


def test_an_8bit_output_may_part_from_pythons_only_at_a_near_tie():
    """Parting where Python's two pieces are within NEAR_TIE is no problem; elsewhere it is one."""

    class Reference:
        def __init__(self, gap):
            self.gap = gap

        def parting_gap(self, name, form, text, ours, theirs):
            return self.gap, 2

    case, expected = ("m", "8bit", "Hund"), {"source": [5, 1], "output": [7, 8, 9]}
    shown = {"data": {"state": "done", "sourceIds": "5 1", "targetIds": "7 8 4 4"}}
    problems = ["m, 8bit: the page's output pieces differ from Python's"]
    tie = translator_check.NEAR_TIE / 2
    assert (
        translator_check._unless_near_tie(Reference(tie), case, shown, expected, problems, print)
        == []
    )
    found = translator_check._unless_near_tie(
        Reference(0.5), case, shown, expected, problems, print
    )
    assert found[:1] == problems and "no near-tie" in found[1]
    other_source = {**shown, "data": {**shown["data"], "sourceIds": "5 6 1"}}
    assert translator_check._unless_near_tie(
        Reference(tie), case, other_source, expected, problems, print
    )
