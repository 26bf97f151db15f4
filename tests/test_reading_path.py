"""Part I reads as the paper: the code a reader sees expanded stays a minority of each chapter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_part_one_shows_at_most_45_percent_code():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "code_share.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
