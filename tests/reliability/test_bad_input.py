"""Bad input is refused at submit (or load) with the field named, and nothing running is harmed."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.fields import TEMPERATURE_MAX, TEMPERATURE_MIN
from v2.errors import RequestError
from v2.runtime import Runtime


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def bystander(runtime):
    """A request running through every refusal below; it must finish untouched."""
    handle = runtime.submit({"text": "I keep running.", "seed": 3, "max_frames": 60, "min_frames": 60})
    deadline = time.time() + 120  # a hang check
    while runtime.stats()["waiting"]:  # admitted: the queue is then the tests' alone
        assert time.time() < deadline, runtime.stats()
        time.sleep(0.005)
    yield handle
    result = handle.result(120)
    assert result.finish_reason == "length" and len(result.codes) == 60


def refused(runtime, request, field: str) -> None:
    """Refused at submit: the error's `field` is `field` (what a server maps), and its message starts with it."""
    with pytest.raises(RequestError) as e:
        runtime.submit(request)
    assert e.value.field == field and str(e.value).startswith(field), (e.value.field, str(e.value))


PAD = [1024] * 12


@pytest.mark.parametrize("request_,field", [
    ({"text": ""}, "text"), ({"text": " \n\t "}, "text"), ({}, "text"),
    ({"text": "x", "prompt_rows": [[1] + PAD]}, "text"),
    ({"text": "word " * 400}, "text"),  # beyond max_prompt_rows
    ({"prompt_rows": [[1] + PAD] * 1025}, "prompt_rows"),
    ({"prompt_rows": [[1] * 12]}, "prompt_rows"), ({"prompt_rows": [[1, 2], [3, 4]]}, "prompt_rows"),
    ({"prompt_rows": [[999_999] + PAD]}, "prompt_rows"), ({"prompt_rows": [[1] + [2000] * 12]}, "prompt_rows"),
    ({"prompt_rows": [[1.5] + PAD]}, "prompt_rows"), ({"prompt_rows": []}, "prompt_rows"),
    ({"text": "x", "reference_codes": [[5000] * 12]}, "reference_codes"),
    ({"text": "x", "reference_codes": [[1] * 11]}, "reference_codes"),
    ({"text": "x", "reference_codes": [[1] * 12] * 2000}, "reference_codes"),  # the longest part of a long prompt
    ({"text": "x", "sampling": {"temperature": float("nan")}}, "sampling.temperature"),
    ({"text": "x", "sampling": {"temperature": -0.1}}, "sampling.temperature"),
    ({"text": "x", "sampling": {"audio": {"temperature": 1e9}}}, "sampling.audio.temperature"),
    ({"text": "x", "sampling": {"top_p": 0.0}}, "sampling.top_p"), ({"text": "x", "sampling": {"top_p": 1.01}}, "sampling.top_p"),
    ({"text": "x", "sampling": {"top_k": -1}}, "sampling.top_k"),
    ({"text": "x", "sampling": {"repetition_penalty": 0}}, "sampling.repetition_penalty"),
    ({"text": "x", "sampling": {"repetition_penalty": float("inf")}}, "sampling.repetition_penalty"),
    ({"text": "x", "max_frames": 601}, "max_frames"), ({"text": "x", "max_frames": 0}, "max_frames"),
    ({"text": "x", "min_frames": 20, "max_frames": 10}, "min_frames"), ({"text": "x", "min_frames": 700}, "min_frames"),
    ({"text": "x", "profile": "training"}, "profile"), ({"text": "x", "seed": -1}, "seed"),
    ({"text": "x", "timeout": 0}, "timeout"), ({"text": "x", "stream": True, "decode_audio": False}, "stream"),
    ({"text": "x", "surprise": 1}, "surprise"),
])
def test_each_bad_input_class_is_refused_naming_the_field(runtime, bystander, request_, field):
    before = runtime.stats()
    refused(runtime, request_, field)
    after = runtime.stats()
    assert after["waiting"] == before["waiting"] and after["weight_version"] == before["weight_version"]


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 500)))
def test_temperature_domain(runtime, t):
    ok = t == 0 or TEMPERATURE_MIN <= t <= TEMPERATURE_MAX  # greedy, or the accepted range (designs/reliability.md)
    request = {"text": "x", "sampling": {"temperature": t}, "max_frames": 1}
    if ok:
        runtime.submit(request).cancel()
    else:
        refused(runtime, request, "sampling.temperature")


@settings(max_examples=40, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.one_of(st.integers(-3, 3000), st.integers(2**31 - 2, 2**70)))
def test_top_p_and_top_k_domains(runtime, p, k):
    request = {"text": "x", "sampling": {"top_p": p, "top_k": k}, "max_frames": 1}
    if not 0 <= k < 2**31:  # both bad: the error blames the first in the schema's order (top_k), names both
        refused(runtime, request, "sampling.top_k")
    elif not (0 < p <= 1):
        refused(runtime, request, "sampling.top_p")
    else:
        runtime.submit(request).cancel()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 6), st.integers(0, 15), st.integers(-3, 1100), st.integers(0, 300_000))
def test_prompt_rows_domain(runtime, t, width, code, ch0):
    rows = np.full((t, width), 1024, dtype=np.int64)
    if t and width:
        rows[:, 0] = ch0
        rows[-1, -1] = code
    ok = t >= 1 and width == 13 and ch0 < 264 and (0 <= code < 1024 or code == 1024)
    request = {"prompt_rows": rows, "max_frames": 1}
    if ok:
        runtime.submit(request).cancel()
    else:
        refused(runtime, request, "prompt_rows")


@settings(max_examples=25, deadline=None)
@given(st.integers(-2000, 2000), st.integers(-5, 5))
def test_frame_limits_domain(runtime, max_frames, min_frames):
    request = {"text": "x", "max_frames": max_frames, "min_frames": min_frames}
    if 1 <= max_frames <= 600 and 0 <= min_frames <= max_frames:
        runtime.submit(request).cancel()
    else:
        with pytest.raises(RequestError):
            runtime.submit(request)


def test_checkpoints_load_only_through_safetensors(tmp_path):
    from v2.models import CheckpointError
    from v2.models.moss_tts_local.model import MossTTSLocal

    (tmp_path / "config.json").write_text((__import__("conftest").MODEL_DIR / "checkpoint" / "config.json").read_text())
    torch.save({"transformer.norm.weight": torch.ones(64)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        MossTTSLocal.from_pretrained(tmp_path)


def test_unknown_card_is_refused():
    from v2.card import CardError

    with pytest.raises(CardError, match="not found"):
        Runtime.from_card("no_such_card")
