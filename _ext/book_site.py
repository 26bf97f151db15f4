"""Sphinx extension for the book's website: pages that work offline, and notebooks that run anywhere.

Loaded through ``_config.yml`` (``sphinx.local_extensions``). It does these things:

* **Vega offline.** Altair's HTML output loads vega, vega-lite and vega-embed from a CDN unless
  the page already has them: it skips a library when the global ``VEGA_DEBUG`` says that version
  is loaded. We write the three libraries as one script into ``_static/`` (bundled by
  ``vl-convert-python`` for the Vega-Lite version of the installed altair), wrapped in a function
  so its top-level names cannot clash with Sphinx's scripts, and ending with the globals altair
  looks for. Pages with a chart load it synchronously in ``<head>``, before the chart's own script.
  (MathJax comes from ``sphinx-mathjax-offline``, listed in ``_config.yml``.)
* **Downloadable notebooks that set themselves up.** The theme offers each chapter as an executed
  ``.ipynb`` under ``_sources/``; we put a first cell into it (``_ext/notebook_setup.py``) that,
  outside a clone (a fresh Colab or Binder session), fetches the book's source at the site's
  commit, works from its ``book/`` folder, installs what the chapters import and is missing, and
  finds Multi30k, or stops with one message that says what to do.
* **Launch links.** Colab opens notebooks from GitHub only, and only ``.ipynb`` files, but the book
  keeps its chapters as Markdown: the links point at the notebooks the site publishes on the
  ``book_site_notebooks_branch`` (``gh-pages``, see ``.github/workflows/pages.yml``). The same
  branch carries a ``binder/`` environment, so Binder starts with the library installed.
* **The right repository.** ``BOOK_REPOSITORY=<owner>/<name>`` in the environment (the publishing
  workflow sets it) points the repository, issue and launch buttons at that repository.
* **The translator page.** ``book/translator.md`` translates in the reader's browser. Its own ES
  modules (``web/translator/``), the JavaScript libraries it runs, installed by
  ``npm ci --ignore-scripts`` from the committed lock file (onnxruntime-web's WebAssembly build and
  Hugging Face's tokenizer, copied from ``node_modules/``, never bundled), and the models' graphs
  that ``make book`` exports (``_build/translator/``, see the chapter *Out of PyTorch*) are
  copied into ``_static/translator/``. The page that holds the translator gets its module and
  stylesheet, and the index of the models (what each file weighs) written into the page, so that
  the page can say how much it will download before it downloads anything.
* **The shipped models, for installed packages.** Each model that ``transformer_lib`` knows by
  name (``transformer_lib.pretrained.SHIPPED_SHA256``) is published at ``models/<name>/`` of the
  site, copied from ``results/`` (or ``$TRANSFORMER_LIB_MODELS``): a package installed from a
  wheel downloads it from there and checks every file against the hashes it ships.
* **Code that fits.** A stylesheet narrows the "On this page" column and the code font a little,
  so that a line of code of 100 characters fits the text column at a laptop's width; long output
  lines wrap there, and tables take a smaller font on a phone.
* **Pictures described.** A picture a cell draws has no alt text of its own, and Sphinx then
  writes its file name as the alt text; in a figure with a caption, the caption becomes the alt
  text (a cell's ``mystnb.image.alt`` still wins).
* **Clean consoles.** sphinx-thebe can register its configuration script twice, which throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page; we drop exact duplicates.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
STATIC_DIR = "book_site"  # under _static/
VEGA_SCRIPT = f"{STATIC_DIR}/vega-embed-bundle.js"
SETUP_TAG = "book-site-setup"  # the tag that marks the injected first cell (keeps it idempotent)


# ---------------------------------------------------------------------------------------------
# Vega, vega-lite and vega-embed served from the site
# ---------------------------------------------------------------------------------------------
def vega_bundle() -> str:
    """The script that serves vega, vega-lite and vega-embed for the installed altair."""
    import altair
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    loaded = {  # the versions altair's HTML output asks for, as it spells them
        "vega_version": altair.VEGA_VERSION,
        "vegalite_version": altair.VEGALITE_VERSION,
        "vegaembed_version": altair.VEGAEMBED_VERSION,
    }
    snippet = (
        "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;\n"
        f"window.VEGA_DEBUG = Object.assign(window.VEGA_DEBUG || {{}}, {json.dumps(loaded)});"
    )
    vl_version = vl_version_for_vl_convert()
    body = vl_convert.javascript_bundle(snippet=snippet, vl_version=vl_version)
    return (
        f"/* vega {vl_convert.get_vega_version()}, vega-lite {vl_version} and vega-embed "
        f"{vl_convert.get_vega_embed_version()}, bundled by vl-convert-python "
        f"{vl_convert.__version__} for altair {altair.__version__}. */\n"
        f"(function () {{\n{body}\n}})();\n"
    )


def write_vega_bundle(app: Sphinx) -> None:
    """Write the bundle into a static folder of the build, reused while the versions hold."""
    if app.builder.format != "html":
        return
    try:
        import altair
        import vl_convert
    except ImportError as err:  # a book without charts needs neither
        LOGGER.warning(f"[book_site] no vega bundle ({err}): altair charts would need a CDN")
        return
    static = Path(app.doctreedir).parent / "book_site_static"
    target = static / VEGA_SCRIPT
    stamp = static.with_suffix(".versions")  # beside the folder Sphinx copies, not in it
    versions = f"altair {altair.__version__}, vl-convert {vl_convert.__version__}"
    if not (target.is_file() and stamp.is_file() and stamp.read_text() == versions):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(vega_bundle(), encoding="utf-8")
        stamp.write_text(versions, encoding="utf-8")
    app.config.html_static_path.append(str(static))


# ---------------------------------------------------------------------------------------------
# The translator page: its modules, the vendored libraries and the exported models
# ---------------------------------------------------------------------------------------------
TRANSLATOR_DIR = "translator"  # under _static/
TRANSLATOR_SOURCE = "web/translator"  # the page's own modules, relative to the book's root
TRANSLATOR_INDEX = '<script type="application/json" id="translator-index"></script>'
# What the page runs, as _static/translator/vendor/<name> <- node_modules/<path>.
RUNTIME_FILES = {
    "ort.wasm.min.mjs": "onnxruntime-web/dist/ort.wasm.min.mjs",
    "ort-wasm-simd-threaded.mjs": "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs",
    "ort-wasm-simd-threaded.wasm": "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
    "tokenizers.min.mjs": "@huggingface/tokenizers/dist/tokenizers.min.mjs",
}
VENDOR_NOTICES = {"tokenizers.LICENSE": "@huggingface/tokenizers/LICENSE"}  # served beside it


def _synchronise(files: dict[Path, Path], folder: Path) -> None:
    """Make ``folder`` hold exactly ``files`` (target -> source), copying only what changed."""
    for target, source in files.items():
        same = target.is_file() and target.stat().st_size == source.stat().st_size
        if not (same and target.stat().st_mtime == source.stat().st_mtime):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for stale in [p for p in folder.rglob("*") if p.is_file() and p not in files]:
        stale.unlink()


def translator_files(root: Path, node_modules: Path, models: Path, folder: Path) -> dict:
    """Every file the translator page serves (target under ``folder`` -> source), and the
    problems that leave it without some (one sentence each, saying what to run)."""
    files, problems = {}, []
    for source in sorted((root / TRANSLATOR_SOURCE).glob("*")):
        files[folder / source.name] = source
    vendored = {**RUNTIME_FILES, **VENDOR_NOTICES}
    missing = [path for path in vendored.values() if not (node_modules / path).is_file()]
    if missing:
        problems.append(
            f"{node_modules} lacks {', '.join(missing)}: run `npm ci --ignore-scripts` "
            "(make book does) to install the translator's libraries"
        )
    else:
        files.update(
            {folder / "vendor" / name: node_modules / path for name, path in vendored.items()}
        )
    if (models / "translator.json").is_file():
        for source in sorted(models.rglob("*")):
            if source.is_file() and not source.name.startswith("."):
                files[folder / "models" / source.relative_to(models)] = source
    else:
        problems.append(
            f"{models} holds no exported models: run `make book`, which exports them "
            "(the chapter Out of PyTorch)"
        )
    return {"files": files, "problems": problems}


def write_translator_files(app: Sphinx) -> None:
    """Copy the translator page's files into a static folder of the build (see the docstring)."""
    app.book_site_translator_index = None
    root = Path(app.confdir)
    if app.builder.format != "html" or not (root / TRANSLATOR_SOURCE).is_dir():
        return
    node_modules = root / app.config.book_site_node_modules
    models = root / app.config.book_site_translator_models
    static = Path(app.doctreedir).parent / "book_site_static"
    found = translator_files(root, node_modules, models, static / TRANSLATOR_DIR)
    for problem in found["problems"]:
        LOGGER.warning(f"[book_site] the translator page will not work: {problem}")
    _synchronise(found["files"], static / TRANSLATOR_DIR)
    if str(static) not in app.config.html_static_path:
        app.config.html_static_path.append(str(static))
    if not found["problems"]:
        index = json.loads((models / "translator.json").read_text(encoding="utf-8"))
        index["runtime_bytes"] = sum(
            (node_modules / p).stat().st_size for p in RUNTIME_FILES.values()
        )
        app.book_site_translator_index = json.dumps(index, ensure_ascii=False)


