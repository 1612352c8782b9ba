"""Fixtures of the CSM family's tests: the tiny reference, one runtime on its checkpoint, request helpers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

CSM_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "csm_tiny"
CHECKPOINT = CSM_DIR / "checkpoint"
KEYS = ("s0", "s1", "ctx")
GREEDY = {"temperature": 0.0}
ROLLOUT = {"profile": "rollout"}


def fixture_card(**backbone: Any) -> Any:
    """The release card (`csm_1b`) with a CPU-sized pool and buckets (its KV budget is a share of the free
    memory, sized for a GPU), for the fixture checkpoint; `backbone`: more of its loop's settings."""
    from v2.card import load_card

    card = load_card("csm_1b")
    bb = card.loops.backbone.model_copy(update=dict(
        dict(max_running=8, max_prompt_rows=256, max_frames=64, kv_memory_fraction=None, kv_blocks=None,
             batch_buckets=[1, 2, 4, 8], prefill_chunk_rows=64), **backbone))
    cd = card.loops.codec.model_copy(update=dict(max_streams=8, batch_buckets=[1, 2, 4, 8]))
    data = card.model_dump(by_alias=True)
    data["loops"]["backbone"] = bb.model_dump(by_alias=True)
    data["loops"]["codec"] = cd.model_dump(by_alias=True)
    return type(card).model_validate(data)


def runtime(**backbone: Any) -> Any:
    from v2.runtime import Runtime

    return Runtime.from_card(fixture_card(**backbone), checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def cref() -> dict[str, np.ndarray]:
    with np.load(CSM_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ccodec_ref() -> dict[str, np.ndarray]:
    with np.load(CSM_DIR / "codec_reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def cmeta() -> dict[str, Any]:
    return json.loads((CSM_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def crt() -> Iterator[Any]:
    """One runtime on the fixture checkpoint (float32, as the references were computed)."""
    rt = runtime()
    yield rt
    rt.close()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def turn_ids(ids: list[int], start: int) -> tuple[list[int], int]:
    """The ids of the turn opening at `start` (between its <|begin_of_text|> and <|end_of_text|>) and where
    the next turn's ids start (after an audio turn's <|AUDIO|> rows and <|audio_eos|>)."""
    end = ids.index(128001, start)
    nxt = end + 1
    while nxt < len(ids) and ids[nxt] in (128002, 128003):
        nxt += 1
    return ids[start + 1 : end], nxt


def request_of(ref: dict[str, np.ndarray], key: str, **fields: Any) -> dict[str, Any]:
    """The fixture prompt `key` as a request of this family (its stored ids: the fixture's text ids are stand-ins;
    `ctx`'s context audio as the wav array at 24 kHz)."""
    ids = ref[f"{key}_input_ids"].tolist()
    if key != "ctx":
        return {"text_ids": ids[1:-1], **fields}
    first, nxt = turn_ids(ids, 0)
    last, _ = turn_ids(ids, nxt)
    return {"text_ids": last, "context": [{"text_ids": first, "audio": (ref["ctx_context_wav"], 24000)}], **fields}


def wait_idle(rt: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until the runtime holds no request, slot, KV block or encode; its stats then."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = rt.stats()
        if (s["running"] == s["waiting"] == s["kv_slots_in_use"] == s.get("codec_slots_in_use", 0)
                == s["encode_slots_in_use"] == s["kv_blocks_held"] == s["encoding"] == 0):
            return s
        time.sleep(0.01)
    raise AssertionError(f"runtime not idle: {rt.stats()}")
