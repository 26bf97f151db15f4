"""Open every page of the built book in headless Chromium and fail on what a reader would see broken.

The site is served from a thread on 127.0.0.1 (a free port); every request that leaves that server
is refused and counted as a failure, so a page that would need the internet fails here as it would
fail an offline reader. For each page the check fails on:

* a console error, an uncaught exception, a failed request or an HTTP error status;
* a request to any other host (a CDN script, a web font);
* math that MathJax did not render (an element of class ``math`` without its ``mjx-container``,
  or with a TeX error);
* a chart that did not render (an altair/vega container with no ``svg``/``canvas`` of marks, or
  with vega-embed's error message);
* a broken internal link (a page or file that is not in the site, or an ``#anchor`` that is not
  on its page);
* a search box that finds nothing (``search.html`` is asked for a word the book contains);
* what a reader should never see (``tools/page_reading.py``): a stray value under a cell, a path
  of the machine that built the book, markup left raw, an image without alt text or a chart
  without a caption. Each page's line gives the number of cell outputs a reader sees.

The notebooks the site publishes (``_sources/**/*.ipynb``) are read too: no build path in their
cells, no glued value displayed.

When the site has the translator page, it also loads the translator's models, translates in both
directions and compares every translation with Python's (``tools/translator_check.py``).

It saves a full-page screenshot of each page under the screenshot folder, and it fails when it
finds no page at all. Chromium is the system's (Debian's ``chromium`` package), driven through
Playwright; no browser is downloaded.

Usage::

    python tools/site_check.py [--site _build/html] [--shots _build/site-test] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import page_reading
import translator_check

SKIPPED_FOLDERS = {"_static", "_sources", "_images", "_downloads", "binder"}
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
REDIRECT_RE = re.compile(r'<meta[^>]+http-equiv="refresh"[^>]+url=(?P<url>[^"]+)"', re.IGNORECASE)
CHART_SELECTOR = '[id^="altair-viz-"], .vega-embed'
# Scripts that chart and math pages need time for: MathJax typesets after load, vega draws async.
RENDER_TIMEOUT_MS = 30_000
# Absolute paths of the machine that builds the book: the clone, its home, the folders the build
# read the data, runs and models from, any home or temporary folder (page_reading.MACHINE_PATHS).
FOLDERS_READ = ("TRANSFORMER_LIB_DATA", "TRANSFORMER_LIB_RUNS", "TRANSFORMER_LIB_MODELS")
BUILD_PATHS = page_reading.machine_paths(
    [Path(__file__).resolve().parent.parent, Path.home()]
    + [os.environ[name] for name in FOLDERS_READ if os.environ.get(name)]
)


class SiteCheckError(Exception):
    """The check could not run at all (no site, no pages, no browser); the message says why."""


@dataclass
class PageReport:
    page: str  # path relative to the site, e.g. "book/attention.html"
    problems: list[str] = field(default_factory=list)
    math: int = 0  # math elements rendered
    charts: int = 0  # charts rendered
    tooltips: int = 0  # charts that showed a tooltip when the pointer went over them
    links: int = 0  # internal links checked
    outputs: int = 0  # cell outputs on the page
    collapsed: int = 0  # of which inside a collapsed cell
    screenshot: Path | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        status = "ok  " if self.ok else "FAIL"
        return (
            f"{status} {self.page}: {self.math} math, {self.charts} charts "
            f"({self.tooltips} with tooltips), {self.links} links, {self.outputs} outputs "
            f"({self.collapsed} collapsed), {self.seconds:.1f} s"
        )


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium executable: the argument, $CHROMIUM, or the first of CHROMIUM_NAMES on PATH."""
    for candidate in (explicit, os.environ.get("CHROMIUM")):
        if candidate:
            return candidate if shutil.which(candidate) else None
    return next((shutil.which(name) for name in CHROMIUM_NAMES if shutil.which(name)), None)


def site_pages(site: Path) -> list[Path]:
    """Every HTML page of the site, outside the asset folders, in a stable order."""
    return sorted(
        path
        for path in site.rglob("*.html")
        if not SKIPPED_FOLDERS & set(path.relative_to(site).parts[:-1])
    )


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 at a free port from a thread; yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)


