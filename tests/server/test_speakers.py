"""A checkpoint's built-in speakers over HTTP: `voice` names a speaker (any case) before a stored voice and
OpenAI's names, `/v1/audio/voices` lists them, and a stored voice cannot take a speaker's name.

The MOSS tiny runtime has no speakers; these tests give its family some (`speakers` is the seam's attribute
the runtime reads), so the mapping is checked without the other family. MOSS's request has no `speaker`
field, so a request that reaches it with one is refused by the runtime itself, named as the client's
`voice`. The last test runs the real mapping on the Qwen3-TTS tiny card once that card is shipped."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from serverkit import TEXT, LiveServer, in_process, s16, shared_runtime
from v2.card import known_cards
from v2.server import ServerConfig
from v2.server.errors import ApiError
from v2.server.schema import OPENAI_VOICES
from v2.server.voices import VoiceBook

VOICES = "/v1/audio/voices"
SPEECH = "/v1/audio/speech"
SPEAKERS = ("vivian", "Uncle_Fu", "alloy")  # one of them shadows an OpenAI name


@pytest.fixture
def with_speakers(monkeypatch):
    rt = shared_runtime()
    assert rt.speakers == ()  # MOSS: none of its own
    monkeypatch.setattr(rt.family, "speakers", SPEAKERS)
    return rt


def test_the_runtime_reads_its_family_s_speakers_and_fields(with_speakers):
    assert with_speakers.speakers == SPEAKERS
    assert {"text", "voice", "instruction", "reference_audio"} <= with_speakers.request_fields
    assert "speaker" not in with_speakers.request_fields


def test_voice_maps_to_a_speaker_in_any_case_before_stored_and_openai_names(with_speakers):
    book = VoiceBook(with_speakers)
    assert book.voice_fields("VIVIAN") == {"speaker": "vivian"}
    assert book.voice_fields("uncle_fu") == {"speaker": "Uncle_Fu"}  # spelled as the runtime spells it
    assert book.voice_fields("Alloy") == {"speaker": "alloy"}  # a speaker wins over OpenAI's name
    assert book.voice_fields("nova") == {} and book.voice_fields(None) == {}  # OpenAI's: the card's default
    assert book.resolve("vivian") is None  # not a stored voice
    with pytest.raises(ApiError) as e:
        book.voice_fields("nobody")
    assert e.value.param == "voice" and e.value.code == "voice_not_found"
    assert "built-in speakers" in e.value.message and "vivian" in e.value.message


class _Store:
    """A voice store with the runtime's methods, in memory, holding the voices it is given."""

    def __init__(self, *names: str) -> None:
        self.voices = {n: b"" for n in names}

    def add(self, name: str, audio: Any, *, text: str | None = None, replace: bool = False) -> None:
        self.voices[name] = audio

    def list(self) -> list[str]:
        return sorted(self.voices)

    def get(self, name: str) -> Any:
        return self.voices.get(name)

    def remove(self, name: str) -> None:
        del self.voices[name]


class _WithStore:
    """The runtime with another voice store."""

    def __init__(self, runtime: Any, store: _Store) -> None:
        self._runtime, self.voices = runtime, store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def test_an_unknown_voice_names_the_stored_voices_and_the_speakers_apart(with_speakers):
    """OpenAI's error shape naming `voice`; the message says which names are stored voices and which are the
    checkpoint's speakers (which `voice` takes too, in any case), and what OpenAI's names do."""
    with LiveServer(_WithStore(with_speakers, _Store("narrator", "radio"))) as server:
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "voice": "nobody", "stream": False})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    err = r.json()["error"]
    assert err["param"] == "voice" and err["code"] == "voice_not_found" and err["type"] == "invalid_request_error"
    stored, speakers, openai_names = err["message"].split("; ")
    assert stored == "voice: no stored voice named 'nobody' (stored: narrator, radio)"  # no speaker among them
    assert speakers == ("this checkpoint's built-in speakers, which voice takes as well (any case): "
                        "vivian, Uncle_Fu, alloy")
    assert openai_names.startswith("OpenAI's voice names (alloy, ash,") and "card's default voice" in openai_names


def test_an_unknown_voice_without_speakers_or_stored_voices_says_so():
    book = VoiceBook(_WithStore(shared_runtime(), _Store()))
    with pytest.raises(ApiError) as e:
        book.voice_fields("nobody")
    assert e.value.message.startswith("voice: no stored voice named 'nobody' (none stored); OpenAI's voice names")
    assert "speaker" not in e.value.message


