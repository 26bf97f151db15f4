# Set-up: run this chapter anywhere (the website and `make notebooks` put this cell first).
# A chapter reads the book's folder around it: the library, results/ (recorded runs, shipped
# models) and benchmarks/. In a clone it is there; elsewhere (Colab, Binder, a folder of your own)
# this cell fetches the book's source once into ~/transformer-book, works from its book/ folder,
# installs what the chapter imports and is missing, and finds Multi30k. It stops with one message
# when it cannot. Environment variables: TRANSFORMER_LIB_SOURCE (a clone, or the path or URL of
# an archive of one), TRANSFORMER_LIB_HOME (where to put it), TRANSFORMER_LIB_DATA (Multi30k).
import importlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

PUBLISHED_SOURCE = "__PUBLISHED_SOURCE__"  # the book's repository at this site's commit


class SetupError(Exception):
    """The chapter cannot run here; the message says what to do."""


def book_root(start: Path) -> Path | None:
    """The clone (or fetched copy) around ``start``: the folder that holds the book's files."""
    for folder in (start, *start.parents):
        if all((folder / name).exists() for name in ("_toc.yml", "transformer_lib", "results")):
            return folder
    return None


def fetch_source(source: str, home: Path) -> None:
    """Put the book's source into ``home``: copied from a clone, or unpacked from an archive."""
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    try:
        if Path(source).is_dir():
            skip = shutil.ignore_patterns(".git", ".venv", "_build", "node_modules", "__pycache__")
            shutil.copytree(source, staging / "source", ignore=skip)
        else:
            archive = staging / ("source.zip" if source.endswith(".zip") else "source.tar.gz")
            if Path(source).is_file():
                shutil.copy(source, archive)
            else:
                print(f"downloading the book's source from {source} ...")
                with urllib.request.urlopen(source, timeout=120) as response:
                    archive.write_bytes(response.read())
            unpacked = staging / "unpacked"
            if archive.suffix == ".zip":
                zipfile.ZipFile(archive).extractall(unpacked)
            else:
                with tarfile.open(archive) as tar:
                    tar.extractall(unpacked, filter="data")
            (top,) = unpacked.iterdir()  # an archive of a repository holds one folder
            top.rename(staging / "source")
        if book_root(staging / "source") != staging / "source":
            raise SetupError(f"{source} does not hold the book (no _toc.yml, transformer_lib/)")
        (staging / "source").rename(home)
    except OSError as err:
        raise SetupError(
            f"could not fetch the book's source from {source} ({err}): check the network, or "
            "set TRANSFORMER_LIB_SOURCE to a clone of the book or an archive of one"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def missing_requirements(root: Path) -> list[str]:
    """What the library and the chapters need (pyproject.toml: the dependencies and the
    ``notebooks`` extra) that is not installed here, at any version."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["notebooks"]
    missing = []
    for requirement in wanted:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(requirement)
    return missing


def install(requirements: list[str]) -> None:
    print(f"installing {', '.join(requirements)} ...")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise SetupError(f"could not install {', '.join(requirements)}: {last}")
    importlib.invalidate_caches()


def find_multi30k(root: Path) -> None:
    """Point TRANSFORMER_LIB_DATA at Multi30k: the reader's, a copy beside the clone, or the
    library's checked download into its cache."""
    if os.environ.get("TRANSFORMER_LIB_DATA"):
        return
    beside = root.parent / "shared" / "data" / "multi30k"
    if beside.is_dir():
        os.environ["TRANSFORMER_LIB_DATA"] = str(beside)
        return
    from transformer_lib import data

    try:
        for split in data.SPLITS:
            for language in data.LANGUAGES:
                data.multi30k_file(split, language)  # downloads once into the cache, checked
    except (data.DataError, data.DataNotFoundError) as err:
        raise SetupError(str(err)) from None
    os.environ["TRANSFORMER_LIB_DATA"] = str(data.cache_folder("multi30k"))


def set_up() -> Path:
    root = book_root(Path.cwd())
    if root is None:
        home = Path(os.environ.get("TRANSFORMER_LIB_HOME") or Path.home() / "transformer-book")
        if book_root(home) != home:
            fetch_source(os.environ.get("TRANSFORMER_LIB_SOURCE") or PUBLISHED_SOURCE, home)
        root = home
    os.chdir(root / "book")  # the chapters read ../results and ../benchmarks
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # this source's library, importable at once
    if missing := missing_requirements(root):
        install(missing)
    find_multi30k(root)
    return root


print(f"the book's folder: {set_up()}")
