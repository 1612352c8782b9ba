"""A voice from a precomputed speaker embedding (vllm-omni's `speaker_embedding`): for a family whose voices
are x-vectors (Qwen3-TTS Base, the tiny card), `rt.voices.add(name, speaker_embedding=...)` and `POST
/v1/audio/voices` with the form field make a voice that speaks like the voice made from the recording the
embedding came from (equal codes under one seed, in process and over HTTP through httpx and the `openai`
client); a wrong width, non-finite values, a recording as well, or a transcript are refused naming the field;
a family whose voices are a recording's codes (MOSS-TTS-Local, CSM) refuses one with the reason."""

from __future__ import annotations

import io
import json
from typing import Any, Iterator

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from serverkit import LiveServer, s16, wait_idle
from v2.runtime import Runtime
from v2.voices.store import VoiceError
from v2.server import ServerConfig

VOICES, SPEECH = "/v1/audio/voices", "/v1/audio/speech"
WAV = (np.random.default_rng(8).standard_normal(30000) * 0.1).astype(np.float32)  # 1.25 s at 24 kHz
TEXT = "Hello there, friend."


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Iterator[tuple[Runtime, str, np.ndarray]]:
    """The tiny Qwen3-TTS Base card with a voice stored from a recording (no transcript: an x-vector clone)
    and that voice's x-vector, the embedding the tests send; a server over it."""
    rt = Runtime.from_card("qwen3_tts_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    try:
        xvector = rt.voices.add("recorded", (WAV, 24000)).arrays["x_vector"]
        with LiveServer(rt, ServerConfig.for_card("qwen3_tts_tiny")) as server:
            yield rt, server.url, xvector
    finally:
        rt.close()


def _same(a: Any, b: Any) -> None:
    assert a.error is None and b.error is None and a.finish_reason == b.finish_reason
    assert len(a.codes) > 0 and np.array_equal(a.codes, b.codes) and np.array_equal(a.audio, b.audio)


def test_a_voice_from_the_embedding_speaks_like_the_recording_it_came_from(qwen):
    rt, _, xvector = qwen
    voice = rt.voices.add("embedded", speaker_embedding=xvector.tolist())
    assert voice.codes.shape == (0, 16) and voice.text is None
    assert np.array_equal(voice.arrays["x_vector"], xvector)
    base = {"text": TEXT, "seed": 4, "max_frames": 8, "temperature": 0.9}
    from_embedding = rt.submit({**base, "voice": "embedded"}).result(120)
    _same(from_embedding, rt.submit({**base, "voice": "recorded"}).result(120))
    _same(from_embedding, rt.submit({**base, "reference_audio": (WAV, 24000), "x_vector_only": True}).result(120))
    other = rt.voices.add("other", speaker_embedding=(xvector * -1.0).tolist())  # the embedding is what speaks
    assert not np.array_equal(rt.submit({**base, "voice": other.name}).result(120).codes, from_embedding.codes)
    again = type(rt.voices)(rt.voices.directory, encode=lambda _: None, width=16, codebook_size=2048,
                            arrays=rt.family.voice_arrays).get("embedded")  # read back from disk by a fresh store
    assert again.codes.shape == (0, 16) and np.array_equal(again.arrays["x_vector"], xvector)
    with pytest.raises(Exception) as e:  # no recording: nothing to speak in context
        rt.submit({**base, "voice": "embedded", "reference_text": "Some words."}).result(120)
    assert getattr(e.value, "field", None) == "reference_text"
    wait_idle(rt)


@pytest.mark.parametrize("value, why", [
    ([0.1] * 63, "expected 64 numbers"), ([0.1] * 65, "expected 64 numbers"), ([[0.1] * 64], "expected 64"),
    ([float("nan")] + [0.1] * 63, "finite"), ([float("inf")] * 64, "finite"), ([1e39] * 64, "finite"),
    ("0.1, 0.2", "list of 64 numbers"), ([True] * 64, "list of 64 numbers"),
])
def test_a_wrong_width_or_non_finite_values_are_refused_naming_the_field(qwen, value, why):
    rt = qwen[0]
    with pytest.raises(VoiceError) as e:
        rt.voices.add("bad", speaker_embedding=value)
    assert e.value.field == "speaker_embedding" and why in str(e.value) and not rt.voices.taken("bad")


def test_an_embedding_goes_alone(qwen):
    rt, _, xvector = qwen
    with pytest.raises(VoiceError) as e:
        rt.voices.add("both", (WAV, 24000), speaker_embedding=xvector.tolist())
    assert e.value.field == "speaker_embedding"
    with pytest.raises(VoiceError) as e:
        rt.voices.add("said", speaker_embedding=xvector.tolist(), text="Some words.")
    assert e.value.field == "text"


def test_over_http_the_embedding_voice_speaks_like_the_recorded_one(qwen):
    rt, url, xvector = qwen
    form = {"name": "http-embedded", "speaker_embedding": json.dumps(xvector.tolist())}
    r = httpx.post(url + VOICES, data=form, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["voice"]["embedding_source"] == "direct"
    assert "http-embedded" in [v["id"] for v in httpx.get(url + VOICES).json()["voices"] if v["kind"] == "stored"]
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    pcm = {}
    for voice in ("http-embedded", "recorded"):
        pcm[voice] = client.audio.speech.create(model="qwen3_tts_tiny", voice=voice, input=TEXT, response_format="wav",
                                                extra_body={"seed": 5, "max_new_tokens": 8, "stream": False}).content
    a, b = (sf.read(io.BytesIO(pcm[v]), dtype="int16")[0] for v in ("http-embedded", "recorded"))
    want = rt.submit({"text": TEXT, "voice": "recorded", "seed": 5, "max_frames": 8}).result(120)
    assert len(a) > 0 and np.array_equal(a, b) and np.array_equal(a, s16(want.audio)[:, 0])
    assert httpx.delete(url + VOICES + "/http-embedded").status_code == 200


@pytest.mark.parametrize("form, files, param, why", [
    ({"speaker_embedding": json.dumps([0.5] * 10)}, None, "speaker_embedding", "expected 64 numbers"),
    ({"speaker_embedding": "[0.5, NaN]" .replace("]", ", 0.5" * 62 + "]")}, None, "speaker_embedding", "finite"),
    ({"speaker_embedding": "not json"}, None, "speaker_embedding", "JSON list of numbers"),
    ({"speaker_embedding": "[]"}, None, "speaker_embedding", "JSON list of numbers"),
    ({"speaker_embedding": json.dumps([0.5] * 64)}, {"audio_sample": ("v.wav", b"RIFF", "audio/wav")},
     "speaker_embedding", "not both"),
    ({"speaker_embedding": json.dumps([0.5] * 64), "ref_text": "Words."}, None, "ref_text", "no transcript"),
    ({}, None, "audio_sample", "speaker_embedding"),
])
def test_over_http_a_bad_embedding_is_refused_naming_its_field(qwen, form, files, param, why):
    r = httpx.post(qwen[1] + VOICES, data={"name": "http-bad", **form}, files=files, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and why in err["message"], err


@pytest.mark.parametrize("card", ["moss_tts_local_tiny", "csm_tiny"])
def test_a_codes_voice_family_refuses_an_embedding_with_the_reason(tmp_path, card):
    with Runtime.from_card(card, voices_dir=str(tmp_path)) as rt:
        with pytest.raises(VoiceError) as e:
            rt.voices.add("embedded", speaker_embedding=[0.1] * 64)
        assert e.value.field == "speaker_embedding" and "recording" in str(e.value)
        with LiveServer(rt, ServerConfig.for_card(card)) as server:
            r = httpx.post(server.url + VOICES, data={"name": "embedded", "speaker_embedding": json.dumps([0.1] * 64)})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "speaker_embedding" and "recording" in err["message"]
        assert not rt.voices.taken("embedded")
