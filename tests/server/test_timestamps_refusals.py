"""Word timestamps on a server whose runtime has no aligner (the tiny card alone), a real server on 127.0.0.1:
`timestamps` is refused naming it on every surface (speech, SSE, the captioned path, a batch item, a stream's
config); the captioned path with `return_timestamps: false` answers Kokoro's JSON with the audio and null
timestamps; `input.cancel`'s `played_ms` is refused naming it unless a non-negative number, and the
acknowledgement has no words (nothing knows when a word was spoken); the schema says so and every answer
validates against it."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import jsonschema
import pytest

from serverkit import LiveServer, shared_runtime
from wskit import recv_json, until, ws_url

SPEECH = "/v1/audio/speech"
SMALL = {"input": "Hello there.", "max_frames": 8, "seed": 5}


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        server.spec = httpx.get(server.url + "/openapi.json").json()
        yield server


def _valid(spec: dict, path: str, status: str, body: object) -> None:
    schema = spec["paths"][path]["post"]["responses"][status]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**schema, "components": spec["components"]}).validate(body)


@pytest.mark.parametrize("extra", [{}, {"stream_format": "sse"}, {"stream": False}, {"stream": True}])
def test_speech_with_timestamps_is_refused_naming_it(live, extra):
    r = httpx.post(live.url + SPEECH, json={**SMALL, "timestamps": "word", **extra}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "timestamps", r.text
    assert "aligner" in r.json()["error"]["message"]
    _valid(live.spec, SPEECH, "400", r.json())


def test_a_timestamps_value_but_word_is_refused_naming_it(live):
    r = httpx.post(live.url + SPEECH, json={**SMALL, "timestamps": "characters"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "timestamps"


def test_the_captioned_path_refuses_timestamps_and_answers_the_audio_without(live):
    r = httpx.post(live.url + "/dev/captioned_speech", json=SMALL, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "timestamps"
    body = {**SMALL, "response_format": "wav", "return_timestamps": False}
    r = httpx.post(live.url + "/dev/captioned_speech", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    got = r.json()
    assert got["timestamps"] is None and got["audio_format"] == "audio/wav"
    _valid(live.spec, "/dev/captioned_speech", "200", got)
    whole = httpx.post(live.url + SPEECH, json={**SMALL, "response_format": "wav", "stream": False}, timeout=60)
    assert base64.b64decode(got["audio"]) == whole.content  # the same file, in base64
    for bad, param in (({"return_timestamps": 1}, "return_timestamps"), ({"stream_format": "sse"}, "stream_format"),
                       ({"lang_code": "a"}, "lang_code")):
        r = httpx.post(live.url + "/dev/captioned_speech", json={**body, **bad}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_a_batch_item_with_timestamps_fails_alone(live):
    r = httpx.post(live.url + SPEECH + "/batch", json={"max_frames": 8, "seed": 5, "items": [
        {"input": "One."}, {"input": "Two.", "timestamps": "word"}]}, timeout=60)
    got = r.json()
    assert r.status_code == 200 and [x["status"] for x in got["results"]] == ["success", "error"], r.text
    assert got["results"][1]["error"]["param"] == "timestamps" and "words" not in got["results"][0]


def test_the_schema_says_timestamps_takes_no_value_here(live):
    schemas = live.spec["components"]["schemas"]
    assert schemas["SpeechBody"]["properties"]["timestamps"]["type"] == "null"
    assert "speech.timestamps" not in live.spec["paths"]["/v1/audio/speech/stream"]["get"]["x-websocket"][
        "messages"]["server"]
    ack = schemas["StreamInputCancelled"]["properties"]
    assert "absent without one" in ack["words_sent"]["description"]
    assert schemas["StreamInputCancel"]["properties"]["played_ms"]["minimum"] == 0


def test_the_stream_refuses_timestamps_and_bad_played_ms_and_acks_without_words(live):
    from websockets.asyncio.client import connect

    async def run() -> None:
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "timestamps": "word"}))
            e = await recv_json(ws)
            assert e["type"] == "error" and e["param"] == "timestamps"
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                                      "word_timestamps": True}))  # vllm-omni's name
            e = await recv_json(ws)
            assert e["type"] == "error" and e["param"] == "word_timestamps" and "aligner" in e["message"]
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                                      "max_frames": 400, "seed": 1}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": "The quiet river runs past old stone houses."}))
            await ws.send(json.dumps({"type": "input.done"}))
            events, frames = await until(ws, "audio.start")
            for bad in (-1, "10", True, None, [3]):
                if bad is None:
                    continue
                await ws.send(json.dumps({"type": "input.cancel", "played_ms": bad}))
                e = await recv_json(ws)
                assert e["type"] == "error" and e["param"] == "played_ms", e
            await ws.send(json.dumps({"type": "input.cancel", "played_ms": 120.5}))
            events, _ = await until(ws, "input.cancelled")
            ack = events[-1]
            assert ack["cancelled"] is True and "words_sent" not in ack and "words_heard" not in ack
    asyncio.run(run())


def test_the_captioned_path_refuses_a_chat_card_as_the_speech_routes_do():
    from chatkit import ChatRuntime
    from v2.server import ServerConfig

    runtime = ChatRuntime("chat-tiny")
    with LiveServer(runtime, ServerConfig.for_card("chat-tiny")) as server:
        r = httpx.post(server.url + "/dev/captioned_speech", json={"input": "hi"}, timeout=60)
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"], r.text
    assert r.json()["error"]["code"] == "model_not_supported"
