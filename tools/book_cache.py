"""One execution of each chapter serves both the tests and the website.

The book is built with MyST-NB's ``execute_notebooks: cache``: a chapter whose code has not changed
since its last successful execution is not run again, its outputs come from a jupyter-cache
folder. The tests execute the chapters (in parallel, one per pytest worker) in exactly the way
MyST-NB does and store each successful execution in that same folder, so the build that follows
``make test`` only writes the pages.

jupyter-cache recognises a chapter by its code cells alone. A chapter's outputs also depend on the
library it imports, on the benchmarks and the recorded results it reads, and on the pinned
versions, so this module keeps a digest of those files beside the cache and empties the cache when
the digest changes: a changed library is never shown with outputs of the old one.

    python tools/book_cache.py --refresh   # empty the cache if the inputs changed (make does this)
    python tools/book_cache.py --status    # which chapters have a current execution
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".jupyter_cache"  # MyST-NB's default, which _config.yml keeps
STAMP = CACHE / "inputs.sha256"
# Everything besides its own code that can change what a chapter prints.
INPUTS = (
    "transformer_lib/**/*.py",  # the library, and the book's machinery in transformer_lib/book
    "benchmarks/*.py",
    "results/**/*",
    "runs/laptop-de-en/average.pt",  # the walkthrough's model, when the laptop run is here
    "requirements.txt",
    "_config.yml",
)
# `make bench` writes CPU figures here that no chapter reads (they are measured live)
NOT_INPUTS = ("results/perf-cpu",)


def inputs_digest() -> str:
    """A SHA-256 over the names and bytes of every input file, in a fixed order."""
    root, digest = ROOT, hashlib.sha256()
    files = sorted(
        p
        for pattern in INPUTS
        for p in root.glob(pattern)
        if p.is_file() and not str(p.relative_to(root)).startswith(NOT_INPUTS)
    )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@contextlib.contextmanager
def _locked():
    """Serialise access to the cache's database between processes (pytest workers)."""
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock: the tests then run one chapter at a time anyway
        yield
        return
    with open(CACHE.parent / ".jupyter_cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def refresh() -> bool:
    """Empty the cache when the inputs changed since it was filled; True if it was emptied."""
    with _locked():
        digest = inputs_digest()
        if STAMP.is_file() and STAMP.read_text().strip() == digest:
            return False
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE.mkdir(parents=True)
        STAMP.write_text(digest + "\n")
        return True


def read_chapter(path: Path):
    """The chapter as MyST-NB reads it for the build (so that both compute the same cache key)."""
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    parse = yaml.safe_load((ROOT / "_config.yml").read_text()).get("parse", {})
    config = MdParserConfig(enable_extensions=set(parse.get("myst_enable_extensions", [])))
    text = Path(path).read_text(encoding="utf-8")
    return read_myst_markdown_notebook(text, config=config, path=path)


def _cache():
    from jupyter_cache import get_cache

    return get_cache(str(CACHE))


def is_cached(path: Path) -> bool:
    """Whether the cache holds a successful execution of the chapter's current code."""
    notebook = read_chapter(path)
    with _locked():
        try:
            _cache().match_cache_notebook(notebook)
        except KeyError:
            return False
    return True


def execute_and_cache(path: Path) -> str | None:
    """Execute the chapter as the build would (its folder as working directory, the book's
    timeout, errors not allowed) and cache it; the traceback text if a cell failed, else None."""
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.executors.utils import single_nb_execution

    config = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    notebook = read_chapter(path)
    result = single_nb_execution(
        notebook,
        cwd=str(Path(path).parent.resolve()),
        allow_errors=False,
        timeout=config.get("timeout", 30),
        meta_override=True,
    )
    if result.err is not None:
        return result.exc_string
    with _locked():
        _cache().cache_notebook_bundle(
            CacheBundleIn(
                notebook, str(Path(path).resolve()), data={"execution_seconds": result.time}
            ),
            check_validity=False,
            overwrite=True,
        )
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refresh", action="store_true", help="empty the cache if inputs changed")
    parser.add_argument("--status", action="store_true", help="list the chapters' cache state")
    args = parser.parse_args()
    if args.refresh:
        print("book cache: emptied (inputs changed)" if refresh() else "book cache: current")
    if args.status:
        sys.path.insert(0, str(ROOT / "tools"))
        from tangle import chapters_in_order

        for chapter in chapters_in_order(ROOT):
            state = "cached" if is_cached(chapter) else "to execute"
            print(f"{chapter.relative_to(ROOT)}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
