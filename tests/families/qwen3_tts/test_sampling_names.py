"""The runtime's nested `sampling` (HTTP's plan, rollouts) parsed as the Qwen3-TTS request's flat names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from v2.families.qwen3_tts.request import parse
from v2.errors import RequestError

knobs = st.fixed_dictionaries({}, optional={"temperature": st.one_of(st.just(0.0), st.floats(0.25, 2.0)), "top_k": st.integers(0, 500),
                                            "top_p": st.floats(0.05, 1.0)})


@settings(max_examples=60, deadline=None)
@given(audio=knobs, top=knobs, sub=knobs, penalty=st.one_of(st.none(), st.floats(0.8, 2.0)))
def test_nested_is_the_flat_fields(audio, top, sub, penalty):
    nested = {"audio": audio, **top, "subtalker": sub}
    if penalty is not None:
        nested["repetition_penalty"] = penalty
    got = parse({"text": "hi", "sampling": nested})
    flat = {**top, **audio, **{f"subtalker_{k}": v for k, v in sub.items()},
            **({"repetition_penalty": penalty} if penalty is not None else {})}  # audio wins over the top level
    assert got == parse({"text": "hi", **flat})


@pytest.mark.parametrize("fields, named", [
    ({"sampling": {"stop": {"temperature": 1.0}}}, "sampling.stop"),
    ({"sampling": {"audio": {"temperature": -1.0}}}, "sampling.audio.temperature"),
    ({"sampling": {"subtalker": {"top_k": -1}}}, "sampling.subtalker.top_k"),
    ({"sampling": {"text": {}}}, "sampling.text"),
    ({"sampling": 3}, "sampling"),
    ({"sampling": {"top_p": 0.5}, "top_p": 0.7}, "sampling.top_p"),
    ({"sampling": {"repetition_penalty": 1.1}, "repetition_penalty": 1.2}, "sampling.repetition_penalty"),
])
def test_refusals_name_the_nested_field(fields, named):
    with pytest.raises(RequestError) as e:
        parse({"text": "hi", **fields})
    assert str(e.value).startswith(named), str(e.value)


def test_an_empty_or_absent_sampling_is_the_defaults():
    assert parse({"text": "hi", "sampling": {}}) == parse({"text": "hi"}) == parse({"text": "hi", "sampling": None})
