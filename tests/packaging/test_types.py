"""`mypy v2` passes with the configuration in pyproject.toml (the package ships `py.typed`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_checks_the_package():
    pytest.importorskip("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy", "v2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