@functools.cache
def _anchors(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def link_problem(site: Path, base: str, href: str) -> str | None:
    """Why an internal link is broken, or None when its target (and anchor) exist."""
    if not href.startswith(base):
        return None  # another site: not ours to check offline
    url, fragment = urldefrag(href)
    relative = unquote(urlsplit(url).path)[len(urlsplit(base).path) :]
    target = site / relative
    if relative == "" or relative.endswith("/"):
        target = target / "index.html"
    if not target.is_file():
        return f"broken link to {relative or '/'} (no such file)"
    if fragment and target.suffix == ".html" and unquote(fragment) not in _anchors(target):
        return f"broken link to {relative}#{fragment} (no such anchor)"
    return None


# The rendered state of a page, read in the browser once scripts have settled.
_STATE_JS = """() => {
  const math = [...document.querySelectorAll('.math')];
  const charts = [...document.querySelectorAll(CHARTS)].filter(
    (el) => !el.parentElement.closest(CHARTS));
  return {
    math: math.length,
    mathRendered: math.filter((el) => el.querySelector('mjx-container')).length,
    mathErrors: math.filter((el) => el.querySelector('mjx-merror')).map((el) => el.textContent.slice(0, 80)),
    charts: charts.length,
    chartsRendered: charts.filter((el) => el.querySelector('canvas.marks, svg.marks')).length,
    chartErrors: charts.filter((el) => el.querySelector('.error')).map((el) => el.textContent.slice(0, 200)),
    // An SVG link's href is an SVGAnimatedString, not a URL: resolve its attribute instead.
    links: [...document.querySelectorAll('a[href]')].map((a) => typeof a.href === 'string'
      ? a.href : new URL(a.getAttribute('href'), document.baseURI).href),
  };
}""".replace("CHARTS", repr(CHART_SELECTOR))

_SETTLED_JS = """() => {
  const math = [...document.querySelectorAll('.math')];
  const charts = [...document.querySelectorAll(CHARTS)].filter(
    (el) => !el.parentElement.closest(CHARTS));
  return math.every((el) => el.querySelector('mjx-container'))
    && charts.every((el) => el.querySelector('canvas.marks, svg.marks, .error'));
}""".replace("CHARTS", repr(CHART_SELECTOR))


def _hover_for_tooltip(page, chart) -> bool:
    """Move the pointer over a grid of points of the chart; True when a vega tooltip appeared."""
    marks = chart.query_selector("canvas.marks, svg.marks")
    box = marks.bounding_box() if marks else None
    if box is None:
        return False
    marks.scroll_into_view_if_needed()
    box = marks.bounding_box()
    for fy in (0.1, 0.3, 0.5, 0.7, 0.9):
        for fx in (0.1, 0.3, 0.5, 0.7, 0.9):
            page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
            page.wait_for_timeout(30)
            if page.query_selector("#vg-tooltip-element.visible"):
                page.mouse.move(0, 0)
                return True
    return False


def search_problem(page, base: str, term: str) -> str | None:
    """Search the site for ``term`` as a reader would; why it failed, or None."""
    page.goto(f"{base}search.html?q={term}", wait_until="load", timeout=RENDER_TIMEOUT_MS)
    try:
        page.wait_for_selector("ul.search li", timeout=RENDER_TIMEOUT_MS)
    except Exception:
        return f"searching for {term!r} found no page"
    return None


def watch(page, site: Path, base: str, problems: list[str]) -> set[str]:
    """Record on ``page`` what the check fails on: console errors, uncaught exceptions, failed
    requests and HTTP errors are appended to ``problems``; a request to another host is refused
    and put in the set returned (reported once each by the caller)."""
    refused: set[str] = set()

    def route(route_):
        url = route_.request.url
        if url == base + "favicon.ico" and not (site / "favicon.ico").is_file():
            # The browser's own probe for an icon: not a request the page makes.
            route_.fulfill(status=204)
        elif url.startswith(base) or url.startswith(("data:", "blob:", "about:")):
            route_.continue_()
        else:
            refused.add(url)
            route_.abort()

    def on_console(message):
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_request_failed(request):
        if request.url not in refused:  # refused ones are reported once, by the caller
            problems.append(f"request failed: {request.url} ({request.failure})")

    def on_response(response):
        if response.status >= 400:
            problems.append(f"HTTP {response.status} for {response.url}")

    page.route("**/*", route)
    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"uncaught exception: {error}"))
    page.on("requestfailed", on_request_failed)
    page.on("response", on_response)
    return refused


