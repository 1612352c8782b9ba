"""Fixtures of the Qwen3-ForcedAligner tiny reference: where it lives, its arrays, its meta and the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from v2.models.forced_aligner.loader import load_aligner
from v2.models.forced_aligner.model import ForcedAligner

_HERE = Path(__file__).resolve()
_PLACES = (_HERE.parents[2] / "fixtures" / "forced_aligner_tiny",  # tests/fixtures/ (committed with the tests)
           _HERE.parents[3].parent / "shared" / "fixtures" / "forced_aligner_tiny")  # the checkout's sibling
FA_DIR = next((p for p in _PLACES if (p / "reference.npz").is_file()), _PLACES[0])
CHECKPOINT = FA_DIR / "checkpoint"
CASES = ("en_short", "en_long", "zh")


def _need() -> None:
    if not (FA_DIR / "reference.npz").is_file():
        pytest.fail(f"the forced-aligner tiny fixture is not at {' or '.join(map(str, _PLACES))}")


def close(got: np.ndarray, ref: np.ndarray) -> bool:
    """The fixture's float tolerance: |got - ref| <= 2e-4 + 1e-4 |ref| everywhere (and the same shape)."""
    return got.shape == ref.shape and bool((np.abs(got - ref) <= 2e-4 + 1e-4 * np.abs(ref)).all())


@pytest.fixture(scope="session")
def fref() -> dict[str, np.ndarray]:
    _need()
    with np.load(FA_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def fmeta() -> dict:
    _need()
    return json.loads((FA_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def aligner() -> ForcedAligner:
    _need()
    return load_aligner(CHECKPOINT)
