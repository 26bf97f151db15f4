"""Which code made a result: the git commit of this checkout, for the manifests the run scripts
write (tools/real_run.py, tools/table3.py).

A GPU machine receives a copy of the working tree without .git; there the commit comes from an
environment variable that the session's command sets (see tools/gpu/*.sh).
"""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*command: str) -> str | None:
    """The output of ``git <command>`` in this checkout, or None where git or .git is missing."""
    try:
        done = subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(environment_variable: str) -> dict:
    """The commit and whether the checkout had changes; from ``environment_variable`` when the
    copy has no git history."""
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": os.environ.get(environment_variable), "git_source": "environment"}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status), "git_source": "git"}
