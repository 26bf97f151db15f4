"""A chapter's notebook runs anywhere: in a fresh environment, from an empty folder outside the
clone, its first cell (_ext/notebook_setup.py, the cell the website and ``make notebooks`` add)
fetches the book's source, works from its book/ folder and finds the data; offline, with the
source given as a local clone (TRANSFORMER_LIB_SOURCE) and Multi30k as TRANSFORMER_LIB_DATA.

The fresh environment has no transformer_lib: its dependencies come from the environment running
the tests through a path file (which, unlike a site folder, runs none of the clone's editable
install's own path files), so the library can only come from the fetched source.
"""

import json
import site
import subprocess
import sys
import venv
from pathlib import Path

import jupytext
import nbformat
import pytest
from helpers import require_multi30k

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
import book_site  # noqa: E402 - the extension lives in _ext/, outside the package

# Chapters that read the library only, the shipped models, and the recorded results.
CHAPTERS = ("model", "walkthrough", "variations")
UNREACHABLE = "http://127.0.0.1:9/source.tar.gz"  # nothing listens: no download can succeed

RUN = """
import json, sys
import nbclient, nbformat
notebook = nbformat.read(sys.argv[1], as_version=4)
client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                 resources={"metadata": {"path": sys.argv[2]}})
try:
    client.execute()
    print(json.dumps({"ok": True}))
except Exception as err:
    print(json.dumps({"ok": False, "error": str(err)[-3000:]}))
"""


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """A new virtual environment that sees the test environment's packages but not the clone."""
    env_dir = tmp_path_factory.mktemp("fresh") / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def notebook_with_setup(chapter: str, folder: Path) -> Path:
    """The chapter as the website offers it: a notebook whose first cell is the set-up."""
    notebook = jupytext.read(ROOT / "book" / f"{chapter}.md")
    source = book_site.setup_cell_source(source=UNREACHABLE)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(source))
    path = folder / f"{chapter}.ipynb"
    nbformat.write(notebook, path)
    return path


def run_notebook(python: Path, notebook: Path, folder: Path, **env: str) -> dict:
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(folder),
        "OMP_NUM_THREADS": "1",
        "TRANSFORMER_LIB_HOME": str(folder / "home" / "transformer-book"),
        "TRANSFORMER_LIB_RUNS": str(folder / "runs"),
        **env,
    }
    done = subprocess.run(
        [python, "-c", RUN, str(notebook), str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapter_runs_from_an_empty_folder_outside_the_clone(fresh_python, tmp_path, chapter):
    outside = tmp_path / "empty"
    outside.mkdir()
    notebook = notebook_with_setup(chapter, outside)
    result = run_notebook(
        fresh_python,
        notebook,
        outside,
        TRANSFORMER_LIB_SOURCE=str(ROOT),
        TRANSFORMER_LIB_DATA=str(require_multi30k()),
    )
    assert result["ok"], result.get("error")
    fetched = outside / "home" / "transformer-book"
    assert (fetched / "book" / f"{chapter}.md").is_file() and (fetched / "results").is_dir()


@pytest.mark.slow
def test_without_the_source_the_set_up_cell_stops_with_one_message(fresh_python, tmp_path):
    """No clone around, no source given, and the published one unreachable: the first cell
    stops the notebook, saying what to do, and nothing half-fetched is left."""
    outside = tmp_path / "empty"
    outside.mkdir()
    notebook = notebook_with_setup("attention", outside)
    result = run_notebook(fresh_python, notebook, outside)
    assert not result["ok"]
    assert "SetupError" in result["error"] and "TRANSFORMER_LIB_SOURCE" in result["error"]
    home = outside / "home"
    assert not home.exists() or not any(home.iterdir())


def test_the_set_up_cell_is_one_script_with_the_sites_source():
    class Config:
        html_theme_options = {"repository_url": "https://github.com/owner/book"}

    class App:
        config = Config()

    source = book_site.setup_cell_source(App())
    assert 'PUBLISHED_SOURCE = "https://github.com/owner/book/archive/' in source
    compile(source, "set-up cell", "exec")  # plain Python: no magics


# --- make notebooks and make lab ------------------------------------------------------------
def test_notebooks_go_where_the_build_does_not_read_and_a_readers_copy_is_kept(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import notebooks

    written, kept = notebooks.write_notebooks(tmp_path)
    assert len(written) == len(notebooks.tangle.chapters_in_order(ROOT)) and not kept
    first = nbformat.read(tmp_path / "attention.ipynb", as_version=4)
    assert "def set_up()" in first.cells[0].source
    import page_reading  # what the site check reads in the site's notebooks, read here too

    build_paths = page_reading.machine_paths([ROOT, Path.home()])
    for path in written:
        assert not page_reading.notebook_problems(path, build_paths), path
    again, kept = notebooks.write_notebooks(tmp_path)  # unchanged chapters: the same files
    assert len(again) == len(written) and not kept
    edited = tmp_path / "model.ipynb"
    edited.write_text(edited.read_text().replace("Figure 1", "my notes"))
    written, kept = notebooks.write_notebooks(tmp_path)
    assert kept == [edited] and "my notes" in edited.read_text()
    notebooks.write_notebooks(tmp_path, force=True)
    assert "my notes" not in edited.read_text()
    assert notebooks.OUT.parent.name == "_build"  # git, the tests and the build ignore it


def test_the_lab_opens_markdown_chapters_as_notebooks(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import lab

    path = tmp_path / "share/jupyter/lab/settings/overrides.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"other": {"kept": True}}))
    assert lab.write_overrides(tmp_path) == path
    settings = json.loads(path.read_text())
    viewers = settings["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == viewers["myst"] == "Jupytext Notebook"
    assert settings["other"] == {"kept": True}
