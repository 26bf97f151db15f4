"""The GPU scripts in tools/gpu/: they parse, and they name the code's commit the one way the
library reads it (``transformer_lib.provenance.COMMIT_ENV``) where a copy has no .git."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from transformer_lib.provenance import COMMIT_ENV

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "tools" / "gpu").glob("*.sh"))


def test_there_are_scripts():
    assert SCRIPTS, "tools/gpu/ holds no *.sh script"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_commit_is_named_through_the_librarys_variable(script):
    text = script.read_text(encoding="utf-8")
    assert COMMIT_ENV in text, f"{script.name} does not say how to pass {COMMIT_ENV}"
    # Any other spelling (GIT_COMMIT, COMMIT) would be ignored by git_commit(): the manifests
    # would then name no commit.
    others = {name for name in re.findall(r"\b[A-Z_]*COMMIT\b", text) if name != COMMIT_ENV}
    assert not others, f"{script.name} names the commit through {sorted(others)}"


# How the project is made is no business of a reader who runs a script on a GPU machine.
MAKING_OF = re.compile(
    r"\b(sessions?|issues?|lent|device time|device tool|run tool|device machine|carry|"
    r"files_at|timeout_s|no GPU has run)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_script_speaks_to_its_reader(script):
    lines = script.read_text(encoding="utf-8").splitlines()
    found = [f"{i}: {line.strip()}" for i, line in enumerate(lines, 1) if MAKING_OF.search(line)]
    assert not found, f"{script.name} speaks of how the project is made:\n" + "\n".join(found)
