"""Hostile input on the speech, batch and voice surfaces is refused naming its field, never a 500: a
`speaker_embedding` integer past a float's range; a form field over the server's part limit (`--max-part-mb`,
named by the part, and raised by the option); a field name holding a lone surrogate at any depth of a speech
body or of a batch item (named by its path, the key as its escape; a batch item fails alone); a batch over
the item limit (named `items`, with the limit's wording, however many items); an item that is not an object
(the batch refused naming it). Through a real uvicorn server and httpx."""

from __future__ import annotations

import json

import httpx
import pytest

from serverkit import CARD, TEXT, LiveServer, shared_runtime, wait_idle
from v2.server import ServerConfig
from wskit import server_log

VOICES, SPEECH, BATCH = "/v1/audio/voices", "/v1/audio/speech", "/v1/audio/speech/batch"
HUGE = "1" + "0" * 400  # past float64 (1e308), and under Python's 4,300-digit parse limit


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, max_batch_items=8)) as server:
        yield server


def _json(live, path: str, raw: str) -> httpx.Response:
    return httpx.post(live.url + path, content=raw.encode(), headers={"content-type": "application/json"},
                      timeout=120)


def _refused(r: httpx.Response, param: str, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param + ":"), err
    return err


@pytest.mark.parametrize("value", [HUGE, "-" + HUGE, "1" + "0" * 5000])
def test_an_embedding_integer_past_a_float_is_a_400_naming_the_field(live, value):
    embedding = "[" + ",".join(["0.1"] * 63 + [value]) + "]"
    with server_log() as log:
        r = httpx.post(live.url + VOICES, data={"name": "big", "speaker_embedding": embedding}, timeout=60)
    _refused(r, "speaker_embedding")
    assert not log.tracebacks(), log.tracebacks()


@pytest.mark.parametrize("multipart", [True, False])
@pytest.mark.parametrize("part", ["speaker_embedding", "name", "ref_text"])
def test_a_form_field_over_the_part_limit_is_refused_naming_it(live, multipart, part):
    fields = {"name": "v", "speaker_embedding": "[0.1]", part: "[" + ",".join(["0.1"] * 10**6) + "]"}
    files = {"unused": ("x.bin", b"x")} if multipart else None  # a file part makes httpx send multipart
    r = httpx.post(live.url + VOICES, data=fields, files=files, timeout=60)
    err = _refused(r, part)
    assert "1048576" in err["message"] and "--max-part-mb" in err["message"], err


def test_the_part_limit_is_the_servers_to_raise():
    embedding = "[" + ",".join(["0.1"] * 10**6) + "]"  # 4 MB: past the default, within 8 MiB
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, max_part_bytes=8 * 2**20)) as server:
        r = httpx.post(server.url + VOICES, data={"name": "v", "speaker_embedding": embedding}, timeout=60)
    err = _refused(r, "speaker_embedding")  # past the cap: the family's (or the store's) own refusal
    assert "--max-part-mb" not in err["message"], err


@pytest.mark.parametrize("body, param", [
    ('{"input": "%s", "k\\ud800": 1}', "k\\ud800"),
    ('{"input": "%s", "voice": {"id": "alloy", "k\\ud800": 1}}', "voice.k\\ud800"),
    ('{"input": "%s", "context": [{"text": "Hi.", "k\\udfff": 1}]}', "context[0].k\\udfff"),
    ('{"input": "%s", "context": [{"text": "Hi."}, {"text": "Yo.", "a": {"b\\ud800c": 1}}]}', "context[1].a.b\\ud800c"),
])
def test_a_field_name_with_a_lone_surrogate_is_refused_by_its_path_at_any_depth(live, body, param):
    with server_log() as log:
        r = _json(live, SPEECH, body % TEXT)
    assert _refused(r, param)["code"] == "invalid_value"
    assert not log.tracebacks(), log.tracebacks()


def test_a_batch_item_with_such_a_field_name_fails_alone_naming_its_path(live):
    items = ('[{"input": "%s", "k\\ud800": 1}, {"input": "%s", "voice": {"id": "alloy", "\\udc00": 1}}, '
             '{"input": "%s", "id": "fine"}]' % (TEXT, TEXT, TEXT))
    with server_log() as log:
        r = _json(live, BATCH, '{"max_frames": 4, "items": %s}' % items)
    assert r.status_code == 200, r.text
    first, second, third = r.json()["results"]
    assert first["status"] == "error" and first["error"]["param"] == "k\\ud800", first
    assert second["status"] == "error" and second["error"]["param"] == "voice.\\udc00", second
    assert third["status"] == "success" and third["id"] == "fine"
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(shared_runtime())


def test_request_level_fields_of_a_batch_are_checked_at_any_depth_too(live):
    r = _json(live, BATCH, '{"voice": {"id": "alloy", "k\\ud800": 1}, "items": [{"input": "%s"}]}' % TEXT)
    _refused(r, "voice.k\\ud800")


@pytest.mark.parametrize("n", [9, 200, 10_000])
def test_a_batch_over_the_item_limit_says_the_item_limit(live, n):
    r = httpx.post(live.url + BATCH, json={"items": [{"input": "x"}] * n}, timeout=60)
    err = _refused(r, "items")
    assert err["code"] == "too_many_items" and "8" in err["message"] and "--max-batch-items" in err["message"]


def test_a_batch_at_the_item_limit_is_taken(live):
    r = httpx.post(live.url + BATCH, json={"max_frames": 2, "items": [{"input": TEXT, "seed": i} for i in range(8)]},
                   timeout=120)
    assert r.status_code == 200 and r.json()["succeeded"] == 8, r.text
    wait_idle(shared_runtime())


