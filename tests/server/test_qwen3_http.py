"""Qwen3-TTS over HTTP: OpenAI's sampling names and `instructions` reach the family's own fields, and what it
cannot take is refused naming the HTTP parameter the client sent.

The server's plan sends the runtime-wide nested `sampling` (`audio.temperature` ...); the Qwen3-TTS request
takes flat names (`temperature` = the talker's group 0). These run the real mapping on the tiny card: the
same audio as the flat fields in process, sample for sample (pcm is the family's own 24 kHz mono)."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import numpy as np
import pytest

from serverkit import TEXT, LiveServer, in_process, s16
from v2.server import ServerConfig

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def qserver() -> Iterator[tuple[Any, str]]:
    from v2.runtime import Runtime

    rt = Runtime.from_card("qwen3_tts_tiny")
    try:
        with LiveServer(rt, ServerConfig.for_card("qwen3_tts_tiny")) as server:
            yield rt, server.url
    finally:
        rt.close()


def _pcm(url: str, **body: Any) -> httpx.Response:
    return httpx.post(url + SPEECH, json={"input": TEXT, "voice": "vivian", "response_format": "pcm",
                                          "stream": False, "max_new_tokens": 8, **body}, timeout=300)


def test_sampling_names_over_http_are_the_family_s_fields(qserver):
    rt, url = qserver
    knobs = {"temperature": 0.7, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.1}
    r = _pcm(url, seed=4, **knobs)
    assert r.status_code == 200, r.text
    expected = in_process(rt, text=TEXT, speaker="vivian", seed=4, max_frames=8, **knobs)
    assert np.array_equal(np.frombuffer(r.content, "<i2"), s16(expected.audio)[:, 0])
    other = in_process(rt, text=TEXT, speaker="vivian", seed=4, max_frames=8)  # the knobs did something
    assert not np.array_equal(s16(other.audio), s16(expected.audio))


def test_instructions_over_http_is_the_instruction(qserver):
    rt, url = qserver
    r = _pcm(url, seed=2, instructions="Whisper.")
    assert r.status_code == 200, r.text
    expected = in_process(rt, text=TEXT, speaker="vivian", seed=2, max_frames=8, instruction="Whisper.")
    assert np.array_equal(np.frombuffer(r.content, "<i2"), s16(expected.audio)[:, 0])


@pytest.mark.parametrize("body, param", [
    ({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_k": -3}, "top_k"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"), ({"language": "Klingon"}, "language"),
    ({"instructions": "x" * 30000}, "instructions"), ({"max_new_tokens": 10**6}, "max_new_tokens"),
    ({"voice": None, "ref_audio": "data:audio/wav;base64,UklGRg==", "ref_text": "Hi."}, "ref_audio"),
    ({"voice": None, "ref_audio": "data:audio/wav;base64,UklGRg=="}, "ref_text"),  # an ICL clone's transcript
    ({"ref_audio": "data:audio/wav;base64,UklGRg==", "ref_text": "Hi."}, "voice"),  # a speaker and a clone
])
def test_refusals_name_the_http_parameter(qserver, body, param):
    _, url = qserver
    r = _pcm(url, **body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param, err
    assert err["message"].startswith(param), err


def test_an_unknown_voice_lists_the_stored_voices_and_the_speakers_apart(qserver):
    """Qwen3-TTS's nine speakers are named as the checkpoint's built-in speakers, never as stored voices; the
    message says `voice` takes them, and it does (any case)."""
    rt, url = qserver
    r = _pcm(url, voice="nobody")
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "voice" and err["code"] == "voice_not_found", err
    stored_part, speakers_part, _ = err["message"].split("; ")
    stored = sorted(v.name for v in rt.voices.list())
    listed = "stored: " + ", ".join(stored) if stored else "none stored"
    assert stored_part == f"voice: no stored voice named 'nobody' ({listed})"
    assert speakers_part.endswith(": " + ", ".join(rt.speakers)) and "vivian" in rt.speakers
    assert "voice takes as well (any case)" in speakers_part
    assert _pcm(url, voice="RYAN", max_new_tokens=2).status_code == 200  # as the message says


def _wav_data_url(seconds: float = 1.0) -> tuple[str, np.ndarray]:
    import base64
    import io

    import soundfile as sf

    wav = (0.3 * np.sin(np.arange(int(24000 * seconds)) / 9.0)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, wav, 24000, format="WAV", subtype="FLOAT")
    return "data:audio/wav;base64," + base64.b64encode(buf.getvalue()).decode(), wav


def test_x_vector_only_mode_clones_without_a_transcript(qserver):
    """vllm-omni's `x_vector_only_mode`: the clone the family's refusal of a transcript-less clone points to,
    named in the client's terms (never the request field `x_vector_only`)."""
    rt, url = qserver
    ref, wav = _wav_data_url()
    refused = _pcm(url, voice=None, ref_audio=ref).json()["error"]
    assert refused["param"] == "ref_text" and "x_vector_only_mode: true" in refused["message"], refused
    assert "x_vector_only:" not in refused["message"]
    r = _pcm(url, voice=None, ref_audio=ref, x_vector_only_mode=True, seed=3)
    assert r.status_code == 200, r.text
    expected = in_process(rt, text=TEXT, reference_audio=(wav, 24000), x_vector_only=True, seed=3, max_frames=8)
    assert np.array_equal(np.frombuffer(r.content, "<i2"), s16(expected.audio)[:, 0])
    alone = _pcm(url, x_vector_only_mode=True).json()["error"]  # with no recording to clone
    assert alone["param"] == "x_vector_only_mode" and alone["message"].startswith("x_vector_only_mode: "), alone
