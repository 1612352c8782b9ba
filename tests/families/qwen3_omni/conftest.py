"""The Qwen3-Omni family on the runtime against the tiny fixture: one runtime over the release card with the
fixture's checkpoint (float32, as the references), and the fixture's requests."""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import CHECKPOINT, OMNI_DIR
from v2.runtime import Runtime

CARD = "qwen3_omni_30b_a3b_instruct"


@pytest.fixture(scope="session")
def fixture() -> tuple[dict[str, np.ndarray], dict]:
    with np.load(OMNI_DIR / "reference.npz") as data:
        ref = {k: data[k] for k in data.files}
    return ref, json.loads((OMNI_DIR / "meta.json").read_text())


def request(ref: dict[str, np.ndarray], meta: dict, key: str, **over: Any) -> dict[str, Any]:
    """The fixture's prompt `key` as a greedy request. The reference's capped thinker run never speaks its
    last token, so a capped prompt's speech is the speech of its first cap - 1 tokens (v2 speaks every
    token it returns): max_tokens is cap - 1 where the thinker hit its cap."""
    p = next(p for p in meta["prompts"] if p["key"] == key)
    capped = p["thinker_stop"] != "im_end" if "thinker_stop" in p else key != "a"
    out: dict[str, Any] = {"prompt_ids": p["input_ids"], "speaker": p["speaker"], "talker_temperature": 0.0,
                           "max_tokens": meta["thinker_cap"] - int(capped), "max_frames": meta["talker_cap"] - 1}
    if key == "c":
        out["audio"] = [(ref["c_audio_wave_16k"], 16000)]
    return out | over


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    with Runtime.from_card(CARD, checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float32) as runtime:
        yield runtime


def wait_idle(rt: Runtime, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the runtime holds no request, slot of any of the family's pools or KV block; its stats then."""
    import time

    deadline = time.time() + timeout
    keys = ("running", "waiting", "think_slots_in_use", "talk_slots_in_use", "c2w_slots_in_use", "kv_blocks_held")
    while time.time() < deadline:
        s = rt.stats()
        if all(s[k] == 0 for k in keys):
            return s
        time.sleep(0.01)
    raise AssertionError(f"runtime not idle: {rt.stats()}")
