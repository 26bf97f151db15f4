"""The website: pages that work offline, checked in a real browser, and notebooks that set up.

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

import pytest
import site_check
import yaml
from helpers import require_multi30k, write_chapter, write_toc
from IPython.core.inputtransformer2 import TransformerManager

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
# A link inside an inline SVG, as the book's Figures 1 and 2 draw them: its href is no string.
SVG_LINK_CELL = """from IPython.display import HTML

HTML('<svg xmlns="http://www.w3.org/2000/svg" width="160" height="30">'
     '<a href="charts.html#charts"><text x="4" y="20">to the charts</text></a></svg>')"""
CHART_CELL = """import altair as alt

cells = [{"x": x, "y": y, "w": (x * y) % 5} for x in range(4) for y in range(4)]
alt.Chart(alt.Data(values=cells)).mark_rect().encode(
    x="x:O", y="y:O", color="w:Q", tooltip=["x:O", "y:O", "w:Q"]
).properties(width=300, height=300)"""


@pytest.fixture(scope="module")
def small_site(tmp_path_factory, root) -> Path:
    """A two-chapter book with math and two charts, built with our _config.yml and _ext/."""
    book = tmp_path_factory.mktemp("site")
    shutil.copy(root / "_config.yml", book / "_config.yml")
    shutil.copytree(root / "_ext", book / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    intro = write_chapter(book / "book/intro.md", "Intro", "print('the intro ran')", SVG_LINK_CELL)
    intro.write_text(intro.read_text() + "\n" + MATH_CHAPTER, encoding="utf-8")
    write_chapter(book / "book/charts.md", "Charts", CHART_CELL, CHART_CELL)
    write_toc(book, "book/intro", "book/charts")
    result = subprocess.run(
        [JUPYTER_BOOK, "build", "--all", str(book)], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return book / "_build/html"


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
        assert "import transformer_lib" in source and "%pip install" in source
        assert f"git+https://github.com/{REPOSITORY}@" in source
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
        assert report.ok, (report.page, report.problems)
    assert by_page["book/intro.html"].math == 2  # one inline, one displayed
    assert by_page["book/charts.html"].charts == 2
    assert by_page["book/charts.html"].tooltips == 2  # interactive, not a static picture
    assert by_page["book/intro.html"].screenshot.stat().st_size > 10_000


@pytest.mark.slow
@needs_chromium
def test_the_check_fails_on_a_broken_page(small_site, tmp_path):
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
    """With the library installed and no data directory, the cell fills the cache and points
    TRANSFORMER_LIB_DATA at it. The files come from a copy put in the cache (no network here)."""
    shared = require_multi30k()
    cache = tmp_path / "cache/transformer_lib/multi30k"
    cache.mkdir(parents=True)
    for name in data.MULTI30K_SHA256:
        shutil.copy(Path(shared, name), cache / name)

    class FakeConfig:
        html_theme_options = {"repository_url": f"https://github.com/{REPOSITORY}"}

    class FakeApp:
        config = FakeConfig()

    source = TransformerManager().transform_cell(book_site.setup_cell_source(FakeApp()))
    assert "run_line_magic('pip'" in source  # the %pip line is IPython syntax, inside try/except
    env = {k: v for k, v in os.environ.items() if k != data.DATA_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    script = f"{source}\nprint(os.environ['TRANSFORMER_LIB_DATA'])"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(cache)
