"""Every refusal in OpenAI's error shape with the right status and param, against a real server; the server
stays up through all of them and a bystander stream completes with its own audio."""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import numpy as np
import pytest

from serverkit import CARD, TEXT, LiveServer, in_process, s16, shared_runtime, wait_idle
from holds import slow_frames
from v2.card import load_card
from v2.runtime import Runtime

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def _error(r: httpx.Response, status: int, param: str | None, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


BAD_FIELDS = [
    ({"input": ""}, "input"),
    ({"input": "   "}, "input"),
    ({"input": "x" * 4097}, "input"),
    ({"input": TEXT, "speed": 1.5}, "speed"),
    ({"input": TEXT, "response_format": "ogg"}, "response_format"),
    ({"input": TEXT, "response_format": "opus", "sample_rate": 44100}, "sample_rate"),
    ({"input": TEXT, "response_format": "wav", "sample_rate": 1000}, "sample_rate"),
    ({"input": TEXT, "voice": "nobody"}, "voice"),
    ({"input": TEXT, "temperature": 1000.0}, "temperature"),
    ({"input": TEXT, "temperature": True}, "temperature"),
    ({"input": TEXT, "top_p": 0.0}, "top_p"),
    ({"input": TEXT, "top_k": -1}, "top_k"),
    ({"input": TEXT, "repetition_penalty": 0.0}, "repetition_penalty"),
    ({"input": TEXT, "seed": -1}, "seed"),
    ({"input": TEXT, "seed": "7"}, "seed"),
    ({"input": TEXT, "max_new_tokens": 10**6}, "max_new_tokens"),
    ({"input": TEXT, "max_frames": 0}, "max_frames"),
    ({"input": TEXT, "max_frames": 10, "max_new_tokens": 20}, "max_frames"),
    ({"input": TEXT, "max_frames": 10, "min_frames": 20}, "min_frames"),
    ({"input": TEXT, "min_new_tokens": 10**6}, "min_new_tokens"),
    ({"input": TEXT, "stream_format": "sse", "stream": False}, "stream"),
    ({"input": TEXT, "ref_text": "words"}, "ref_text"),
    ({"input": TEXT, "ref_audio": "file:///etc/passwd"}, "ref_audio"),
    ({"input": TEXT, "surprise": 1}, "surprise"),
    ({"voice": "alloy"}, "input"),
]


@pytest.mark.parametrize("body,param", BAD_FIELDS, ids=[p + str(i) for i, (_, p) in enumerate(BAD_FIELDS)])
def test_bad_fields_are_400_naming_the_openai_param(live, body, param):
    err = _error(httpx.post(live.url + SPEECH, json=body, timeout=30), 400, param)
    assert err["message"].startswith(param) and err["type"] == "invalid_request_error"


def test_unknown_model_is_404_model_not_found(live):
    _error(httpx.post(live.url + SPEECH, json={"model": "tts-2", "input": TEXT}, timeout=30), 404, "model",
           "model_not_found")


def test_malformed_json_and_wrong_content_type(live):
    r = httpx.post(live.url + SPEECH, content=b'{"input": "x",', headers={"content-type": "application/json"})
    _error(r, 400, None, "invalid_json")
    _error(httpx.post(live.url + SPEECH, content=b"[1, 2]", headers={"content-type": "application/json"}), 400,
           None, "invalid_json")
    r = httpx.post(live.url + SPEECH, content=json.dumps({"input": TEXT}), headers={"content-type": "text/plain"})
    _error(r, 415, None, "unsupported_media_type")


def test_huge_bodies_are_refused(live):
    r = httpx.post(live.url + SPEECH, json={"input": "a" * (10 * 2**20)}, timeout=60)  # 10 MB of input
    _error(r, 400, "input")
    huge = base64.b64encode(bytes(18 * 2**20)).decode()  # over the 16 MiB body limit
    _error(httpx.post(live.url + SPEECH, json={"input": TEXT, "ref_audio": huge}, timeout=60), 413, None,
           "request_too_large")

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b" " * 2**20

    r = httpx.post(live.url + SPEECH, content=chunks(), headers={"content-type": "application/json"}, timeout=60)
    _error(r, 413, None, "request_too_large")


def test_api_key_is_required_when_set():
    with LiveServer(shared_runtime(), api_key="sesame") as server:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic sesame"}):
            r = httpx.get(server.url + "/v1/models", headers=headers)
            _error(r, 401, None, "invalid_api_key")
            assert r.headers["www-authenticate"] == "Bearer"
        ok = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer sesame"})
        assert ok.status_code == 200 and CARD in [m["id"] for m in ok.json()["data"]]
        assert httpx.get(server.url + "/health").status_code == 200  # probes need no key


def test_draining_server_answers_503(live):
    live.state.draining = True
    try:
        _error(httpx.post(live.url + SPEECH, json={"input": TEXT}, timeout=30), 503, None, "shutting_down")
        assert httpx.get(live.url + "/health").status_code == 503
    finally:
        live.state.draining = False
    assert httpx.get(live.url + "/health").json()["status"] == "ok"


def test_overload_is_429_with_retry_after():
    card = load_card(CARD)
    ar = card.loops.ar_decode.model_copy(update={"max_running": 1, "max_waiting": 1})
    small = card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})})
    rt = Runtime.from_card(small)
    body = {"input": TEXT, "max_frames": 600, "min_frames": 600, "response_format": "pcm"}
    try:
        with LiveServer(rt) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            with client.stream("POST", SPEECH, json=body) as running:
                pieces = running.iter_bytes()  # kept: dropping the iterator would close the stream
                next(pieces)  # admitted: audio is flowing
                with client.stream("POST", SPEECH, json=body) as waiting:
                    assert waiting.status_code == 200  # queued behind the running one
                    r = httpx.post(server.url + SPEECH, json=body, timeout=30)
                    _error(r, 429, None, "overloaded")
                    assert r.headers["retry-after"] == "1"
        wait_idle(rt)  # both streams were closed early: their requests were cancelled
    finally:
        rt.close()


