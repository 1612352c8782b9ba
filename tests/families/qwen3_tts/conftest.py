"""Fixtures of the Qwen3-TTS family's tests: the tiny reference, one runtime on its checkpoint, request helpers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

QWEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "qwen3_tts_tiny"
CHECKPOINT = QWEN_DIR / "checkpoint"
KEYS = ("cv", "cvd", "vd", "xv", "icl", "icln")
GREEDY = {"temperature": 0.0, "repetition_penalty": 1.0}


@pytest.fixture(scope="session")
def qref() -> dict[str, np.ndarray]:
    with np.load(QWEN_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def qcodec_ref() -> dict[str, np.ndarray]:
    with np.load(QWEN_DIR / "codec_reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def qmeta() -> dict[str, Any]:
    return json.loads((QWEN_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def qrt() -> Iterator[Any]:
    """One runtime on the fixture checkpoint (its codec from checkpoint/speech_tokenizer/)."""
    from v2.runtime import Runtime

    rt = Runtime.from_card("qwen3_tts_tiny", checkpoint=str(CHECKPOINT), device="cpu")
    yield rt
    rt.close()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def request_of(meta: dict[str, Any], ref: dict[str, np.ndarray], key: str, **fields: Any) -> dict[str, Any]:
    """The fixture prompt `key` as a request of this family (its stored ids: the fixture's text ids are stand-ins)."""
    p = next(x for x in meta["prompts"] if x["key"] == key)
    req: dict[str, Any] = {"text_ids": ref[f"{key}_input_ids"][3:-5].tolist(), "language": p["language"],
                           "text_feed": "whole" if p["non_streaming_mode"] else "streaming"}
    if p.get("speaker"):
        req["speaker"] = p["speaker"]
    if p["instruct_used"]:
        req["instruction_ids"] = ref[f"{key}_instruct_ids"][3:-2].tolist()
    if p["api"] == "voice_clone":
        req["reference_audio"] = (ref["spk_ref_wav"], 24000)
        if p["x_vector_only_mode"]:
            req["x_vector_only"] = True
        else:
            req["reference_text_ids"] = ref[f"{key}_ref_ids"][3:-2].tolist()
    return {**req, **fields}


def wait_idle(rt: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until the runtime holds no request, slot, KV block or encode; its stats then."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = rt.stats()
        if (s["running"] == s["waiting"] == s["kv_slots_in_use"] == s["codec_slots_in_use"]
                == s["encode_slots_in_use"] == s["kv_blocks_held"] == s["encoding"] == 0):
            return s
        time.sleep(0.01)
    raise AssertionError(f"runtime not idle: {rt.stats()}")
