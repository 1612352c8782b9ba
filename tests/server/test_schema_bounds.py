"""The published schema bounds each field as the server does: for bodies at and across every bound (lengths,
ranges, formats' rates, fields that go together, inputs this model takes none of, the voice form, the delete's
name), the published schema's verdict and the server's agree (valid: answered; invalid: a 400 naming the
field). A whole float is an integer, as JSON Schema says. The pass over everything is test_schemathesis.py's."""

from __future__ import annotations

import io
from typing import Any

import httpx
import jsonschema
import pytest

from serverkit import CARD, LiveServer
from v2.card import load_card
from v2.fields import INT64_MAX
from v2.runtime import Runtime

SPEECH, BATCH, VOICES = "/v1/audio/speech", "/v1/audio/speech/batch", "/v1/audio/voices"
CAP, CHARS = 8, 40  # the card's frame cap and --max-input-chars here


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    card = load_card(CARD)
    ar = card.loops.ar_decode.model_copy(update={"max_frames": CAP})
    rt = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                           voices_dir=str(tmp_path_factory.mktemp("voices")))
    try:
        with LiveServer(rt, max_input_chars=CHARS, max_batch_items=2) as server:
            server.spec = httpx.get(server.url + "/openapi.json").json()
            yield server
    finally:
        rt.close()


def _valid(spec: dict[str, Any], name: str, body: Any) -> bool:
    v = jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})
    return v.is_valid(body)


X = "Hi."
BODIES: list[tuple[dict[str, Any], str | None]] = [  # (body, the field a refusal names)
    ({"input": X}, None), ({"input": ""}, "input"), ({"input": " \n\t"}, "input"), ({"input": "\x85\u3000"}, "input"),
    ({"input": "x" * CHARS}, None),
    ({"input": "x" * (CHARS + 1)}, "input"),
    *(({"input": X, k: v}, k if bad else None) for k, v, bad in [
        ("speed", 1, False), ("speed", 1.0, False), ("speed", 1.5, True), ("speed", 0.99, True),
        ("temperature", 0, False), ("temperature", 0.25, False), ("temperature", 3.0, False),
        ("temperature", 0.2, True), ("temperature", 3.01, True),
        ("top_p", 1.0, False), ("top_p", 0.01, False), ("top_p", 0, True), ("top_p", 1.01, True),
        ("top_k", 0, False), ("top_k", 2**31 - 1, False), ("top_k", -1, True), ("top_k", 2**31, True),
        ("repetition_penalty", 0.8, False), ("repetition_penalty", 2.0, False),
        ("repetition_penalty", 0.79, True), ("repetition_penalty", 2.01, True),
        ("seed", 0, False), ("seed", INT64_MAX, False), ("seed", 7.0, False), ("seed", -1, True),
        ("seed", INT64_MAX + 1, True), ("seed", 7.5, True),
        ("max_frames", 1, False), ("max_frames", CAP, False), ("max_frames", 2.0, False), ("max_frames", 0, True),
        ("max_frames", CAP + 1, True), ("max_new_tokens", CAP + 1, True), ("min_frames", 0, False),
        ("min_frames", CAP + 1, True), ("min_new_tokens", -1, True),
        ("sample_rate", 16000, False), ("sample_rate", 16000.0, False), ("sample_rate", 16001, True),
        ("model", "tts-1", False), ("voice", "alloy", False), ("voice", {"id": "alloy"}, False),
        ("context", None, False), ("context", [], True), ("x_vector_only_mode", None, False),
        ("x_vector_only_mode", True, True), ("ref_text", "words", True), ("ref_audio", "", True),
    ]),
    ({"input": X, "response_format": "wav", "sample_rate": 16001}, None),
    ({"input": X, "response_format": "wav", "sample_rate": 7999}, "sample_rate"),
    ({"input": X, "response_format": "opus", "sample_rate": 44100}, "sample_rate"),
    ({"input": X, "response_format": "pcm", "sample_rate": 192000}, None),
    ({"input": X, "response_format": "flac", "sample_rate": 65535}, None),
    ({"input": X, "response_format": "flac", "sample_rate": 166110}, None),
    ({"input": X, "response_format": "flac", "sample_rate": 166106}, "sample_rate"),  # libFLAC's rule (was a 500)
    ({"input": X, "response_format": "flac", "sample_rate": 65536}, "sample_rate"),
    ({"input": X, "stream_format": "sse", "stream": False}, "stream"),
    ({"input": X, "stream_format": "sse"}, None),
]


