"""Shared test fixtures: the reference checkpoint, its arrays, and the tiny card's model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODEL_DIR = FIXTURES / "moss_tts_local_tiny"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ref() -> dict[str, np.ndarray]:
    with np.load(MODEL_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ref_model():
    from v2.models import MossTTSLocal

    return MossTTSLocal.from_pretrained(MODEL_DIR / "checkpoint")


@pytest.fixture(scope="session")
def tiny_card():
    from v2.card import load_card

    return load_card("moss_tts_local_tiny")


@pytest.fixture(scope="session")
def tiny_model(tiny_card):
    from v2.card import build_model

    return build_model(tiny_card)


CODEC_DIR = FIXTURES / "moss_codec_tiny"


@pytest.fixture(scope="session")
def codec_ref() -> dict[str, np.ndarray]:
    with np.load(CODEC_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ref_codec():
    from v2.models.codec import MossAudioDecoder

    return MossAudioDecoder.from_pretrained(CODEC_DIR / "checkpoint")


@pytest.fixture(scope="session")
def tiny_codec(tiny_card):
    from v2.card import build_codec

    return build_codec(tiny_card)
