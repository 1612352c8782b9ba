"""A mistyped request field is refused naming it, with the closest field of the part it is in (the request
with its flat sampling knobs, `sampling`, `sampling.audio`, a context turn) and, at the top, the page of the
fields; a name close to none gets no guess."""

from __future__ import annotations

import pytest

from v2.errors import RequestError, did_you_mean
from v2.families.csm.request import parse as csm_parse
from v2.families.moss_tts_local.request import parse_request as moss_parse
from v2.families.qwen3_tts.request import parse as qwen3_parse
from v2.runtime.runtime import Runtime

PARSERS = {"csm": csm_parse, "moss_tts_local": moss_parse, "qwen3_tts": qwen3_parse}
PAGE = "the fields: designs/request_fields.md"


def refusal(parse, request) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse(request)
    return e.value


@pytest.mark.parametrize("family", sorted(PARSERS))
def test_a_mistyped_field_gets_the_closest_one_and_the_fields_page(family):
    e = refusal(PARSERS[family], {"text": "Hi.", "temprature": 1.0})
    assert e.field == "temprature"
    assert str(e) == f"temprature: Extra inputs are not permitted (did you mean 'temperature'? {PAGE})"
    e = refusal(PARSERS[family], {"text": "Hi.", "sampling": {"audio": {"top_kk": 3}}})
    assert str(e) == "sampling.audio.top_kk: Extra inputs are not permitted (did you mean 'top_k'?)"
    e = refusal(PARSERS[family], {"text": "Hi.", "zzzz": 1})
    assert str(e) == f"zzzz: Extra inputs are not permitted ({PAGE})"


def test_a_context_turns_mistyped_field_is_compared_with_a_turns_fields():
    e = refusal(csm_parse, {"text": "Hi.", "speaker": 0, "context": [{"text": "a", "speakr": 1}]})
    assert str(e).endswith("speakr: Extra inputs are not permitted (did you mean 'speaker'?)")


def test_did_you_mean():
    known = ["temperature", "top_k", "top_p", "voice"]
    assert did_you_mean("temprature", known) == "did you mean 'temperature'?"
    assert did_you_mean("voices", known) == "did you mean 'voice'?"
    assert did_you_mean("colour", known) == ""
    assert did_you_mean("voice", known) == ""  # a known name is no typo


def test_the_runtimes_submit_says_it():
    with Runtime.from_card("moss_tts_local_tiny") as rt:
        with pytest.raises(RequestError) as e:
            rt.submit({"text": "Hi.", "temprature": 1})
    assert "did you mean 'temperature'?" in str(e.value) and PAGE in str(e.value)
