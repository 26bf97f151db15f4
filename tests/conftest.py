"""Shared fixtures: the repository root and the chapters named in _toc.yml."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # tools/ is not a package; its scripts are imported by name


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
