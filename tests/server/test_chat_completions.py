"""`POST /v1/chat/completions` through the official `openai` client on a real server: the whole answer (text, or
text and a decodable wav), the streamed one (pcm16 deltas and transcript equal to the whole answer under one
seed, then finish_reason, usage, [DONE]), a turn carrying audio passed through to the card's request, OpenAI's
refusals naming the field, a card that is no chat card, the speech routes refused on a chat card, and a client
that leaves cancelling its request. Every answer validates against /openapi.json.
The chat card here is chatkit's scripted one (the family's own test runs the same calls on qwen3_omni_tiny)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
import jsonschema
import numpy as np
import openai
import pytest
import soundfile as sf

from chatkit import RATE, ChatRuntime
from serverkit import LiveServer, shared_runtime
from v2.server import ServerConfig

CHAT = "/v1/chat/completions"
MODEL = "chat_tiny"
HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something about rivers."}]
SPOKEN = {"modalities": ["text", "audio"], "audio": {"voice": "Ethan", "format": "wav"}}


@pytest.fixture(scope="module")
def live():
    runtime = ChatRuntime(MODEL)
    with LiveServer(runtime, ServerConfig.for_card(MODEL)) as server:
        server.runtime = runtime
        server.spec = httpx.get(server.url + "/openapi.json").json()
        yield server


def client(live: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _valid(spec: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    jsonschema.Draft202012Validator({**schema, "components": spec["components"]}).validate(value)


def _declared(spec: dict[str, Any], media: str, status: str = "200") -> dict[str, Any]:
    return spec["paths"][CHAT]["post"]["responses"][status]["content"][media]["schema"]


def sse_chunks(live: Any, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The streamed answer's chunks (parsed) and every `data:` payload as sent, each held to the schema."""
    r = httpx.post(live.url + CHAT, json=body, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text[:300]
    payloads = [block[len("data: "):] for block in r.text.split("\n\n") if block]
    event = _declared(live.spec, "text/event-stream")
    for data in payloads:
        _valid(live.spec, event, {"data": data})
        if data != "[DONE]":
            _valid(live.spec, event["properties"]["data"]["oneOf"][1]["contentSchema"], json.loads(data))
    return [json.loads(d) for d in payloads if d != "[DONE]"], payloads


def test_whole_answer_is_text_and_a_decodable_wav(live):
    c = client(live)
    answer = c.chat.completions.create(model=MODEL, messages=HELLO, seed=3, **SPOKEN)
    message = answer.choices[0].message
    assert message.content is None and message.audio is not None  # OpenAI's: the text is the transcript
    assert message.audio.transcript and message.audio.id.startswith("audio_")
    audio, rate = sf.read(io.BytesIO(base64.b64decode(message.audio.data)), dtype="int16")
    assert rate == RATE and audio.ndim == 1 and len(audio) > 0
    assert answer.choices[0].finish_reason == "stop" and answer.object == "chat.completion"
    usage = answer.usage
    assert usage.completion_tokens_details.audio_tokens == len(audio) // 1920
    assert usage.completion_tokens == usage.completion_tokens_details.text_tokens + len(audio) // 1920
    r = httpx.post(live.url + CHAT, json={"model": MODEL, "messages": HELLO, "seed": 3, **SPOKEN}, timeout=60)
    _valid(live.spec, _declared(live.spec, "application/json"), r.json())
    assert r.json()["choices"][0]["message"]["audio"]["transcript"] == message.audio.transcript


def test_streamed_pcm16_and_transcript_equal_the_whole_answer_under_one_seed(live):
    body = {"model": MODEL, "messages": HELLO, "seed": 11, **SPOKEN}
    whole = httpx.post(live.url + CHAT, json=body, timeout=60).json()
    spoken = whole["choices"][0]["message"]["audio"]
    chunks, payloads = sse_chunks(live, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert payloads[-1] == "[DONE]"
    audio = [ch["choices"][0]["delta"]["audio"] for ch in chunks if ch["choices"] and
             "audio" in ch["choices"][0]["delta"]]
    pcm = b"".join(base64.b64decode(a["data"]) for a in audio if "data" in a)
    wav, _ = sf.read(io.BytesIO(base64.b64decode(spoken["data"])), dtype="int16")
    assert pcm == wav.astype("<i2").tobytes()  # the same samples, bit for bit
    assert "".join(a.get("transcript", "") for a in audio) == spoken["transcript"]
    assert audio[0]["id"].startswith("audio_") and all("id" not in a for a in audio[1:])
    assert audio[-1].keys() == {"expires_at"}  # the last audio delta: its expiry alone (OpenAI's)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(ch["usage"] is None for ch in chunks[:-1])
    assert len({ch["id"] for ch in chunks}) == 1


def test_the_openai_client_reads_the_stream(live):
    c = client(live)
    transcript, pcm, finish = [], b"", None
    for chunk in c.chat.completions.create(model=MODEL, messages=HELLO, seed=5, stream=True, **SPOKEN):
        delta = chunk.choices[0].delta
        audio = delta.audio
        if audio is not None:
            transcript.append(audio.transcript or "")
            pcm += base64.b64decode(audio.data or "")
        finish = chunk.choices[0].finish_reason or finish
    whole = c.chat.completions.create(model=MODEL, messages=HELLO, seed=5, **SPOKEN).choices[0].message.audio
    assert "".join(transcript) == whole.transcript and finish == "stop"
    assert np.array_equal(np.frombuffer(pcm, "<i2"), sf.read(io.BytesIO(base64.b64decode(whole.data)),
                                                              dtype="int16")[0])


def test_text_only_answers_as_any_chat_server(live):
    c = client(live)
    answer = c.chat.completions.create(model=MODEL, messages=HELLO, seed=2, max_tokens=4)
    message = answer.choices[0].message
    assert message.audio is None and message.content and answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 4 and answer.usage.completion_tokens_details.audio_tokens == 0
    assert live.runtime.submitted[-1]["modalities"] == ["text"] and "speaker" not in live.runtime.submitted[-1]
    streamed = c.chat.completions.create(model=MODEL, messages=HELLO, seed=2, max_tokens=4, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == message.content
    chunks, _ = sse_chunks(live, {"model": MODEL, "messages": HELLO, "seed": 2, "stream": True})
    assert all("audio" not in ch["choices"][0]["delta"] for ch in chunks)


def test_an_input_audio_turn_reaches_the_card_as_sent(live):
    wav = io.BytesIO()
    sf.write(wav, np.zeros(1600, np.float32), 16000, format="WAV")
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav.getvalue()).decode(), "format": "wav"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is said here?"}, part]}]
    answer = client(live).chat.completions.create(model=MODEL, messages=messages, seed=1, **SPOKEN)
    assert answer.choices[0].message.audio.transcript
    sent = live.runtime.submitted[-1]
    assert sent["messages"] == messages and sent["speaker"] == "Ethan" and sent["seed"] == 1


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"n": 2}, "n"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"modalities": ["text", "audio"]}, "audio"),
    ({"modalities": ["audio"], "audio": {"voice": "Ethan", "format": "wav"}}, "modalities"),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "audio.voice"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio.voice"),
    ({"modalities": ["text", "audio"], "audio": {"voice": "Ethan", "format": "ogg"}}, "audio.format"),
    ({"max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens"),
    ({"temperature": True}, "temperature"),
    ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages[0].role"),
    ({"messages": [{"role": "assistant", "audio": {"id": "audio_1"}}]}, "messages[0].audio"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": 1, "format": "wav"}}]}]},
     "messages[0].content[0].input_audio.data"),
    ({"messages": []}, "messages"),
])
def test_refusals_name_the_field_in_openais_shape(live, extra, param):
    r = httpx.post(live.url + CHAT, json={"model": MODEL, "messages": HELLO, **extra}, timeout=60)
    assert r.status_code == 400, r.text
    _valid(live.spec, _declared(live.spec, "application/json", "400"), r.json())
    assert r.json()["error"]["param"] == param and r.json()["error"]["message"].startswith(param)
    with pytest.raises(openai.BadRequestError) as e:
        client(live).chat.completions.create(model=MODEL, messages=HELLO, extra_body=extra)
    assert e.value.param == param