def add_translator(app: Sphinx, context: dict) -> None:
    """On the page that holds the translator: its module, its styles and the models' index."""
    body = context.get("body") or ""
    if TRANSLATOR_INDEX not in body:
        return
    app.add_js_file(f"{TRANSLATOR_DIR}/translator.js", type="module")
    app.add_css_file(f"{TRANSLATOR_DIR}/translator.css")
    index = getattr(app, "book_site_translator_index", None)
    if index is not None:  # "</" could close the script element early
        escaped = index.replace("</", "<\\/")
        filled = TRANSLATOR_INDEX.replace("><", f">{escaped}<")
        context["body"] = body.replace(TRANSLATOR_INDEX, filled)


# ---------------------------------------------------------------------------------------------
# Code that fits the text column
# ---------------------------------------------------------------------------------------------
FIT_CSS = f"{STATIC_DIR}/fit.css"
# At a laptop's width (1280 px) the theme's text column holds about 77 characters of code at its
# 14 px, beside a 272 px column "On this page"; the book's code is formatted to 100 characters.
# A narrower "On this page" column (11rem) and code at 0.78rem (12.5 px) make a line of 100
# characters fit without scrolling. Outputs longer than the column (an error message, a dict)
# wrap on a screen at least 768 px wide; on a phone, code and outputs keep their lines (aligned
# columns of numbers stay aligned) and scroll inside their own box, and tables shrink their text.
FIT_RULES = """\
html { --pst-sidebar-secondary: 11rem; }
.bd-article div.highlight pre { font-size: 0.78rem; padding: 0.75rem; }
@media (min-width: 768px) {
  .bd-article div.cell_output pre { white-space: pre-wrap; overflow-wrap: anywhere; }
}
@media (max-width: 576px) {
  .bd-article table { font-size: 0.8rem; }
  .bd-article table td, .bd-article table th { padding: 0.25rem 0.35rem; }
}
"""


