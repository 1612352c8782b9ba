"""The voices routes on a chat card (the scripted one, tests/server/chatkit.py: three speakers, no voice store):
`GET /v1/audio/voices` lists the speakers alone, each one chat's `audio.voice` takes (OpenAI's names, which chat
refuses, are not listed); the store's operations are not published, and the server agrees: POST and DELETE
/v1/audio/voices are a 405 with `Allow: GET, HEAD`, anything under /v1/audio/voices/{name} a 404 naming `name`,
in OpenAI's error shape. schemathesis holds the rest on the omni card (test_schemathesis.py)."""

from __future__ import annotations

import httpx
import pytest

from chatkit import SPEAKERS, ChatRuntime
from serverkit import LiveServer
from v2.server import ServerConfig
from v2.server.schema import OPENAI_VOICES

MODEL = "chat_tiny"
VOICES = "/v1/audio/voices"


@pytest.fixture(scope="module")
def live():
    with LiveServer(ChatRuntime(MODEL), ServerConfig.for_card(MODEL)) as server:
        yield server


def _error(r: httpx.Response) -> dict[str, object]:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def test_the_listing_is_the_speakers_chat_takes(live):
    listing = httpx.get(live.url + VOICES, timeout=60).json()
    assert listing == {"voices": [{"id": s, "name": s, "kind": "speaker"} for s in SPEAKERS], "cloning": False}
    assert httpx.get(live.url + VOICES, params={"legacy": "true"}, timeout=60).json() == {"voices": list(SPEAKERS)}
    for voice in SPEAKERS:
        r = httpx.post(live.url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "modalities": ["text", "audio"], "audio": {"voice": voice, "format": "wav"}})
        assert r.status_code == 200, r.text
    r = httpx.post(live.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "modalities": ["text", "audio"],
        "audio": {"voice": OPENAI_VOICES[0], "format": "wav"}})
    assert r.status_code == 400 and _error(r)["param"] == "audio.voice"  # so none of OpenAI's is listed


def test_the_store_operations_are_neither_published_nor_served(live):
    spec = httpx.get(live.url + "/openapi.json", timeout=60).json()
    assert set(spec["paths"][VOICES]) == {"get"} and VOICES + "/{name}" not in spec["paths"]
    assert not [n for n in spec["components"]["schemas"] if n.startswith("Body_add_voice")]
    for method, params in (("POST", None), ("DELETE", {"name": "kept"}), ("PUT", None)):
        r = httpx.request(method, live.url + VOICES, params=params, timeout=60,
                          files={"audio_sample": ("v.wav", b"RIFF", "audio/wav")} if method == "POST" else None,
                          data={"name": "kept"} if method == "POST" else None)
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", (method, r.text)
        _error(r)
    r = httpx.post(live.url + VOICES, timeout=60, files={"audio_sample": ("v.wav", b"RIFF", "audio/wav")},
                   data={"name": "kept"})
    assert "stores no voices" in str(_error(r)["message"])
    for method in ("DELETE", "GET"):
        r = httpx.request(method, live.url + VOICES + "/kept", timeout=60)
        err = _error(r)
        assert r.status_code == 404 and err["param"] == "name" and err["code"] == "voice_not_found", r.text
