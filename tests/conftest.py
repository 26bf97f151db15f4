"""Shared fixtures: the repository root and the chapters named in _toc.yml."""

import os
import sys
from pathlib import Path

# pytest's two workers share two cores. With PyTorch's default of one thread per core, each
# process's threads spin waiting for threads the other process has descheduled: a small training
# step measured 62 ms on one thread and 1.8 s on two under that load. Chapter kernels and the
# commands the tests start inherit this, so it is set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # tools/ is not a package; its scripts are imported by name

# The tests never write into the user's caches (~/.cache/transformer_lib), unless the caller
# names them. Runs trained by ``book.runs.cached_run`` go to the repository's own _build/runs (git
# ignores it, ``make clean`` removes it): one folder for every pytest worker and every chapter
# kernel, kept between sessions, so that a run is trained once and the chapters share it. The
# data is read from the folder the tests use (helpers.MULTI30K), never downloaded into the cache.
if not os.environ.get("TRANSFORMER_LIB_RUNS"):
    os.environ["TRANSFORMER_LIB_RUNS"] = str(ROOT / "_build" / "runs")
if not os.environ.get("TRANSFORMER_LIB_DATA"):
    os.environ["TRANSFORMER_LIB_DATA"] = str(ROOT.parent / "shared" / "data" / "multi30k")
# The chapters the tests execute are the website's (tools/book_cache.py stores them for the
# build): they run as in the build, not as for a reader in Jupyter (transformer_lib.book.jupyter).
os.environ["TRANSFORMER_LIB_BOOK_BUILD"] = "1"


@pytest.fixture
def multi30k() -> Path:
    """The Multi30k folder; the test fails when the files are missing (see helpers.py)."""
    from helpers import require_multi30k

    return require_multi30k()


@pytest.fixture(autouse=True)
def threads_as_set_above():
    """Every test starts with the worker's PyTorch threads (OMP_NUM_THREADS, above): a benchmark's
    main, which a test may run in-process, sets its record's count, and the worker's later tests
    would otherwise run on two threads beside the other worker (a whole test set's translations
    then ran several times slower)."""
    yield
    torch = sys.modules.get("torch")
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def pytest_sessionstart(session):
    """Empty the book's execution cache if the library or results changed (once, before the
    workers start): the chapter tests then fill it for the build."""
    if not hasattr(session.config, "workerinput"):
        import book_cache

        book_cache.refresh()
