"""Named models from an installed package: downloaded from a copy of the website, checked against
the hashes the package ships, cached, and never left half-written.

A local HTTP server on 127.0.0.1 serves a folder laid out as ``make book`` lays out the site
(``models/<name>/``, by the site extension's own function); ``RESULTS`` points nowhere, as in a
package installed from a wheel.
"""

import functools
import hashlib
import json
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from transformer_lib import pretrained
from transformer_lib.pretrained import DownloadError, ModelNotFoundError, load_pretrained

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
import book_site  # noqa: E402 - the extension lives in _ext/, outside the package

NAME = "multi30k-de-en-laptop"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(folder: Path):
    """Serve ``folder`` on 127.0.0.1 (a free port) in a thread; returns the server."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def make_site(folder: Path, names=(NAME,)) -> Path:
    """A folder holding the shipped models as the built site does (``models/<name>/``)."""
    found = book_site.published_model_files(ROOT / "results", folder)
    assert not found["problems"], found["problems"]
    for target, source in found["files"].items():
        if target.parent.name in names:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    return folder


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package without results/ (as from a wheel), its cache in tmp_path/cache."""
    monkeypatch.setattr(pretrained, "RESULTS", tmp_path / "no-results")
    monkeypatch.setenv("TRANSFORMER_LIB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


@pytest.fixture
def site(tmp_path, monkeypatch):
    site = make_site(tmp_path / "site")
    server = serve(site)
    monkeypatch.setenv("TRANSFORMER_LIB_MODELS_URL", f"http://127.0.0.1:{server.server_port}/")
    yield site
    server.shutdown()
    server.server_close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(pretrained.SHIPPED_SHA256))
def test_the_shipped_hashes_are_the_recorded_models(name):
    """The table the package ships is what results/ holds: the models' files and their report."""
    folder = ROOT / "results" / name
    recorded = json.loads((folder / "manifest.json").read_text())["shipped_model"]["sha256"]
    expected = pretrained.SHIPPED_SHA256[name]
    assert {f: d for f, d in expected.items() if f in recorded} == recorded
    assert set(expected) == set(pretrained.DOWNLOADED_FILES)
    for file, digest in expected.items():
        assert sha256(folder / file) == digest, f"{name}/{file}: update SHIPPED_SHA256"


def test_a_name_downloads_into_the_cache_and_then_needs_no_site(installed, site, monkeypatch):
    model, tokenizer = load_pretrained(NAME)
    folder = installed / NAME
    for file, digest in pretrained.SHIPPED_SHA256[NAME].items():
        assert sha256(folder / file) == digest
    reference, _ = pretrained.load_pretrained(ROOT / "results" / NAME)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    with torch.no_grad():
        assert torch.equal(model(src, tgt), reference(src, tgt))
    assert [p.name for p in installed.iterdir()] == [NAME]  # no staging folder left
    monkeypatch.setenv("TRANSFORMER_LIB_MODELS_URL", "http://127.0.0.1:9/")  # nothing listens
    again, _ = load_pretrained(NAME)  # from the cache, without the site
    alpha = json.loads((folder / "bleu.json").read_text())["alpha"]
    search = again.record.search
    assert search == reference.record.search and search.alpha == alpha  # the report came too


def test_a_file_of_another_version_is_refused_and_nothing_is_kept(installed, site):
    tokenizer = site / "models" / NAME / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace("<unk>", "<UNK>"))
    with pytest.raises(DownloadError, match="SHA-256 differs") as error:
        load_pretrained(NAME)
    assert "\n" not in str(error.value)
    assert not installed.exists() or list(installed.iterdir()) == []


def test_a_manifest_of_another_model_is_refused(installed, site):
    manifest = site / "models" / NAME / "manifest.json"
    entry = json.loads(manifest.read_text())
    entry["shipped_model"]["sha256"]["config.json"] = "0" * 64
    manifest.write_text(json.dumps(entry))
    with pytest.raises(DownloadError, match="records other files"):
        load_pretrained(NAME)
    assert not installed.exists() or list(installed.iterdir()) == []


def test_no_network_is_one_clear_line(installed, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LIB_MODELS_URL", "http://127.0.0.1:9/")  # nothing listens
    with pytest.raises(DownloadError, match="could not download .*TRANSFORMER_LIB_MODELS_URL"):
        load_pretrained(NAME)
    assert not installed.exists() or list(installed.iterdir()) == []


def test_a_damaged_cached_file_is_downloaded_again(installed, site):
    load_pretrained(NAME)
    cached = installed / NAME / "model.safetensors"
    cached.write_bytes(cached.read_bytes()[:-8])
    load_pretrained(NAME)
    assert sha256(cached) == pretrained.SHIPPED_SHA256[NAME]["model.safetensors"]


def test_an_unknown_name_lists_the_shipped_models(installed):
    with pytest.raises(ModelNotFoundError, match="multi30k-en-de-laptop"):
        load_pretrained("multi30k-fr-en")


def test_the_command_line_reports_a_failed_download_in_one_line(tmp_path):
    """From an installed package's point of view (no results/ beside it): exit status 2."""
    code = (
        "import sys, pathlib; from transformer_lib import pretrained; "
        "pretrained.RESULTS = pathlib.Path('/nonexistent'); "
        "from transformer_lib.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TRANSFORMER_LIB_CACHE": str(tmp_path / "cache"),
        "TRANSFORMER_LIB_MODELS_URL": "http://127.0.0.1:9/",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, "translate", "--model", NAME],
        input="Ein Hund.\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "could not download" in done.stderr