def read_as_a_reader(report: PageReport, html: str) -> None:
    """Add to ``report`` what a reader should never see on the page, and its outputs."""
    reading = page_reading.read_page(html, BUILD_PATHS)
    report.problems += reading.problems
    report.outputs, report.collapsed = reading.outputs, reading.collapsed


def check_notebooks(site: Path) -> list[PageReport]:
    """A report for each notebook the site publishes: build paths, displayed glued values."""
    return [
        PageReport(
            path.relative_to(site).as_posix(), page_reading.notebook_problems(path, BUILD_PATHS)
        )
        for path in sorted((site / "_sources").rglob("*.ipynb"))
    ]


def check_page(
    browser, site: Path, base: str, path: Path, shots: Path | None, search_term: str | None = None
) -> PageReport:
    relative = path.relative_to(site).as_posix()
    report = PageReport(relative)
    started = time.perf_counter()
    html = path.read_text(encoding="utf-8", errors="replace")
    read_as_a_reader(report, html)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = watch(page, site, base, report.problems)
    redirect = REDIRECT_RE.search(html)
    if redirect:  # a page that only forwards the reader (index.html): its target is checked
        report.links = 1
        problem = link_problem(site, base, urljoin(base + relative, redirect["url"]))
        report.problems += [problem] if problem else []
        context.close()
        return report
    try:
        page.goto(base + relative, wait_until="load", timeout=RENDER_TIMEOUT_MS)
        try:
            page.wait_for_function(_SETTLED_JS, timeout=RENDER_TIMEOUT_MS)
        except Exception:  # reported below from the page's state
            pass
        state = page.evaluate(_STATE_JS)
        report.math = state["mathRendered"]
        if state["mathRendered"] < state["math"]:
            missing = state["math"] - state["mathRendered"]
            report.problems.append(f"{missing} of {state['math']} math elements not rendered")
        report.problems += [f"math error in {text!r}" for text in state["mathErrors"]]
        report.charts = state["chartsRendered"]
        if state["chartsRendered"] < state["charts"]:
            missing = state["charts"] - state["chartsRendered"]
            report.problems.append(f"{missing} of {state['charts']} charts not rendered")
        report.problems += [f"chart error: {text}" for text in state["chartErrors"]]
        internal = sorted({link for link in state["links"] if link.startswith(base)})
        report.links = len(internal)
        for link in internal:
            problem = link_problem(site, base, link)
            if problem:
                report.problems.append(problem)
        if shots is not None:
            report.screenshot = shots / (relative.replace("/", "__").removesuffix(".html") + ".png")
            page.screenshot(path=str(report.screenshot), full_page=True)
        for chart in page.query_selector_all(CHART_SELECTOR):
            if chart.query_selector("canvas.marks, svg.marks") and _hover_for_tooltip(page, chart):
                report.tooltips += 1
        if relative == "search.html" and search_term:
            problem = search_problem(page, base, search_term)
            if problem:
                report.problems.append(problem)
    except Exception as err:  # a page that does not load at all is one more problem
        report.problems.append(f"could not check the page: {err}")
    finally:
        context.close()
    report.problems += [
        f"request to another host (the site must work offline): {u}" for u in refused
    ]
    report.seconds = time.perf_counter() - started
    return report