def test_listing_names_the_speakers_first(with_speakers):
    with LiveServer(with_speakers) as server:
        data = httpx.get(server.url + VOICES).json()
        legacy = httpx.get(server.url + VOICES, params={"legacy": "true"}).json()
    speakers = [v["id"] for v in data["voices"] if v["kind"] == "speaker"]
    assert speakers == list(SPEAKERS) and [v["id"] for v in data["voices"]][:3] == list(SPEAKERS)
    builtin = {v["id"] for v in data["voices"] if v["kind"] == "builtin"}
    assert builtin == set(OPENAI_VOICES) - {"alloy"}  # "alloy" is a speaker here
    assert legacy["voices"][:3] == list(SPEAKERS)


def test_a_speaker_reaches_the_runtime_as_its_speaker_field(with_speakers):
    """MOSS takes no `speaker`: its own refusal comes back as a 400 on `voice` (an unknown name would be the
    server's voice_not_found instead), and an OpenAI name still speaks with the default voice (pcm resampled
    from MOSS's 48 kHz stereo to OpenAI's 24 kHz mono)."""
    with LiveServer(with_speakers) as server:
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "voice": "Vivian", "max_new_tokens": 4,
                                                  "stream": False})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "voice" and err["code"] == "invalid_value", err
        assert err["message"].startswith("voice")
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "voice": "nobody", "stream": False})
        assert r.status_code == 400 and r.json()["error"]["code"] == "voice_not_found"
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "voice": "nova", "max_new_tokens": 4,
                                                  "response_format": "pcm", "stream": False})
        assert r.status_code == 200 and r.headers["X-Sample-Rate"] == "24000" and r.headers["X-Channels"] == "1"


def test_a_stored_voice_cannot_take_a_speaker_s_name(with_speakers):
    with LiveServer(with_speakers) as server:
        if not httpx.get(server.url + VOICES).json()["cloning"]:
            pytest.skip("no voice store on this runtime")
        r = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", b"RIFF....", "audio/wav")},
                       data={"name": "VIVIAN"})
    err = r.json()["error"]
    assert r.status_code == 409 and err["param"] == "name" and "built-in speaker" in err["message"]


@pytest.mark.skipif("qwen3_tts_tiny" not in known_cards(), reason="the qwen3_tts_tiny card is not shipped yet")
def test_qwen3_voice_over_http_is_the_in_process_speaker():
    """The real mapping: `voice="vivian"` over HTTP gives the audio of `speaker="vivian"` in process, sample
    for sample (pcm is the family's own 24 kHz mono: no resampling), and the listing has its speakers."""
    from v2.runtime import Runtime

    rt = Runtime.from_card("qwen3_tts_tiny")
    try:
        assert "vivian" in rt.speakers and rt.sample_rate == 24000 and rt.channels == 1
        budget = {"max_frames": 12} if "max_frames" in rt.request_fields else {}
        with LiveServer(rt, ServerConfig.for_card("qwen3_tts_tiny")) as server:
            listing = httpx.get(server.url + VOICES).json()["voices"]
            assert [v["id"] for v in listing if v["kind"] == "speaker"] == list(rt.speakers)
            body = {"input": TEXT, "voice": "Vivian", "seed": 9, "response_format": "pcm", "stream": False,
                    **({"max_new_tokens": budget["max_frames"]} if budget else {})}
            r = httpx.post(server.url + SPEECH, json=body, timeout=300)
            assert r.status_code == 200, r.text
            assert r.headers["X-Sample-Rate"] == "24000" and r.headers["X-Channels"] == "1"
            expected = in_process(rt, text=TEXT, speaker="vivian", seed=9, **budget)
            assert np.array_equal(np.frombuffer(r.content, "<i2"), s16(expected.audio)[:, 0])
            if "instruction" in rt.request_fields:
                r = httpx.post(server.url + SPEECH, json={**body, "instructions": "Slowly."}, timeout=300)
                assert r.status_code == 200, r.text
                expected = in_process(rt, text=TEXT, speaker="vivian", seed=9, instruction="Slowly.", **budget)
                assert np.array_equal(np.frombuffer(r.content, "<i2"), s16(expected.audio)[:, 0])
    finally:
        rt.close()
