"""The same names in Python as over HTTP: `rt.submit({"text": ..., "temperature": 1.2})` means the audio head's
temperature, as the HTTP body's `temperature` does; the flat request, the nested one and the one the HTTP
schema plans give the same codes for the same seed. A setting given both ways, or a bad flat value, is
refused naming the flat field (and the nested one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from v2.fields import PENALTY_MAX, PENALTY_MIN, TEMPERATURE_MAX, TEMPERATURE_MIN
from v2.errors import RequestError
from v2.families.moss_tts_local.params import SPEECH_PARAMS
from v2.families.moss_tts_local.request import FLAT_SAMPLING, SpeechRequest, parse_request
from v2.runtime import Runtime
from v2.server.schema import Limits, SpeechBody, plan, resolved

FLAT = {"temperature": 1.2, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.3}


def nested(values: dict) -> dict:
    audio = {k: v for k, v in values.items() if k != "repetition_penalty"}
    return {"audio": audio, **({"repetition_penalty": values["repetition_penalty"]}
                               if "repetition_penalty" in values else {})}


def over_http(values: dict) -> dict:
    """The request the HTTP server has the family make of a speech body carrying these values."""
    body = SpeechBody.model_validate({"input": "Hello there.", "response_format": "wav", **values})
    p = plan(body, Limits(model_names=("tts-1",)), native_rate=48000, native_channels=2)
    return SPEECH_PARAMS.request(p.params, resolved(p, {}))


knobs = st.fixed_dictionaries({}, optional={
    "temperature": st.one_of(st.just(0.0), st.floats(TEMPERATURE_MIN, TEMPERATURE_MAX)),
    "top_k": st.integers(0, 4096), "top_p": st.floats(1e-6, 1.0),
    "repetition_penalty": st.floats(PENALTY_MIN, PENALTY_MAX)})


@settings(max_examples=60, deadline=None)
@given(knobs)
def test_flat_names_parse_to_the_nested_settings_and_to_what_http_sends(values):
    flat = parse_request({"text": "Hello there.", **values}).sampling
    assert flat == parse_request({"text": "Hello there.", "sampling": nested(values)}).sampling
    assert flat == parse_request(over_http(values)).sampling
    assert flat == SpeechRequest(text="Hello there.", **values).sampling  # keyword arguments too


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def test_flat_nested_and_http_requests_make_the_same_codes(runtime):
    common = {"seed": 7, "max_frames": 12, "min_frames": 12}
    flat = runtime.submit({"text": "Hello there.", **FLAT, **common}).result(60)
    nest = runtime.submit({"text": "Hello there.", "sampling": nested(FLAT), **common}).result(60)
    http = runtime.submit({**over_http(FLAT), **common}).result(60)
    card = runtime.submit({"text": "Hello there.", **common}).result(60)
    assert len(flat.codes) == 12
    assert np.array_equal(flat.codes, nest.codes) and np.array_equal(flat.codes, http.codes)
    assert not np.array_equal(flat.codes, card.codes)  # the settings took effect: not the card's defaults


@pytest.mark.parametrize("fields,message", [
    ({"temperature": 1.0, "sampling": {"audio": {"temperature": 1.0}}},
     "temperature: give temperature or sampling.audio.temperature, not both"),
    ({"top_k": 5, "sampling": {"top_k": 5}}, "top_k: give top_k or sampling.top_k, not both"),
    ({"repetition_penalty": 1.1, "sampling": {"repetition_penalty": 1.2}},
     "repetition_penalty: give repetition_penalty or sampling.repetition_penalty, not both"),
    ({"temperature": 9.0}, "temperature: must be 0 (greedy) or lie in [0.25, 3.0], got 9.0"),
    ({"temperature": "warm"}, "temperature: expected a number, got str"),
    ({"top_k": True}, "top_k: expected an integer, got a bool"),
    ({"top_p": 0.0}, "top_p: Input should be greater than 0"),
    ({"repetition_penalty": 5.0}, "repetition_penalty: must lie in [0.8, 2.0]"),
])
def test_a_bad_or_doubled_flat_setting_is_refused_naming_it(runtime, fields, message):
    with pytest.raises(RequestError) as refused:
        runtime.submit({"text": "Hello.", **fields})
    assert str(refused.value).startswith(message), str(refused.value)


def test_the_callers_dicts_are_left_as_they_were():
    sampling = {"audio": {"top_k": 3}}
    request = {"text": "Hello.", "temperature": 0.5, "sampling": sampling}
    parsed = parse_request(request)
    assert parsed.sampling.audio.temperature == 0.5 and parsed.sampling.audio.top_k == 3
    assert request == {"text": "Hello.", "temperature": 0.5, "sampling": {"audio": {"top_k": 3}}}
    assert set(FLAT_SAMPLING) == {"temperature", "top_k", "top_p", "repetition_penalty"}