def write_fit_css(app: Sphinx) -> None:
    """Write the stylesheet that fits code to the column, and load it on every page."""
    if app.builder.format != "html":
        return
    static = Path(app.doctreedir).parent / "book_site_static"
    target = static / FIT_CSS
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file() or target.read_text(encoding="utf-8") != FIT_RULES:
        target.write_text(FIT_RULES, encoding="utf-8")
    if str(static) not in app.config.html_static_path:
        app.config.html_static_path.append(str(static))
    app.add_css_file(FIT_CSS)


def page_has_vega(context: dict) -> bool:
    body = context.get("body") or ""
    return "vegaEmbed" in body or "vega-embed" in body


# ---------------------------------------------------------------------------------------------
# Launch links and per-page scripts
# ---------------------------------------------------------------------------------------------
def github_repository(app: Sphinx) -> tuple[str, str] | None:
    """(org, repo) of the configured GitHub repository, or None."""
    url = (app.config.html_theme_options or {}).get("repository_url", "")
    if "github.com/" not in url:
        return None
    org, repo = url.split("github.com/", 1)[1].strip("/").split("/")[:2]
    return org, repo.removesuffix(".git")


def published_notebook(pagename: str) -> str:
    """Where the site puts a chapter's notebook, relative to the site's root."""
    return f"_sources/{pagename}.ipynb"


