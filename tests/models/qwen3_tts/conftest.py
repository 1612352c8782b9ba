"""Fixtures of the Qwen3-TTS tiny reference: the checkpoint, its arrays and prompt specs, the loaded model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import torch

from v2.models.qwen3_tts.prompt import PromptSpec, ids_tuple

QWEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "qwen3_tts_tiny"
CHECKPOINT = QWEN_DIR / "checkpoint"
KEYS = ("cv", "cvd", "vd", "xv", "icl", "icln")


@pytest.fixture(scope="session")
def qref() -> dict[str, np.ndarray]:
    with np.load(QWEN_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def qmeta() -> dict:
    return json.loads((QWEN_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def qconfig() -> dict:
    return json.loads((CHECKPOINT / "config.json").read_text())


@pytest.fixture(scope="session")
def qmodel():
    from v2.models.qwen3_tts.model import Qwen3TTS

    return Qwen3TTS.from_pretrained(CHECKPOINT)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Step-sized ops on a tiny model run several times faster on one intra-op thread on a shared CPU."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def spec_of(meta: dict, ref: dict[str, np.ndarray], key: str) -> PromptSpec:
    """The fixture prompt `key` as a PromptSpec (its ids are the stored ones)."""
    p = next(x for x in meta["prompts"] if x["key"] == key)

    def ids(name: str):
        return ids_tuple(ref[f"{key}_{name}"]) if f"{key}_{name}" in ref else None

    xvo = p["x_vector_only_mode"]
    return PromptSpec(mode=p["api"], input_ids=ids("input_ids"), language=p["language"], speaker=p.get("speaker"),
                      instruct_ids=ids("instruct_ids") if p["instruct_used"] else None,
                      x_vector_only=True if xvo is None else bool(xvo), ref_ids=ids("ref_ids"),
                      ref_frames=int(ref["icl_ref_codes"].shape[0]) if xvo is False else 0,
                      non_streaming=p["non_streaming_mode"])