@pytest.mark.parametrize("extra, param", [
    ({"messages": [*HELLO, {"role": "user", "content": "<|im_end|>"}]}, "messages[2].content"),
    ({"temperature": 0.1}, "temperature"),
])
def test_the_cards_refusals_name_the_parameter_sent(live, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        client(live).chat.completions.create(**{"model": MODEL, "messages": HELLO, **extra})
    assert e.value.param == param and e.value.body["message"].startswith(param + ": ")


def test_the_published_body_allows_what_is_taken_and_forbids_what_is_refused(live):
    body = {"$ref": "#/components/schemas/ChatBody"}
    taken = [{"model": MODEL, "messages": HELLO}, {"model": MODEL, "messages": HELLO, "seed": 3, **SPOKEN},
             {"model": MODEL, "messages": HELLO, "temperature": 0}, {"model": MODEL, "messages": HELLO, "temperature": 0.7},
             {"model": MODEL, "messages": HELLO, "max_completion_tokens": 4, "stream": True,
              "stream_options": {"include_usage": True}}]
    for value in taken:
        _valid(live.spec, body, value)
    refused = [{"modalities": ["text", "audio"]}, {"modalities": ["audio"], **{"audio": SPOKEN["audio"]}},
               {"modalities": ["text", "text"]}, {"max_tokens": 3, "max_completion_tokens": 3}, {"seed": -1},
               {"audio": {"voice": "alloy", "format": "wav"}}, {"n": 2}, {"tools": []}, {"temperature": 0.1},
               {"temperature": 2.5}]
    for extra in refused:
        with pytest.raises(jsonschema.ValidationError):
            _valid(live.spec, body, {"model": MODEL, "messages": HELLO, **extra})


def test_a_request_that_fails_is_an_error_event_mid_stream_and_a_500_whole(live):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "FAIL"}], **SPOKEN}
    chunks, payloads = sse_chunks(live, {**body, "stream": True})
    assert "[DONE]" not in payloads and chunks[-1]["error"]["code"] == "error"
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])  # no answer looks finished
    r = httpx.post(live.url + CHAT, json=body, timeout=60)
    assert r.status_code == 500 and r.json()["error"]["code"] == "error"


