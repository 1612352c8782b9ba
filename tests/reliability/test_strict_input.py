"""Requests are snapshotted at submit, every array field goes through one strict converter, scalars are
strict and checked cheap-first, and instances are validated again at submit."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.fields import FieldError, int_tensor
from v2.errors import RequestError
from v2.families.moss_tts_local.request import SpeechRequest
from v2.runtime import Runtime

PAD = [1024] * 12


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def refused(runtime, request, field: str) -> str:
    with pytest.raises(RequestError) as e:
        runtime.submit(request)
    assert str(e.value).startswith(field), str(e.value)
    return str(e.value)


# ----- 2. the engine never reads caller memory ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["numpy", "tensor", "list"])
def test_mutating_the_callers_arrays_after_submit_changes_nothing(runtime, kind):
    prompt = np.array([[1] + PAD] * 3 + [[7] + [5] * 12], dtype=np.int64)
    codes = np.arange(24, dtype=np.int64).reshape(2, 12)
    make = {"numpy": lambda a: a.copy(), "tensor": lambda a: torch.from_numpy(a.copy()),
            "list": lambda a: a.tolist()}[kind]
    expected = [runtime.submit({"prompt_rows": prompt, "seed": 4, "max_frames": 8, "min_frames": 8}).result(60),
                runtime.submit({"text": "voice", "reference_codes": codes, "seed": 4, "max_frames": 8,
                                "min_frames": 8}).result(60)]
    mine_rows, mine_codes = make(prompt), make(codes)
    handles = [runtime.submit({"prompt_rows": mine_rows, "seed": 4, "max_frames": 8, "min_frames": 8,
                               "profile": "rollout"}),
               runtime.submit({"text": "voice", "reference_codes": mine_codes, "seed": 4, "max_frames": 8,
                               "min_frames": 8})]
    bystander = runtime.submit({"text": "bystander", "seed": 5, "max_frames": 8, "min_frames": 8})
    for arr in (mine_rows, mine_codes):  # the caller overwrites its arrays with garbage at once
        if kind == "list":
            for row in arr:
                row[:] = [10**9] * len(row)
        else:
            arr[...] = 10**9
    got = [h.result(60) for h in handles]
    assert bystander.result(60).finish_reason == "length"
    for g, e in zip(got, expected):
        assert g.finish_reason == "length" and np.array_equal(g.codes, e.codes)
    assert np.array_equal(got[0].trajectory.prompt_rows, prompt)


# ----- 3. one strict converter ---------------------------------------------------------------------------
INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(INT_DTYPES), st.integers(0, 4), st.integers(1, 13), st.sampled_from(["numpy", "tensor"]),
       st.booleans(), st.data())
def test_every_integer_dtype_in_range_converts_exactly(dtype, rows, cols, kind, flip, data):
    info = np.iinfo(dtype)
    hi = min(int(info.max), 2**63 - 1)
    values = np.array(data.draw(st.lists(st.integers(int(info.min), hi), min_size=rows * cols,
                                         max_size=rows * cols)), dtype=dtype).reshape(rows, cols)
    source = values[::-1] if flip else values  # a negative-stride view is copied, not refused
    given_ = torch.from_numpy(source.copy()) if kind == "tensor" else source
    out = int_tensor(given_, "f")
    assert out.dtype == torch.int64 and out.tolist() == source.astype(object).tolist()
    if kind == "numpy" and source.size:
        source.flat[0] = 0 if source.flat[0] else 1  # a copy: the caller's memory is not shared
        assert out.reshape(-1)[0].item() != int(source.flat[0])


@pytest.mark.parametrize("value,message", [
    (np.zeros((2, 13), np.float32), "floating"), (np.zeros((2, 13), bool), "bool"),
    (np.zeros((2, 13), np.complex64), "complex"), (np.array([[1, "a"]], dtype=object), "object"),
    (torch.zeros(2, 13), "torch.float32"), (torch.zeros(2, 13, dtype=torch.bool), "torch.bool"),
    (torch.zeros(2, 13, dtype=torch.int64).to_sparse(), "sparse"),
    (torch.zeros(2, 13, dtype=torch.int64, device="meta"), "meta"),
    ([[1, 2], [3]], "ragged"), ([[1, None]], r"f\[0\]\[1\]: expected an integer, got NoneType"),
    ([[1, {}]], "dict"), ([["1", 2]], "str"), ([[True, 2]], "bool"), ([[1.0, 2]], "float"),
    ([[2**63, 0]], "does not fit in int64"), ([[-(2**63) - 1, 0]], "does not fit in int64"),
    (np.array([2**63], dtype=np.uint64), "fit in int64"), (torch.tensor([2**63], dtype=torch.uint64), "fit in int64"), ("12", "got str"), (None, "NoneType"),
])
def test_the_converter_refuses_with_the_field_named(value, message):
    with pytest.raises(FieldError, match=message) as e:
        int_tensor(value, "f")
    assert str(e.value).startswith("f")


def test_int8_codes_and_rows_are_accepted_after_widening(runtime):
    codes = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 127]], dtype=np.int8)
    a = runtime.submit({"text": "x", "reference_codes": codes, "seed": 2, "max_frames": 4}).result(60)
    b = runtime.submit({"text": "x", "reference_codes": codes.astype(np.int64), "seed": 2, "max_frames": 4}).result(60)
    assert np.array_equal(a.codes, b.codes)
    runtime.submit({"prompt_rows": np.array([[1] + [3] * 12], dtype=np.uint8), "max_frames": 1}).result(60)
    refused(runtime, {"prompt_rows": [[1] + PAD[:11] + [2**64]]}, "prompt_rows[0][12]: 18446744073709551616")
    refused(runtime, {"text": "x", "reference_codes": [[1] * 11 + [None]]}, "reference_codes[0][11]")


# ----- 4. strict scalars, cheap bounds first, instances validated again --------------------------------
@pytest.mark.parametrize("request_,field", [
    ({"text": "x", "seed": True}, "seed"), ({"text": "x", "seed": "7"}, "seed"), ({"text": "x", "seed": 7.0}, "seed"),
    ({"text": "x", "stream": "yes"}, "stream"), ({"text": "x", "stream": 1}, "stream"), ({"text": b"hello"}, "text"),
    ({"text": "x", "max_frames": True}, "max_frames"), ({"text": "x", "timeout": "5"}, "timeout"),
    ({"text": "x", "sampling": {"top_k": 2**63}}, "sampling.top_k"),
    ({"text": "x", "sampling": {"audio": {"top_k": True}}}, "sampling.audio.top_k"),
    ({"text": "x", "sampling": {"temperature": "1.0"}}, "sampling.temperature"),
    ({"text": "a\ud800b"}, "text"), ({"text": "x", "instruction": "\udfff"}, "instruction"),
    ({"text": "x", "language": "en\ud83d"}, "language"), ({"text": "x", "instruction": "word " * 900}, "instruction"),
    ({"text": "x", "language": "l" * 30_000}, "language"), ({"text": "x", "duration_frames": 10**6}, "duration_frames"),
    ({"text": "x", "seed": 2**63}, "seed"), ({"text": "x", "min_frames": 2**64}, "min_frames"),
])
def test_strict_scalars_are_refused_naming_the_field(runtime, request_, field):
    refused(runtime, request_, field)


def test_a_ten_megabyte_text_is_refused_without_building_its_prompt(runtime):
    text = "a" * 10_000_000
    tracemalloc.start()
    message = refused(runtime, {"text": text}, "text")
    peak = tracemalloc.get_traced_memory()[1]  # the proof, as a wall-clock bound on a loaded machine is not
    tracemalloc.stop()
    assert "max_text_chars" in message and peak < 50e6, peak


def test_instances_are_validated_again_at_submit(runtime):
    good = SpeechRequest(text="x", max_frames=2)
    runtime.submit(good).result(60)
    refused(runtime, good.model_copy(update={"seed": True}), "seed")
    refused(runtime, good.model_copy(update={"sampling": {"repetition_penalty": 1e-40}}), "sampling")
    refused(runtime, SpeechRequest.model_construct(text="x", seed=-5), "seed")
    refused(runtime, SpeechRequest.model_construct(text=None), "text")
    rows = np.array([[1] + PAD], dtype=np.int64)
    constructed = SpeechRequest.model_construct(prompt_rows=rows, max_frames=1)
    handle = runtime.submit(constructed)
    rows.fill(10**9)  # the instance held the caller's array; submit took its own copy
    assert handle.result(60).finish_reason in ("length", "stop")


def test_a_bare_string_is_not_a_list_of_prompts(runtime):
    for prompts in ("some text", b"some text"):
        with pytest.raises(TypeError, match="prompts"):
            runtime.rollout(prompts, n=1)
