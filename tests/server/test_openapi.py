"""`/openapi.json` says what the server does: requests built from the published schema (hypothesis draws
the operation, its parameters and its body's fields from the schema) get only answers the schema declares,
with a declared content type and, for JSON, a body that validates; each error status is answered as declared;
the speech stream's WebSocket is published as its handshake's GET, and every message a real session sends
and receives (a spoken, a cancelled and a refused utterance, a refused turn, bad messages) validates
against its schema."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverkit import CARD, TEXT, LiveServer, shared_runtime
from v2.card import load_card
from v2.runtime import Runtime
from v2.server.audio import CONTENT_TYPES
from v2.server.schema import SpeechBody
from v2.server.ws_messages import KINDS
from wskit import ws_url

SPEECH = "/v1/audio/speech"
BATCH = "/v1/audio/speech/batch"
STREAM = "/v1/audio/speech/stream"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        server.spec = httpx.get(server.url + "/openapi.json").json()
        yield server


def conforms(spec: dict[str, Any], method: str, path: str, r: httpx.Response) -> None:
    """The answer is one the schema declares for the operation: status, content type, JSON body."""
    declared = spec["paths"][path][method.lower()]["responses"]
    assert str(r.status_code) in declared, (method, path, r.status_code, r.text[:300])
    content = declared[str(r.status_code)].get("content", {})
    media = r.headers.get("content-type", "").split(";")[0].strip()
    assert media in content, (method, path, r.status_code, media, sorted(content))
    if media == "application/json":
        schema = {**content[media]["schema"], "components": spec["components"]}
        jsonschema.Draft202012Validator(schema).validate(r.json())


def test_the_schema_describes_the_speech_body_its_audio_and_every_error(live):
    spec = live.spec
    speech = spec["paths"][SPEECH]["post"]
    body = speech["requestBody"]["content"]["application/json"]["schema"]
    assert speech["requestBody"]["required"] and body == {"$ref": "#/components/schemas/SpeechBody"}
    fields = spec["components"]["schemas"]["SpeechBody"]
    assert set(fields["properties"]) == set(SpeechBody.model_fields) and fields["required"] == ["input"]
    assert fields["additionalProperties"] is False
    assert set(speech["responses"]["200"]["content"]) == set(CONTENT_TYPES.values()) | {"text/event-stream"}
    assert {"400", "401", "403", "404", "413", "415", "429", "500", "503"} <= set(speech["responses"])
    assert {"400", "409"} <= set(spec["paths"]["/v1/audio/voices"]["post"]["responses"])
    form = spec["paths"]["/v1/audio/voices"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert "speaker_embedding" in _schema_of(spec, form)["properties"]
    batch = spec["paths"][BATCH]["post"]
    assert batch["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SpeechBatchBody"}
    batch_body = spec["components"]["schemas"]["SpeechBatchBody"]
    assert set(batch_body["properties"]) == set(SpeechBody.model_fields) | {"items"} and batch_body["required"] == ["items"]
    assert {"200", "400", "415"} <= set(batch["responses"])
    for path, item in spec["paths"].items():
        for method, op in item.items():
            assert method in HTTP_METHODS, (method, path)
            assert "422" not in op["responses"], (method, path)  # validation errors are answered as 400
            assert {"500", "503"} <= set(op["responses"]), (method, path)
            assert ("401" in op["responses"]) == path.startswith("/v1"), (method, path)
            assert ("403" in op["responses"]) == (method in ("post", "put", "patch", "delete") or path == STREAM), (
                method, path)  # every WebSocket handshake is held to the Origin rule
    assert set(spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}


# --- requests drawn from the schema ---

JSON_SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def _schema_of(spec: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else ref_or_schema


@st.composite
def requests_from(draw: st.DrawFn, spec: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """(method, the spec's path, the URL path, httpx arguments) for an operation of the schema."""
    ops = sorted((m.upper(), p) for p, item in spec["paths"].items() for m in item)
    method, path = draw(st.sampled_from(ops))
    op = spec["paths"][path][method.lower()]
    url, kwargs = path, dict[str, Any]()
    params: dict[str, str] = {}
    for p in op.get("parameters", []):
        value = draw(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/?#"), min_size=1,
                             max_size=12) if p["in"] == "path" else st.none() | st.text(max_size=12))
        if p["in"] == "path":
            url = url.replace("{" + p["name"] + "}", quote(value or "", safe=""))
        elif value is not None:
            params[p["name"]] = value
    kwargs["params"] = params
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" in content:
        props = _schema_of(spec, content["application/json"]["schema"])["properties"]
        body = draw(st.dictionaries(st.sampled_from(sorted(props)) | st.text(max_size=8), JSON_VALUES, max_size=6))
        if draw(st.booleans()):  # often close to a valid request
            body = {"input": draw(st.sampled_from([TEXT, "", "Hi."])), **body}
        if "input" in body:
            body["max_frames"] = draw(st.integers(1, 6))  # the runs stay short
        media = draw(st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"]))
        kwargs.update(content=json.dumps(body).encode(), headers={"content-type": media})
    elif "multipart/form-data" in content:
        props = _schema_of(spec, content["multipart/form-data"]["schema"])["properties"]
        fields = draw(st.lists(st.sampled_from(sorted(props)), unique=True))
        kwargs["data"] = {f: draw(st.text(max_size=10)) for f in fields if f != "audio_sample"}
        if "audio_sample" in fields:
            kwargs["files"] = {"audio_sample": ("a.wav", draw(st.binary(max_size=64)), "audio/wav")}
        elif not kwargs["data"]:
            kwargs["data"] = {"unrelated": "x"}
    if draw(st.booleans()) and method != "GET":
        kwargs.setdefault("headers", {})["origin"] = draw(st.sampled_from(["http://evil.example", "null"]))
    return method, path, url, kwargs


@given(data=st.data())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
def test_requests_drawn_from_the_schema_get_declared_answers(live, data):
    method, path, url, kwargs = data.draw(requests_from(live.spec))
    r = httpx.request(method, live.url + url, timeout=60, **kwargs)
    conforms(live.spec, method, path, r)


# --- each error status, as declared ---

def test_each_error_status_is_answered_as_declared(live):
    spec, small = live.spec, {"input": TEXT, "max_frames": 4}
    json_type = {"content-type": "application/json"}
    cases = [
        ("POST", SPEECH, {"json": {**small, "response_format": fmt}}, 200) for fmt in CONTENT_TYPES
    ] + [
        ("POST", SPEECH, {"json": {**small, "stream_format": "sse", "response_format": "pcm"}}, 200),
        ("POST", SPEECH, {"json": {"input": TEXT, "speed": 2.0}}, 400),
        ("POST", SPEECH, {"content": b"[" * 100_000, "headers": json_type}, 400),
        ("POST", SPEECH, {"json": small, "headers": {"origin": "http://evil.example"}}, 403),
        ("POST", SPEECH, {"json": {"model": "nope", "input": TEXT}}, 404),
        ("POST", SPEECH, {"content": b" " * (17 * 2**20), "headers": json_type}, 413),
        ("POST", SPEECH, {"content": b"{}", "headers": {"content-type": "text/plain"}}, 415),
        ("POST", "/v1/audio/voices", {"data": {"name": "x"}}, 400),
        ("POST", "/v1/audio/voices", {"data": {"name": "x", "speaker_embedding": "[0.5]"}}, 400),
        ("POST", BATCH, {"json": {"max_frames": 4, "items": [{"input": TEXT}, {"input": TEXT, "speed": 2.0}]}}, 200),
        ("POST", BATCH, {"json": {"items": []}}, 400),
        ("POST", BATCH, {"content": b"{}", "headers": {"content-type": "text/plain"}}, 415),
        ("DELETE", "/v1/audio/voices", {}, 400),
        ("DELETE", "/v1/audio/voices/{name}", {"url": "/v1/audio/voices/nobody-stored"}, 404),
        ("GET", "/health", {}, 200), ("GET", "/metrics", {}, 200), ("GET", "/v1/models", {}, 200),
        ("GET", "/v1/audio/voices", {}, 200), ("GET", "/v1/audio/voices", {"params": {"legacy": "true"}}, 200),
        ("GET", "/v1/audio/voices", {"params": {"legacy": "maybe"}}, 400),
        ("GET", STREAM, {}, 404),  # a plain GET, not a handshake
        ("GET", STREAM, {"headers": {"connection": "upgrade", "upgrade": "websocket"}}, 400),  # no key, no version
    ]
    for method, path, kwargs, status in cases:
        url = kwargs.pop("url", path)
        r = httpx.request(method, live.url + url, timeout=60, **kwargs)
        assert r.status_code == status, (method, url, r.text[:300])
        conforms(spec, method, path, r)
    live.state.draining = True
    try:
        for method, path in (("POST", SPEECH), ("GET", "/health"), ("GET", "/v1/models")):
            r = httpx.request(method, live.url + path, json=small if method == "POST" else None, timeout=30)
            assert r.status_code == 503
            conforms(spec, method, path, r)
    finally:
        live.state.draining = False


def test_401_429_and_500_are_answered_as_declared(live):
    spec = live.spec
    with LiveServer(shared_runtime(), api_key="sesame") as keyed:
        for method, path in (("POST", SPEECH), ("GET", "/v1/models"), ("GET", "/v1/audio/voices")):
            conforms(spec, method, path, httpx.request(method, keyed.url + path, timeout=30))
        broken = keyed.state.voices

        def fails() -> list:
            raise OSError(5, "Input/output error")

        broken.listing = fails
        r = httpx.get(keyed.url + "/v1/audio/voices", headers={"Authorization": "Bearer sesame"}, timeout=30)
        assert r.status_code == 500
        conforms(spec, "GET", "/v1/audio/voices", r)
    card = load_card(CARD)
    ar = card.loops.ar_decode.model_copy(update={"max_running": 1, "max_waiting": 1})
    rt = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}))
    body = {"input": TEXT, "max_frames": 600, "min_frames": 600, "response_format": "pcm"}
    try:
        with LiveServer(rt) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            with client.stream("POST", SPEECH, json=body) as running:
                pieces = running.iter_bytes()
                next(pieces)
                with client.stream("POST", SPEECH, json=body) as waiting:
                    assert waiting.status_code == 200
                    r = httpx.post(server.url + SPEECH, json=body, timeout=30)
                    assert r.status_code == 429
                    conforms(spec, "POST", SPEECH, r)
    finally:
        rt.close()