def test_bad_requests_leave_the_server_up_and_a_bystander_intact(live):
    rt = shared_runtime()
    want = s16(in_process(rt, text=TEXT, seed=9, max_frames=40).audio)
    got: list[bytes] = []

    def bystander() -> None:
        body = {"input": TEXT, "seed": 9, "max_frames": 40, "response_format": "wav", "stream_format": "audio"}
        with httpx.stream("POST", live.url + SPEECH, json=body, timeout=60) as r:
            got.append(b"".join(r.iter_bytes()))

    t = threading.Thread(target=bystander)
    t.start()
    for body, _ in BAD_FIELDS[:6]:
        assert httpx.post(live.url + SPEECH, json=body, timeout=30).status_code == 400
    httpx.post(live.url + SPEECH, content=b"{{{", headers={"content-type": "application/json"})
    httpx.post(live.url + SPEECH, content=b"input=x", headers={"content-type": "application/x-www-form-urlencoded"})
    httpx.post(live.url + SPEECH, json={"input": TEXT, "ref_audio": "A" * (17 * 2**20)}, timeout=60)
    t.join(60)
    assert got and np.array_equal(np.frombuffer(got[0][44:], "<i2").reshape(-1, 2), want)
    assert httpx.get(live.url + "/health").json()["status"] == "ok"
    wait_idle(rt)


def test_a_request_aborted_mid_stream_is_never_passed_off_as_complete(monkeypatch):
    rt = Runtime.from_card(CARD)
    slow_frames(rt.family.ar_loop, monkeypatch, 0.01)  # 600 frames take >= 6 s: all three still run at the close
    long = {"input": TEXT, "max_frames": 600, "min_frames": 600}
    outcome: dict[str, object] = {}
    try:
        with LiveServer(rt) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            with client.stream("POST", SPEECH, json={**long, "response_format": "wav", "stream_format": "sse"}) as sse, \
                    client.stream("POST", SPEECH, json={**long, "response_format": "pcm"}) as raw:
                lines, pieces = sse.iter_lines(), raw.iter_bytes()
                assert next(lines) and next(pieces)  # both are streaming
                whole = threading.Thread(target=lambda: outcome.update(
                    whole=httpx.post(server.url + SPEECH, json={**long, "response_format": "wav", "stream": False},
                                     timeout=60)))
                whole.start()
                deadline = time.time() + 120  # a hang check
                while rt.stats()["running"] < 3:  # the whole-file request too is under way
                    assert time.time() < deadline, rt.stats()
                    time.sleep(0.01)
                rt.close(drain=False)  # every request in flight ends with "abort"
                events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
                with pytest.raises(httpx.RemoteProtocolError):  # cut without the closing chunk
                    for _ in pieces:
                        pass
                whole.join(120)
        assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "abort"
        assert "speech.audio.done" not in [e["type"] for e in events]
        _error(outcome["whole"], 503, None, "abort")
    finally:
        rt.close()
