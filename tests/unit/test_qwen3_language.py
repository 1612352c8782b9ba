"""Qwen3-TTS's `language`: "Auto", a language name of the checkpoint in any case, or its ISO 639-1 code, resolved
at the family's request parse onto the checkpoint's name (so it holds for the Python API, HTTP and open
requests alike); anything else is refused naming `language` and listing the values accepted."""

from __future__ import annotations

import pytest

from v2.card import family_of, load_card
from v2.families.qwen3_tts.card import checkpoint_config
from v2.families.qwen3_tts.request import parse
from v2.errors import RequestError
from v2.runtime import Runtime

CARD = load_card("qwen3_tts_tiny")
LANGUAGES = checkpoint_config(CARD).languages  # the checkpoint's codec_language_id keys


@pytest.mark.parametrize("given,parsed", [
    ("en", "English"), ("zh", "Chinese"), ("JA", "Japanese"), ("english", "English"), ("CHINESE", "Chinese"),
    ("auto", "Auto"), ("Auto", "Auto"), ("sichuan_dialect", "Sichuan_dialect"), (None, None),
])
def test_an_iso_code_or_a_name_in_any_case_parses_to_the_checkpoints_name(given, parsed):
    assert parse({"text": "Hi.", "language": given}, languages=LANGUAGES).language == parsed


@pytest.mark.parametrize("given", ["xx", "klingon", "ar", "e n", "x" * 5000])  # "ar": a code of no language here
def test_another_language_is_refused_naming_the_field_and_the_accepted_values(given):
    with pytest.raises(RequestError) as refused:
        parse({"text": "Hi.", "language": given}, languages=LANGUAGES)
    message = str(refused.value)
    assert refused.value.field == "language" and message.startswith("language: '")
    assert "give one of Auto, Beijing_dialect, Chinese (zh), English (en), French (fr)," in message
    assert len(message) < 500  # a long value is clipped


def test_without_the_checkpoints_names_the_value_is_kept_as_given():
    assert parse({"text": "Hi.", "language": "en"}).language == "en"


def test_precheck_refuses_from_the_config_alone():
    family = family_of(CARD)
    family.precheck(CARD, {"language": "de", "speaker": "Eric"})
    with pytest.raises(RequestError, match="^language: 'xx'"):
        family.precheck(CARD, {"language": "xx"})
    with pytest.raises(RequestError, match="^speaker: 'nobody' is not a speaker of this checkpoint"):
        family.precheck(CARD, {"speaker": "nobody"})
    family.precheck(CARD, {"speaker": "nobody", "voice": "alice"})  # a clone with a speaker: parse refuses it


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    runtime = Runtime.from_card(CARD, device="cpu", graphs=False, voices_dir=str(tmp_path_factory.mktemp("v")))
    yield runtime
    runtime.close()


def test_the_familys_parse_resolves_for_submit_and_open_requests(rt):
    assert rt.parse({"text": "Hi.", "language": "en"}).language == "English"
    with pytest.raises(RequestError) as refused:
        rt.submit({"text": "Hi.", "language": "xx"})
    assert refused.value.field == "language"
    handle = rt.submit({"text": "Hi.", "language": "fr", "speaker": "vivian", "max_frames": 2})
    assert handle.result().finish_reason in ("stop", "length")
    request, _ = rt.family.open_text({"language": "de", "speaker": "vivian"})
    assert request.language == "German"
