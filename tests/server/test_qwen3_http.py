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