def test_openais_speaking_chat_models_are_its_aliases_and_an_unserved_model_is_a_404(live):
    answer = client(live).chat.completions.create(model="gpt-4o-audio-preview", messages=HELLO, seed=3, **SPOKEN)
    assert answer.model == "gpt-4o-audio-preview" and answer.choices[0].message.audio.transcript
    listed = [m["id"] for m in httpx.get(live.url + "/v1/models", timeout=60).json()["data"]]
    assert listed[0] == MODEL and "gpt-4o-mini-audio-preview" in listed and "tts-1" not in listed
    for name in ("tts-1", "gpt-5"):  # a speech model's name is not served by a chat card
        with pytest.raises(openai.NotFoundError) as e:
            client(live).chat.completions.create(model=name, messages=HELLO)
        assert e.value.param == "model" and e.value.code == "model_not_found"


def test_the_speech_routes_refuse_a_chat_card_naming_chat_completions(live):
    for path, body in (("/v1/audio/speech", {"input": "hi"}), ("/v1/audio/speech/batch", {"items": [{"input": "hi"}]})):
        r = httpx.post(live.url + path, json=body, timeout=60)
        assert r.status_code == 404 and CHAT in r.json()["error"]["message"], (path, r.text)
        declared = live.spec["paths"][path]["post"]["responses"]["404"]["content"]["application/json"]["schema"]
        _valid(live.spec, declared, r.json())
        assert r.json()["error"]["code"] == "model_not_supported"
    from websockets.sync.client import connect
    with connect(live.url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
        event = json.loads(ws.recv(timeout=30))
    assert event["type"] == "error" and CHAT in event["message"]
    voices = httpx.get(live.url + "/v1/audio/voices", timeout=60)  # the card's speakers listed as declared
    assert voices.status_code == 200 and [v["kind"] for v in voices.json()["voices"]][:3] == ["speaker"] * 3
    _valid(live.spec, live.spec["paths"]["/v1/audio/voices"]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"], voices.json())


def test_a_card_that_is_no_chat_card_answers_404_naming_it():
    runtime = shared_runtime()
    with LiveServer(runtime) as server:
        r = httpx.post(server.url + CHAT, json={"model": runtime.card.name, "messages": HELLO}, timeout=60)
        spec = httpx.get(server.url + "/openapi.json").json()
    assert r.status_code == 404 and runtime.card.name in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "model"
    _valid(spec, spec["paths"][CHAT]["post"]["responses"]["404"]["content"]["application/json"]["schema"], r.json())


def test_a_client_that_leaves_cancels_its_request(live):
    runtime = live.runtime
    runtime.hold()  # no step runs until the request is cancelled (a cancel opens the gate)
    try:
        body = {"model": MODEL, "messages": HELLO, "stream": True, **SPOKEN}
        with httpx.stream("POST", live.url + CHAT, json=body, timeout=60) as r:
            first = next(r.iter_lines())  # the role chunk: sent before any step
            assert first.startswith("data: ") and json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
        assert _idle(runtime)
    finally:
        runtime.release()


def _idle(runtime: ChatRuntime) -> bool:
    import time
    deadline = time.monotonic() + 30
    while runtime.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return runtime.stats()["running"] == 0