def on_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if page_has_vega(context):
        app.add_js_file(VEGA_SCRIPT, priority=200)  # before anything else; synchronous on purpose
    # Drop scripts registered twice with the same body (sphinx-thebe's configuration).
    # (One copy has the file name None, the other "": Sphinx's own check sees two scripts.)
    scripts, seen, unique = context.get("script_files", []), set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        if not getattr(script, "filename", None) and "body" in attributes:
            key = tuple(sorted(attributes.items()))
            if key in seen:
                continue
            seen.add(key)
        unique.append(script)
    scripts[:] = unique
    add_translator(app, context)
    retarget_launch_buttons(app, pagename, context)


def retarget_launch_buttons(app: Sphinx, pagename: str, context: dict) -> None:
    """Point Colab and Binder at the published .ipynb (the theme links the .md chapter)."""
    repository = github_repository(app)
    branch = app.config.book_site_notebooks_branch
    if repository is None or not branch or not context.get("ipynb_source"):
        return
    org, repo = repository
    path = published_notebook(pagename)
    launch = app.config.html_theme_options.get("launch_buttons", {})
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") == "Colab":
                colab = launch.get("colab_url", "").rstrip("/")
                button["url"] = f"{colab}/github/{org}/{repo}/blob/{branch}/{path}"
            elif button.get("text") == "Binder":
                binder = launch.get("binderhub_url", "").rstrip("/")
                button["url"] = f"{binder}/v2/gh/{org}/{repo}/{branch}?urlpath=lab/tree/{path}"


# ---------------------------------------------------------------------------------------------
# The notebooks the site offers: a first cell that sets up a fresh session
# ---------------------------------------------------------------------------------------------
def install_spec(app: Sphinx) -> str:
    """The pip requirement for the library this site was built from."""
    url = (app.config.html_theme_options or {}).get("repository_url", "").rstrip("/")
    ref = os.environ.get("BOOK_SITE_REF") or os.environ.get("GITHUB_SHA") or "main"
    return f"transformer_lib[notebooks] @ git+{url}@{ref}"


SETUP_SOURCE = Path(__file__).with_name("notebook_setup.py")  # the set-up cell, as a script


def archive_url(repository_url: str, ref: str) -> str:
    """GitHub's archive of a repository at a commit or branch."""
    return f"{repository_url.rstrip('/')}/archive/{ref}.tar.gz"


def published_source(app: Sphinx) -> str:
    """The archive of the repository at the commit this site was built from."""
    url = (app.config.html_theme_options or {}).get("repository_url", "")
    return archive_url(
        url, os.environ.get("BOOK_SITE_REF") or os.environ.get("GITHUB_SHA") or "main"
    )


def setup_cell_source(app: Sphinx | None = None, source: str | None = None) -> str:
    """The first cell of every notebook the site offers: _ext/notebook_setup.py, fetching the
    book's source from ``source`` (default: this site's commit) where no clone is around."""
    text = SETUP_SOURCE.read_text(encoding="utf-8").rstrip("\n")
    return text.replace("__PUBLISHED_SOURCE__", source or published_source(app))


def add_setup_cell(path: Path, source: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    if notebook.cells and SETUP_TAG in notebook.cells[0].get("metadata", {}).get("tags", []):
        notebook.cells.pop(0)  # an older set-up cell: replace it
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [SETUP_TAG]})
    if notebook.nbformat_minor < 5:
        cell.pop("id", None)  # cell ids arrived with nbformat 4.5
    notebook.cells.insert(0, cell)
    nbformat.write(notebook, path)


