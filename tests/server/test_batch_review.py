"""`POST /v1/audio/speech/batch` under a careless or hostile client, through httpx and raw sockets against a
real uvicorn server: what the client sends that comes back in the answer (an item's `id`, a field's name) may
hold a lone surrogate (JSON's `\\ud800` escape) and is refused naming its field, never a 500; a client that
leaves mid-batch leaves no record with a traceback in the server's log and nothing held."""

from __future__ import annotations

import gc
import socket
import time

import httpx
import pytest

from serverkit import CARD, TEXT, LiveServer, shared_runtime, wait_idle
from v2.server import ServerConfig
from wskit import server_log

BATCH = "/v1/audio/speech/batch"


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, max_batch_items=16)) as server:
        yield server


def _post(live, raw: str) -> httpx.Response:
    return httpx.post(live.url + BATCH, content=raw.encode(), headers={"content-type": "application/json"},
                      timeout=120)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "a\\udc00b"])
def test_an_id_with_a_lone_surrogate_is_that_items_error_and_the_others_run(live, escape):
    with server_log() as log:
        r = _post(live, '{"max_frames": 4, "items": [{"input": "%s", "id": "%s"}, {"input": "%s", "id": "ok"}]}'
                  % (TEXT, escape, TEXT))
    assert r.status_code == 200, r.text
    bad, good = r.json()["results"]
    assert bad["status"] == "error" and bad["error"]["param"] == "id" and bad["id"] is None, bad
    assert bad["error"]["message"].startswith("id:")
    assert good["status"] == "success" and good["id"] == "ok"
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(shared_runtime())


def test_an_unknown_field_whose_name_has_a_lone_surrogate_is_refused_naming_it_escaped(live):
    with server_log() as log:
        r = _post(live, '{"items": [{"input": "%s"}], "x\\ud800": 1}' % TEXT)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "x\\ud800"  # its escape, as JSON wrote it
    assert not log.tracebacks(), log.tracebacks()


def test_a_client_that_leaves_mid_batch_leaves_no_traceback_and_nothing_held(live):
    body = ('{"max_frames": 600, "min_frames": 600, "response_format": "pcm", "items": [%s]}'
            % ", ".join('{"input": "%s", "seed": %d}' % (TEXT, i) for i in range(6))).encode()
    host, port = live.url.removeprefix("http://").rsplit(":", 1)
    with server_log() as log:
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % (BATCH.encode(), host.encode(), len(body)) + body)
            deadline = time.time() + 30
            while shared_runtime().stats()["running"] < 6:  # every item is under way
                assert time.time() < deadline, shared_runtime().stats()
                time.sleep(0.01)
        wait_idle(shared_runtime(), timeout=20)
        time.sleep(0.5)  # the batch's tasks have ended and been collected
        gc.collect()  # an exception never retrieved is logged when its future is collected
    assert not log.tracebacks(), log.tracebacks()


@pytest.mark.parametrize("path", [BATCH, "/v1/audio/speech"])
def test_a_client_that_leaves_before_its_body_has_come_is_one_line_not_a_traceback(live, path):
    host, port = live.url.removeprefix("http://").rsplit(":", 1)
    with server_log() as log:
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                      b'{"input": ' % (path.encode(), host.encode()))
            time.sleep(0.3)  # the route is reading the body
        time.sleep(0.5)  # the route has seen the client go
    assert not log.tracebacks(), log.tracebacks()
    assert httpx.post(live.url + BATCH, json={"items": [{"input": TEXT, "max_frames": 4}]}).status_code == 200


@pytest.mark.parametrize("path", [BATCH, "/v1/audio/speech"])
@pytest.mark.parametrize("value", ["[" * 20 + "]" * 20, "[%s]" % ",".join(["1"] * 2000)])
def test_a_body_refused_before_parsing_names_a_key_with_a_lone_surrogate_escaped(live, path, value):
    """Nested too deep or too many members under a key whose name holds a lone surrogate: a 400 naming it."""
    with server_log() as log:
        r = _post_to(live, path, '{"input": "%s", "x\\ud800": %s}' % (TEXT, value))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "x\\ud800" and r.json()["error"]["code"] == "too_complex"
    assert not log.tracebacks(), log.tracebacks()


def _post_to(live, path: str, raw: str) -> httpx.Response:
    return httpx.post(live.url + path, content=raw.encode(), headers={"content-type": "application/json"},
                      timeout=120)