@pytest.mark.parametrize("item, kind", [(["input", "x"], "an array"), ("x", "a string"), (3, "a number"),
                                        (None, "null")])
def test_an_item_that_is_not_an_object_refuses_the_batch_naming_it(live, item, kind):
    r = httpx.post(live.url + BATCH, json={"items": [{"input": TEXT}, item]}, timeout=60)
    err = _refused(r, "items[1]")
    assert kind in err["message"], err


def test_the_refusals_bodies_are_json_a_client_can_read(live):
    """The escape, not the surrogate, is in the answer: it decodes as UTF-8 JSON."""
    r = _json(live, SPEECH, '{"input": "%s", "voice": {"\\ud800": 1}}' % TEXT)
    assert json.loads(r.content.decode("utf-8"))["error"]["param"] == "voice.\\ud800"


# ----- the pieces, without a server --------------------------------------------------------------------
def test_the_serve_option_sets_the_part_limit(capsys):
    from v2.cli import build_parser
    args = build_parser().parse_args(["serve", "--card", CARD, "--max-part-mb", "3"])
    assert ServerConfig.from_options(CARD, args).max_part_bytes == 3 * 2**20
    default = build_parser().parse_args(["serve", "--card", CARD])
    assert ServerConfig.from_options(CARD, default).max_part_bytes == ServerConfig.for_card(CARD).max_part_bytes
    for bad in ("0", "-1", "nan", "inf", "big"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--max-part-mb", bad])
        assert "--max-part-mb" in capsys.readouterr().err


@pytest.mark.parametrize("value, path", [
    ({"a": 1}, None), ({"é": {"ü": [1, {"ok": 2}]}}, None), ({"k\ud800": 1}, "k\\ud800"),
    ({"a": {"b": [0, {"c\udfff": 1}]}}, "a.b[1].c\\udfff"), ([{"x": 1}, {"\udc00": 1}], "[1].\\udc00"),
    ({"a\ud800": {"b\ud800": 1}}, "a\\ud800"),
])
def test_unencodable_key_names_the_first_bad_key_by_its_path(value, path):
    from v2.server.jsonbody import unencodable_key
    assert unencodable_key(value) == path


@pytest.mark.parametrize("items, refused", [(3, False), (4, True), (10_000, True)])
def test_the_scan_counts_a_listed_members_elements(items, refused):
    """At most 3 items: counted before parsing; the items' own arrays and another member's are not counted."""
    from v2.server.errors import ApiError
    from v2.server.jsonbody import read_object
    body = {"other": list(range(50)), "items": [{"input": "x", "tags": [1, 2, 3, 4, 5]}] * items}
    raw = json.dumps(body).encode()
    if not refused:
        assert len(read_object(raw, max_members=10**6, lists={"items": 3})["items"]) == items
        return
    with pytest.raises(ApiError) as e:
        read_object(raw, max_members=10**6, lists={"items": 3})
    assert (e.value.param, e.value.code) == ("items", "too_many_items")


def test_a_listed_members_items_keep_their_keys_for_the_caller():
    from v2.server.errors import ApiError
    from v2.server.jsonbody import read_object
    raw = b'{"items": [{"k\\ud800": 1}], "v": {"k\\ud800": 1}}'
    with pytest.raises(ApiError) as e:
        read_object(raw, lists={"items": 3})
    assert e.value.param == "v.k\\ud800"  # the request-level one; the item's is left to the caller
    assert read_object(b'{"items": [{"k\\ud800": 1}]}', lists={"items": 3})["items"] == [{"k\ud800": 1}]


def test_an_integer_past_a_float_in_any_field_is_named_never_a_500(live):
    """Wherever a JSON number lands (speech, a batch's defaults and items, a stream's session.config), a
    401-digit integer is a refusal naming its field or taken as the field allows; never a server error."""
    from v2.server.schema import SpeechBody
    from websockets.sync.client import connect
    from wskit import ws_url
    fields = [f for f in SpeechBody.model_fields if f != "input"]
    with server_log() as log:
        for field in fields:
            for value in (HUGE, "-" + HUGE):
                for path, raw in ((SPEECH, '{"input": "Hi.", "max_frames": 2, "stream": false, "%s": %s}'),
                                  (BATCH, '{"max_frames": 2, "%s": %s, "items": [{"input": "Hi."}]}'),
                                  (BATCH, '{"max_frames": 2, "items": [{"input": "Hi.", "%s": %s}]}')):
                    r = _json(live, path, raw % (field, value))
                    assert r.status_code < 500, (path, field, r.text)
                    errors = [r.json()["error"]] if r.status_code >= 400 else \
                        [x["error"] for x in r.json()["results"] if x["status"] == "error"]
                    assert all(e["param"] and e["type"] != "server_error" for e in errors), (path, field, errors)
            with connect(ws_url(live)) as ws:
                ws.send('{"type": "session.config", "max_frames": 2, "%s": %s}' % (field, HUGE))
                event = json.loads(ws.recv(60))
                assert event["type"] == "session.ready" or (event["param"] and event["code"] != "internal_error"), \
                    (field, event)
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(shared_runtime())


def test_a_blank_transcript_is_named_as_the_form_names_it(live):
    """The store calls the transcript `text`; the form's refusal says `ref_text`, as its param does."""
    wav = _tone_wav()
    r = httpx.post(live.url + VOICES, data={"name": "blank", "ref_text": "   "},
                   files={"audio_sample": ("a.wav", wav, "audio/wav")}, timeout=60)
    err = _refused(r, "ref_text")
    assert err["message"].startswith("ref_text:"), err


def _tone_wav() -> bytes:
    import io

    import numpy as np
    import soundfile as sf
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(8000) / 8.0)).astype("float32"), 16000, format="WAV")
    return buf.getvalue()