def binder_environment(app: Sphinx) -> dict[str, str]:
    return {
        "binder/runtime.txt": "python-3.11\n",
        "binder/requirements.txt": f"{install_spec(app)}\n",
    }


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    source = setup_cell_source(app)
    chapters = 0
    for docname in app.env.found_docs:
        notebook = outdir / published_notebook(docname)
        if notebook.is_file():
            add_setup_cell(notebook, source)
            chapters += 1
    LOGGER.info(f"[book_site] set-up cell added to {chapters} downloadable notebooks")
    if app.config.book_site_notebooks_branch:
        for name, text in binder_environment(app).items():
            (outdir / name).parent.mkdir(parents=True, exist_ok=True)
            (outdir / name).write_text(text, encoding="utf-8")
    publish_models(app, outdir)
    (outdir / ".nojekyll").touch()  # GitHub Pages must serve _static/ and _sources/ as they are


# ---------------------------------------------------------------------------------------------
# The shipped models, published for installed packages
# ---------------------------------------------------------------------------------------------
MODELS_DIR = "models"  # at the site's root: models/<name>/<file>, where transformer_lib looks


def published_model_files(models: Path, outdir: Path) -> dict:
    """Every shipped model's file the site serves (target under ``outdir`` -> source in
    ``models``), and the models missing from ``models`` (one sentence each)."""
    from transformer_lib.pretrained import DOWNLOADED_FILES, SHIPPED_SHA256

    files, problems = {}, []
    for name in SHIPPED_SHA256:
        sources = [models / name / file for file in ("manifest.json", *DOWNLOADED_FILES)]
        if not all(source.is_file() for source in sources):
            problems.append(f"{models / name} lacks some of the files of the model {name}")
            continue
        files.update({outdir / MODELS_DIR / name / source.name: source for source in sources})
    return {"files": files, "problems": problems}


def publish_models(app: Sphinx, outdir: Path) -> None:
    """Copy the shipped models into ``models/`` of the built site (see the docstring)."""
    root = Path(app.confdir)
    models = Path(os.environ.get("TRANSFORMER_LIB_MODELS") or root / "results")
    found = published_model_files(models, outdir)
    for problem in found["problems"]:
        LOGGER.warning(f"[book_site] an installed package cannot download it: {problem}")
    _synchronise(found["files"], outdir / MODELS_DIR)
    LOGGER.info(f"[book_site] {len(found['files'])} files of the shipped models published")


def use_repository_from_environment(app: Sphinx, config) -> None:
    """``BOOK_REPOSITORY=<owner>/<name>`` (the publishing workflow sets it) points the site's
    repository, issue and launch buttons at that GitHub repository instead of _config.yml's."""
    repository = os.environ.get("BOOK_REPOSITORY", "").strip("/")
    if repository.count("/") == 1:
        config.html_theme_options["repository_url"] = f"https://github.com/{repository}"


def describe_pictures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give each image of a captioned figure that has no alt text its caption as the alt text
    (once MyST-NB's post-transforms have turned a cell's outputs into images)."""
    for figure in doctree.findall(nodes.figure):
        caption = next(iter(figure.findall(nodes.caption)), None)
        if caption is None or not caption.astext().strip():
            continue
        for image in figure.findall(nodes.image):
            image.setdefault("alt", " ".join(caption.astext().split()))


def setup(app: Sphinx) -> dict:
    # The branch the Pages workflow publishes the built site to; "" turns the retargeting off.
    app.add_config_value("book_site_notebooks_branch", "gh-pages", "html")
    app.connect("config-inited", use_repository_from_environment)
    # Where the translator page's libraries and exported models are, relative to the book's root.
    app.add_config_value("book_site_node_modules", "node_modules", "html")
    app.add_config_value("book_site_translator_models", "_build/translator", "html")
    app.connect("builder-inited", write_vega_bundle)
    app.connect("builder-inited", write_translator_files)
    app.connect("builder-inited", write_fit_css)
    app.connect("html-page-context", on_page, priority=900)  # after the theme's buttons (501)
    app.connect("build-finished", on_build_finished)
    app.connect("doctree-resolved", describe_pictures)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