# --- the speech stream (WebSocket) ---

def _validator(spec: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})


def test_the_schema_describes_the_speech_streams_protocol(live):
    spec = live.spec
    op = spec["paths"][STREAM]["get"]
    assert "WebSocket" in op["description"] and "101" in op["responses"]
    assert {"400", "401", "403", "404", "500", "503"} <= set(op["responses"])
    ws = op["x-websocket"]
    assert ws["messages"]["client"] == list(KINDS)  # every kind the session reads, input.cancel among them
    server = ["session.ready", "audio.start", "audio.done", "session.done", "input.cancelled", "context.appended",
              "error"]
    assert ws["messages"]["server"] == server
    schemas = spec["components"]["schemas"]
    for union, kinds in (("StreamClientMessage", KINDS), ("StreamServerEvent", server)):
        assert ws[{"StreamClientMessage": "clientMessages", "StreamServerEvent": "serverMessages"}[union]] == {
            "$ref": f"#/components/schemas/{union}"}
        mapping = schemas[union]["discriminator"]["mapping"]
        assert sorted(mapping) == sorted(kinds)
        for kind, ref in mapping.items():
            assert schemas[ref.rsplit("/", 1)[1]]["properties"]["type"] == {"const": kind}
    config = schemas["StreamSessionConfig"]["properties"]
    assert set(config) == (set(SpeechBody.model_fields) - {"input"}) | {"type", "stream_audio", "split_granularity"}
    for name in ("StreamAudioDone", "StreamSessionDone"):
        assert "cancelled" in schemas[name]["properties"] and "cancelled" not in schemas[name]["required"]
    client, events = _validator(spec, "StreamClientMessage"), _validator(spec, "StreamServerEvent")
    assert not client.is_valid({"type": "input.text"}) and not client.is_valid({"type": "nope"})
    assert not events.is_valid({"type": "session.done", "utterance_index": 0, "total_sentences": 1, "cancelled": False})