@pytest.mark.parametrize("body,field", BODIES, ids=[repr(b)[:60] for b, _ in BODIES])
def test_the_schema_and_the_server_agree_on_each_bound(live, body, field):
    valid = _valid(live.spec, "SpeechBody", body)
    r = httpx.post(live.url + SPEECH, json={**body, "stream": body.get("stream", False)}
                   if "stream_format" not in body else body, timeout=120)
    assert valid == (field is None), f"the schema calls {body} {'valid' if valid else 'invalid'}"
    if field is None:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_a_model_not_served_is_outside_the_schema_and_a_404(live):
    assert not _valid(live.spec, "SpeechBody", {"input": X, "model": "other"})
    assert httpx.post(live.url + SPEECH, json={"input": X, "model": "other"}, timeout=60).status_code == 404


def test_the_batch_publishes_its_bounds_and_an_items_null_id(live):
    spec = live.spec
    assert spec["components"]["schemas"]["SpeechBatchBody"]["properties"]["items"]["maxItems"] == 2
    assert _valid(spec, "SpeechBatchBody", {"items": [{"input": X, "id": None}]})
    assert not _valid(spec, "SpeechBatchBody", {"top_p": 5, "items": [{"input": X}]})
    assert not _valid(spec, "SpeechBatchBody", {"items": [{"input": X, "stream": True}]})
    r = httpx.post(live.url + BATCH, json={"items": [{"input": X, "id": None, "max_frames": 2}]}, timeout=120)
    assert r.status_code == 200 and r.json()["results"][0]["status"] == "success", r.text


def test_a_batch_items_stream_of_0_is_refused(live):
    r = httpx.post(live.url + BATCH, json={"items": [{"input": X, "stream": 0, "max_frames": 2}]}, timeout=120)
    assert r.status_code == 400 or r.json()["results"][0]["status"] == "error", r.text
    for field, value in (("stream", 0), ("stream_format", ""), ("stream", [])):  # 0 == False, not in JSON
        r = httpx.post(live.url + BATCH, json={"items": [{"input": X, "max_frames": 2}], field: value}, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_delete_without_a_name_is_outside_the_schema_and_refused(live):
    op = live.spec["paths"][VOICES]["delete"]
    name = next(p for p in op["parameters"] if p["name"] == "name")
    assert name["required"] is True and name["schema"]["pattern"]
    r = httpx.delete(live.url + VOICES, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "name"


@pytest.mark.parametrize("name,ok", [("", False), (" ", False), ("a b", False), ("../x", False), ("x" * 65, False),
                                     ("bob", True), ("Bob_2.v-1", True)])
def test_the_voice_forms_name_is_published_as_the_store_takes_it(live, name, ok):
    form = live.spec["components"]["schemas"]["Body_add_voice_v1_audio_voices_post"]
    assert jsonschema.Draft202012Validator(form).is_valid({"name": name, "audio_sample": "x"}) == ok
    assert "audio_sample" in form["required"] and form["properties"]["speaker_embedding"]["not"] == {}
    if not ok:
        r = httpx.post(live.url + VOICES, data={"name": name}, files={"audio_sample": ("a.wav", io.BytesIO(b"RIFF"))},
                       timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] in ("name", "voice"), r.text


def test_a_stored_voice_with_ref_audio_is_outside_the_schema_and_refused(live):
    from schemathesis_hooks import TONE_B64, tone_wav

    r = httpx.post(live.url + VOICES, data={"name": "kept"}, files={"audio_sample": ("a.wav", tone_wav())}, timeout=60)
    assert r.status_code == 200, r.text
    spec = httpx.get(live.url + "/openapi.json").json()  # built when asked for: the stored voice is in it now
    for voice in ("kept", {"id": "kept"}):
        body = {"input": X, "voice": voice, "ref_audio": TONE_B64, "stream": False}
        assert _valid(spec, "SpeechBody", {**body, "ref_audio": None}) and not _valid(spec, "SpeechBody", body)
        r = httpx.post(live.url + SPEECH, json=body, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text
    assert _valid(spec, "SpeechBody", {"input": X, "voice": "alloy", "ref_audio": TONE_B64})


@pytest.mark.parametrize("turn, param", [
    ({"speaker": 0, "text_ids": 0.0}, "context[0].text_ids"),      # a number where a list goes: named, not a 500
    ({"speaker": [1.0], "text_ids": [1.0]}, "context[0].speaker"),
    ({"speaker": 1.0, "text_ids": "12"}, "context[0].text_ids"),
])
def test_a_context_turns_integers_of_the_wrong_shape_are_named(turn, param):
    from v2.server.errors import ApiError
    from v2.server.schema import parse_body

    with pytest.raises(ApiError) as e:
        parse_body({"input": "x", "context": [turn]})
    assert e.value.param == "context" and e.value.message.startswith(param + ":"), e.value.body()


def test_a_context_turns_whole_floats_are_its_integers():
    from v2.server.schema import parse_body

    p = parse_body({"input": "x", "context": [{"speaker": 1.0, "text_ids": [3.0, 4]}]})
    turn = p.context[0]
    assert turn.speaker == 1 and list(turn.text_ids) == [3, 4] and all(type(x) is int for x in turn.text_ids)