def check_site(
    site: Path,
    shots: Path | None = None,
    chromium: str | None = None,
    search_term: str | None = "attention",
    log=print,
    browsers: int = 2,
) -> list[PageReport]:
    """Check every page of ``site``; returns one report per page, in the order of the site's
    pages, the translator's last. On ``search.html`` it also searches for ``search_term``. The
    pages are shared out among ``browsers`` Chromium instances, each driven from a thread of its
    own (Playwright's API is not thread-safe: one instance per thread), since a page mostly waits
    on its browser. Raises SiteCheckError when the check cannot run (no site, no page, no
    Chromium, no Playwright)."""
    site = Path(site)
    if not (site / "index.html").is_file():
        raise SiteCheckError(f"{site}/index.html not found: build the book first (make book)")
    pages = site_pages(site)
    if not pages:
        raise SiteCheckError(f"no HTML page found under {site}")
    executable = find_chromium(chromium)
    if executable is None:
        raise SiteCheckError(
            "Chromium not found: install Debian's package (apt-get install chromium) "
            "or name the executable with --chromium or $CHROMIUM"
        )
    try:
        import playwright.sync_api  # noqa: F401 - each thread starts its own instance
    except ImportError as err:
        raise SiteCheckError(f"Playwright is not installed ({err}): make install") from err
    if shots is not None:
        shutil.rmtree(shots, ignore_errors=True)
        shots.mkdir(parents=True)
    # Reports are numbered in the site's order, the translator's last, but the translator is
    # taken first: it is the longest task, and a long one last would keep one browser busy while
    # the other has nothing left.
    pending = queue.SimpleQueue()
    if (site / translator_check.TRANSLATOR_PAGE).is_file():
        pending.put((len(pages), None))
    for number, path in enumerate(pages):
        pending.put((number, path))
    tasks = pending.qsize()
    with serve(site) as base:
        browsing = _Browsing(site, base, executable, shots, search_term, log)
        threads = [
            threading.Thread(target=browsing.work, args=(pending,))
            for _ in range(max(1, min(browsers, tasks)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if browsing.failure is not None:
        raise browsing.failure
    notebooks = check_notebooks(site)
    failed = [report for report in notebooks if not report.ok]
    log(f"{'FAIL' if failed else 'ok  '} {len(notebooks)} published notebooks: build paths, glue")
    for report in failed:
        log(f"     {report.page}: " + "; ".join(report.problems))
    return [browsing.found[number] for number in range(tasks)] + notebooks


@dataclass
class _Browsing:
    """What each thread of ``check_site`` needs to check tasks in a browser of its own."""

    site: Path
    base: str
    executable: str
    shots: Path | None
    search_term: str | None
    log: Callable[[str], None]
    found: dict = field(default_factory=dict)  # task number -> its report
    lock: threading.Lock = field(default_factory=threading.Lock)  # one log line at a time
    failure: BaseException | None = None  # a browser that could not start, re-raised by the caller

    def keep(self, number: int, report) -> None:
        with self.lock:  # a report's lines stay together in the log
            self.found[number] = report
            if isinstance(report, PageReport):  # the translator's check logs its own lines
                self.log(report.summary())
                for problem in report.problems:
                    self.log(f"     {problem}")

    def work(self, pending: queue.SimpleQueue) -> None:
        """Take tasks (a page, or None for the translator) until none is left."""
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=self.executable, headless=True)
                try:
                    while True:
                        try:
                            number, task = pending.get_nowait()
                        except queue.Empty:
                            return
                        self.keep(number, self.check(browser, task))
                finally:
                    browser.close()
        except Exception as err:  # noqa: BLE001 - handed to the calling thread
            self.failure = err

    def check(self, browser, task: Path | None):
        if task is not None:
            return check_page(browser, self.site, self.base, task, self.shots, self.search_term)

        def log(line: str) -> None:
            with self.lock:
                self.log(line)

        def watch_page(page, problems):
            return watch(page, self.site, self.base, problems)

        return translator_check.check_translator(
            browser, self.site, self.base, watch_page, log, self.shots
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=Path("_build/html"), help="the built book")
    parser.add_argument(
        "--shots", type=Path, default=Path("_build/site-test"), help="where screenshots go"
    )
    parser.add_argument("--chromium", help="the Chromium executable (default: chromium on PATH)")
    parser.add_argument("--search", default="attention", help="a word the site's search must find")
    parser.add_argument(
        "--browsers", type=int, default=2, help="Chromium instances checking pages side by side"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        reports = check_site(
            args.site, args.shots, args.chromium, args.search, browsers=args.browsers
        )
    except SiteCheckError as err:
        print(f"site check: {err}", file=sys.stderr)
        return 2
    failed = [r for r in reports if not r.ok]
    print(
        f"site check: {sum(r.math for r in reports)} math, {sum(r.charts for r in reports)} "
        f"charts, in {time.perf_counter() - started:.0f} s; screenshots in {args.shots}"
    )
    print(f"site-check: {len(reports) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not reports else 0


if __name__ == "__main__":
    sys.exit(main())