def test_a_real_sessions_messages_validate_against_the_schema(live):
    """Every message sent and every event received in a session that speaks, cancels, is refused and closes."""
    from websockets.asyncio.client import connect

    client, events = _validator(live.spec, "StreamClientMessage"), _validator(live.spec, "StreamServerEvent")
    sent = [
        {"type": "input.cancel"},  # none under way: input.cancelled, cancelled false
        {"type": "session.config", "max_new_tokens": 40, "min_new_tokens": 40, "response_format": "pcm",
         "stream_audio": True, "seed": 3},
        {"type": "input.text", "text": TEXT}, {"type": "input.done"},  # spoken (sentences framed)
        {"type": "input.text", "text": "One. Two. Three."}, {"type": "input.cancel"},  # cancelled mid-way
        {"type": "context.append", "speaker": 0, "text": "hi"},  # a family without context: an error
        {"type": "session.config", "temperature": -1.0},  # refused, naming the field (outside the schema's range)
        {"type": "input.text", "text": "Bye."}, {"type": "session.close"},
    ]
    for message in sent:
        if message.get("temperature") == -1.0:
            assert not client.is_valid(message)  # the schema publishes the bound the server refuses it by
        else:
            client.validate(message)

    async def run() -> tuple[list[dict[str, Any]], int, Any]:
        got: list[dict[str, Any]] = []
        binary = 0
        async with connect(ws_url(live), max_size=None) as ws:
            await ws.send(b"\x00")  # a binary frame: an error naming `message`
            await ws.send("[1]")     # not an object
            for message in sent:
                if message["type"] == "input.cancel" and got:  # the utterance has begun: wait for its audio
                    while binary == 0 or got[-1]["type"] != "audio.start":
                        msg = await asyncio.wait_for(ws.recv(), 60)
                        if isinstance(msg, bytes):
                            binary += 1
                        else:
                            got.append(json.loads(msg))
                await ws.send(json.dumps(message))
                if message["type"] == "input.done":
                    while not got or got[-1]["type"] != "session.done":
                        msg = await asyncio.wait_for(ws.recv(), 60)
                        binary += isinstance(msg, bytes)
                        if isinstance(msg, str):
                            got.append(json.loads(msg))
            try:
                async for msg in ws:
                    binary += isinstance(msg, bytes)
                    if isinstance(msg, str):
                        got.append(json.loads(msg))
            finally:
                code = ws.close_code
        return got, binary, code

    got, binary, code = asyncio.run(run())
    for event in got:
        events.validate(event)
    kinds = [e["type"] for e in got]
    assert {"session.ready", "audio.start", "audio.done", "session.done", "input.cancelled", "error"} <= set(kinds)
    assert binary > 0 and code == 1000, kinds
    assert [e["cancelled"] for e in got if e["type"] == "input.cancelled"] == [False, True]
    assert any(e.get("cancelled") is True for e in got if e["type"] == "session.done")
    assert {e["param"] for e in got if e["type"] == "error"} >= {"message", "temperature"}
