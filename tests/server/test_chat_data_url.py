"""A chat request's `input_audio.data` given as a `data:audio/<type>;base64,` URL, on the real chat card
(qwen3_omni_tiny) over HTTP: a media type the part's `format` does not go by is a 400 in OpenAI's error shape
naming `messages[i].content[j].input_audio.data` (as a container other than the format is), refused at submit
when the type names another container; one of its aliases is taken."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import soundfile as sf

from serverkit import LiveServer
from v2.card import load_card
from v2.runtime import Runtime
from v2.server import ServerConfig

CARD = "qwen3_omni_tiny"
PARAM = "messages[0].content[1].input_audio.data"


@pytest.fixture(scope="module")
def live():
    with Runtime.from_card(load_card(CARD), device="cpu") as runtime:
        with LiveServer(runtime, ServerConfig.for_card(CARD)) as server:
            yield server


def wav() -> str:
    buf = io.BytesIO()
    t = np.arange(4800) / 16000
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def ask(live, data: str, fmt: str) -> httpx.Response:
    part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    body = {"model": CARD, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}],
            "max_tokens": 1, "seed": 1}
    return httpx.post(live.url + "/v1/chat/completions", json=body, timeout=300)


@pytest.mark.parametrize("media, fmt", [("audio/mpeg", "wav"), ("audio/wav", "mp3"), ("audio/ogg", "wav")])
def test_a_data_url_whose_type_is_not_the_format_is_a_400_naming_the_data(live, media, fmt):
    answer = ask(live, f"data:{media};base64,{wav()}", fmt)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == PARAM and error["type"] == "invalid_request_error" and error["code"] == "invalid_value"
    assert error["message"].startswith(f"{PARAM}: its data URL says {media}, not {fmt} as its format says"), error


@pytest.mark.parametrize("media", ["audio/wav", "audio/x-wav", "audio/wave"])
def test_a_data_url_of_the_formats_type_is_taken(live, media):
    answer = ask(live, f"data:{media};base64,{wav()}", "wav")
    assert answer.status_code == 200, answer.text
