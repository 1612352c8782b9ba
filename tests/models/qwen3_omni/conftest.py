"""Fixtures of the Qwen3-Omni tiny reference: where it lives, its config, its arrays and its meta."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

_HERE = Path(__file__).resolve()
_PLACES = (_HERE.parents[2] / "fixtures" / "qwen3_omni_tiny",  # tests/fixtures/ (committed with the tests)
           _HERE.parents[3].parent / "shared" / "fixtures" / "qwen3_omni_tiny")  # the checkout's sibling
OMNI_DIR = next((p for p in _PLACES if (p / "reference.npz").is_file()), _PLACES[0])
CHECKPOINT = OMNI_DIR / "checkpoint"
KEYS = ("a", "b", "c", "d")


def _need() -> None:
    if not (OMNI_DIR / "reference.npz").is_file():
        pytest.fail(f"the Qwen3-Omni tiny fixture is not at {' or '.join(map(str, _PLACES))}")


@pytest.fixture(scope="session")
def oref() -> dict[str, np.ndarray]:
    _need()
    with np.load(OMNI_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ometa() -> dict:
    _need()
    return json.loads((OMNI_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def oconfig() -> dict:
    _need()
    return json.loads((CHECKPOINT / "config.json").read_text())


@pytest.fixture(scope="session")
def thinker() -> torch.nn.Module:
    _need()
    from v2.models.qwen3_omni.thinker import load_thinker

    return load_thinker(CHECKPOINT)
