"""Which blocks of the built pages are wider than the text column, at a laptop's and a phone's width.

A reader who must scroll a table sideways to compare its last column with its first, or a command
to read its end, reads less. For each page (all pages of the site, or those named) and each
viewport width, this opens the page in headless Chromium and lists every table, code block,
output, image and figure whose content is wider than the article's column, with its width, and
saves a screenshot of each page at each width. Chromium and the local server are those of
``tools/site_check.py``.

    python tools/page_widths.py                          # every page, at 1280 and 390 px
    python tools/page_widths.py book/real_run.html --widths 1280 --shots _build/widths
    python tools/page_widths.py --check                  # exit 1 if a block overflows at 1280 px

With ``--check`` the first width is the one that must fit; the others are reported only (on a
phone, code keeps its lines and scrolls; tables and commands should still fit).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_check import RENDER_TIMEOUT_MS, find_chromium, serve, site_pages  # noqa: E402

# For every block that can be wider than the column: its kind, its own width, the column's, and
# the start of its text. A block scrolls inside its own box (pre, a table's wrapper), so its
# scrollWidth is what a reader would have to scroll through.
_WIDE_JS = """
() => {
  const column = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!column) return {column: 0, wide: []};
  const width = column.clientWidth;
  const kinds = [
    ["table", "table"],
    ["output", ".cell_output pre, .output pre"],
    ["code", ".cell_input pre, div.highlight pre"],
    ["image", "img, svg.transformer-figure"],
    ["chart", ".vega-embed"],
  ];
  const seen = new Set();
  const wide = [];
  for (const [kind, selector] of kinds) {
    for (const element of column.querySelectorAll(selector)) {
      if (seen.has(element)) continue;
      seen.add(element);
      const own = Math.max(element.scrollWidth, element.getBoundingClientRect().width);
      if (own > width + 1) {
        wide.push({kind, width: Math.round(own), text: (element.innerText || "").slice(0, 60)});
      }
    }
  }
  return {column: width, wide};
}
"""


def measure(site: Path, pages: list[Path], widths: list[int], shots: Path | None, log=print):
    """{(page, width): (column width, [wide blocks])} for every page and width."""
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    if executable is None:
        raise SystemExit("page widths: Chromium not found (apt-get install chromium)")
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    results = {}
    with serve(site) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            for path in pages:
                relative = path.relative_to(site).as_posix()
                for width in widths:
                    context = browser.new_context(viewport={"width": width, "height": 900})
                    page = context.new_page()
                    page.goto(base + relative, wait_until="load", timeout=RENDER_TIMEOUT_MS)
                    page.wait_for_timeout(1500)  # charts and math draw after load
                    state = page.evaluate(_WIDE_JS)
                    if shots is not None:
                        name = relative.replace("/", "__").removesuffix(".html")
                        page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
                    context.close()
                    results[relative, width] = (state["column"], state["wide"])
                    log(
                        f"{relative} at {width} px: column {state['column']} px, "
                        f"{len(state['wide'])} wider blocks"
                    )
                    for block in state["wide"]:
                        text = " ".join(block["text"].split())[:50]
                        log(f"    {block['kind']:6} {block['width']:5} px  {text}")
        finally:
            browser.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help="pages relative to the site (default: all)")
    parser.add_argument("--site", type=Path, default=Path("_build/html"), help="the built book")
    parser.add_argument("--widths", type=int, nargs="+", default=[1280, 390], help="in pixels")
    parser.add_argument("--shots", type=Path, help="where screenshots go (none by default)")
    parser.add_argument("--check", action="store_true", help="fail if a block is too wide")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(
            f"page widths: {args.site}/index.html not found: build the book first", file=sys.stderr
        )
        return 2
    pages = [args.site / p for p in args.pages] or site_pages(args.site)
    missing = [str(p) for p in pages if not p.is_file()]
    if missing:
        print(f"page widths: no such page: {', '.join(missing)}", file=sys.stderr)
        return 2
    results = measure(args.site, pages, args.widths, args.shots)
    first = args.widths[0]
    over = [page for (page, width), (_, wide) in results.items() if width == first and wide]
    if args.check and over:
        print(f"wider than the column at {first} px: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
