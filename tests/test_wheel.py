"""Installed as a user gets it: a wheel built from the repository works in a fresh virtual
environment outside the clone.

The wheel is built from a copy of the package's files (so the build leaves nothing in the clone)
and installed by pip into a new virtual environment in a temporary folder, which resolves the
dependencies the package declares (pyproject.toml), held to the versions requirements.txt pins
(torch among them: its CPU build) as constraints. Nothing of the environment running the tests is
visible there, so ``transformer_lib`` and what it needs can only come from the wheel's
declarations. Every command then runs in an empty folder outside the clone.
"""

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from helpers import built_once
from test_model_download import make_site, serve

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "results" / "multi30k-de-en-laptop"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh virtual environment holding the wheel of this repository."""
    work = built_once(tmp_path_factory, "wheel", install_the_wheel)
    return work / "env" / "bin" / "python"


def install_the_wheel(work: Path) -> None:
    """Build the wheel in ``work`` and install it into a new virtual environment, ``work/env``."""
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "transformer_lib", source / "transformer_lib", ignore=ignore)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(work / "dist"), str(source)], check=True, cwd=work)
    (wheel,) = (work / "dist").glob("transformer_lib-*.whl")

    env_dir = work / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # The declared dependencies, resolved by pip, at the versions the book is tested with.
    pins = ["-c", str(ROOT / "requirements.txt")]
    install = [python, "-m", "pip", "install", "-q", "--no-compile", *pins, str(wheel)]
    subprocess.run(install, check=True, cwd=work)


def run_outside(python: Path, tmp_path: Path, *args: str, stdin: str = "", **env: str) -> str:
    """Run the environment's python in an empty folder outside the clone; return its stdout."""
    outside = tmp_path / "elsewhere"
    outside.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", **env}
    done = subprocess.run(
        [str(python), *args], input=stdin, capture_output=True, text=True, cwd=outside, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_package_imports_from_the_wheel(installed, tmp_path):
    code = "import transformer_lib, sys; print(transformer_lib.__file__); print(sys.version)"
    where = run_outside(installed, tmp_path, "-c", code).splitlines()[0]
    assert Path(where).is_relative_to(installed.parent.parent), where
    assert not Path(where).is_relative_to(ROOT)


@pytest.mark.slow
def test_the_wheel_is_typed_and_knows_its_version(installed, tmp_path):
    """PEP 561's marker travels in the wheel, and ``__version__`` reads the installed metadata."""
    code = (
        "import pathlib, transformer_lib as t\n"
        "here = pathlib.Path(t.__file__).parent\n"
        "print(all((here / f).is_file() for f in ('py.typed', '__init__.pyi')), t.__version__)"
    )
    typed, version = run_outside(installed, tmp_path, "-c", code).split()
    assert typed == "True" and version == "0.1.0"


@pytest.mark.slow
def test_the_public_names_come_with_it_and_the_book_machinery_does_not(installed, tmp_path):
    code = (
        "import importlib.util, transformer_lib as t\n"
        "from transformer_lib import Transformer, TransformerConfig, load_pretrained, translate\n"
        "print(len(t.__all__), Transformer.__module__, importlib.util.find_spec('transformer_lib.book'))"
    )
    out = run_outside(installed, tmp_path, "-c", code).split()
    assert out[1] == "transformer_lib.model" and int(out[0]) >= 8
    assert out[2] == "None", "the book's machinery runs from a clone, not from the wheel"


@pytest.mark.slow
def test_the_command_line_answers_from_the_wheel(installed, tmp_path):
    out = run_outside(installed, tmp_path, "-m", "transformer_lib", "--help")
    assert "translate" in out and "train" in out


@pytest.mark.slow
def test_a_model_folder_translates_from_the_wheel(installed, tmp_path):
    """The shipped German→English model, read from its folder by the installed command."""
    command = ["-m", "transformer_lib", "translate", "--model", str(SHIPPED), "--beam", "1"]
    out = run_outside(installed, tmp_path, *command, stdin="Ein Hund läuft im Park.\n")
    assert len(out.splitlines()) == 1 and out.strip(), out


@pytest.mark.slow
def test_a_shipped_model_by_name_downloads_from_a_copy_of_the_site(installed, tmp_path):
    """The installed package has no results/: it fetches the model from a local copy of the
    website, checks it, caches it, and translates with it."""
    server = serve(make_site(tmp_path / "site"))
    try:
        url = f"http://127.0.0.1:{server.server_port}/"
        cache = tmp_path / "cache"
        command = ["-m", "transformer_lib", "translate", "--model", "multi30k-de-en-laptop"]
        out = run_outside(
            installed,
            tmp_path,
            *command,
            "--beam",
            "1",
            stdin="Ein Hund läuft im Park.\n",
            TRANSFORMER_LIB_MODELS_URL=url,
            TRANSFORMER_LIB_CACHE=str(cache),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert len(out.splitlines()) == 1 and out.strip(), out
    assert (cache / "models" / "multi30k-de-en-laptop" / "model.safetensors").is_file()
