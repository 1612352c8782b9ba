"""Fixtures of the model tests: compiling Triton kernels for a GPU that is not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture
def hopper_compile(tmp_path: Path) -> Callable[..., list[int]]:
    """Run a script that compiles kernels for sm_90 and prints each cubin's size; returns the sizes.

    A fresh process without TRITON_INTERPRET (the interpreter patches triton.language while it runs in
    this one) and with an empty kernel cache, so the compiler really runs.
    """

    def run(script: str, *args: str) -> list[int]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(tmp_path)
        done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return [int(n) for n in done.stdout.split()]

    return run
