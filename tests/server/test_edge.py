"""The HTTP edge against a real server: cross-origin state changes refused (`--allow-origin` to allow),
every response of 400 or more counted, a 500 answered on a connection that stays open, 405 naming every
method the path takes, HEAD wherever GET, and `serve` on a busy port as one `error:` line."""

from __future__ import annotations

import http.client
import io
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from serverkit import CARD, TEXT, LiveServer, shared_runtime
from v2.server import ServerConfig

ROOT = Path(__file__).resolve().parents[2]
SPEECH, VOICES = "/v1/audio/speech", "/v1/audio/voices"
SMALL = {"input": TEXT, "max_frames": 4, "response_format": "wav"}


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def _wav() -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.random.default_rng(0).uniform(-0.3, 0.3, (24000, 2)), 48000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _host(url: str) -> str:
    return url.split("://", 1)[1]


# --- Origin ---

def test_a_page_elsewhere_cannot_store_delete_or_speak(live):
    """A form POST from another site needs no preflight: the browser sends it with its Origin."""
    evil = {"Origin": "http://evil.example"}
    name = "planted-by-a-page"
    try:
        r = httpx.post(live.url + VOICES, files={"audio_sample": ("v.wav", _wav(), "audio/wav")},
                       data={"name": name}, headers=evil, timeout=60)
        assert r.status_code == 403 and r.json()["error"]["code"] == "cross_origin", r.text
        assert name not in [v["id"] for v in httpx.get(live.url + VOICES).json()["voices"]]
        for method, path, kwargs in (("DELETE", f"{VOICES}/alloy", {}), ("DELETE", f"{VOICES}?name=x", {}),
                                     ("POST", SPEECH, {"json": SMALL})):
            r = httpx.request(method, live.url + path, headers=evil, timeout=60, **kwargs)
            assert r.status_code == 403, (method, path, r.text)
        r = httpx.post(live.url + SPEECH, json=SMALL, headers={"Origin": "null"}, timeout=60)  # sandboxed frames
        assert r.status_code == 403
        assert httpx.get(live.url + "/v1/models", headers=evil).status_code == 200  # reading is not refused
    finally:
        if name in [v["id"] for v in httpx.get(live.url + VOICES).json()["voices"]]:
            httpx.delete(f"{live.url}{VOICES}/{name}")


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


ORIGINS = {  # what a browser may send as Origin, for a server at `url` -> allowed by default?
    "same": (lambda url: url, True),
    "same, upper case": (lambda url: url.upper(), True),
    "same host, https (a TLS proxy that keeps Host)": (lambda url: "https://" + _host(url), True),
    "other port": (lambda url: f"http://127.0.0.1:{_port(url) + 1}", False),
    "other name for the host": (lambda url: f"http://localhost:{_port(url)}", False),
    "listed": (lambda url: "https://app.example", False),
    "listed, with a slash": (lambda url: "https://app.example/", False),
    "a longer name": (lambda url: "https://app.example.evil", False),
    "null (a sandboxed frame)": (lambda url: "null", False),
    "none (not a browser)": (lambda url: None, True),
}


@pytest.fixture(scope="module")
def listing():
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, allowed_origins=["https://APP.example/"])) as s:
        yield s


@pytest.mark.parametrize("kind", sorted(ORIGINS))
def test_same_origin_listed_origins_and_clients_without_origin_may_post(live, listing, kind):
    origin_for, allowed = ORIGINS[kind]
    for server, ok in ((live, allowed), (listing, allowed or kind.startswith("listed"))):
        origin = origin_for(server.url)
        r = httpx.post(server.url + SPEECH, json={"input": ""}, headers={"Origin": origin} if origin else {},
                       timeout=60)
        assert r.status_code == (400 if ok else 403), (kind, origin, r.text)  # 400: it reached the route


def test_any_origin_with_a_star():
    with LiveServer(shared_runtime(), allowed_origins=["*"]) as server:
        r = httpx.post(server.url + SPEECH, json={"input": ""}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"


# --- counting and 500s ---

def _refused(url: str) -> Counter:
    text = httpx.get(url + "/metrics").text
    return Counter({s.labels["status"]: s.value for f in text_string_to_metric_families(text)
                    for s in f.samples if s.name == "v2_requests_refused_total"})


@pytest.fixture(scope="module")
def failing():
    """A server whose voice store fails with an unexpected error (a disk that went away) on listing."""
    with LiveServer(shared_runtime()) as server:
        def broken() -> list:
            raise OSError(5, "Input/output error")

        server.state.voices.listing = broken
        yield server


REQUESTS = {  # what a client sends -> the status it gets
    "bad field": (lambda c: c.post(SPEECH, json={"input": TEXT, "speed": 2.0}), 400),
    "cross origin": (lambda c: c.post(SPEECH, json=SMALL, headers={"Origin": "http://evil.example"}), 403),
    "unknown model": (lambda c: c.post(SPEECH, json={"model": "nope", "input": TEXT}), 404),
    "unknown route": (lambda c: c.get("/v1/nothing"), 404),
    "wrong method": (lambda c: c.put(SPEECH), 405),
    "too large": (lambda c: c.post(SPEECH, content=b" " * (17 * 2**20), headers={"content-type": "application/json"}),
                  413),
    "not json": (lambda c: c.post(SPEECH, content=b"x", headers={"content-type": "text/plain"}), 415),
    "store fails": (lambda c: c.get(VOICES), 500),
    "fine": (lambda c: c.get("/health"), 200),
}


@given(kinds=st.lists(st.sampled_from(sorted(REQUESTS)), min_size=1, max_size=8))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_answer_of_400_or_more_is_counted_by_status(failing, kinds):
    before = _refused(failing.url)
    seen: Counter = Counter()
    with httpx.Client(base_url=failing.url, timeout=60) as client:
        for kind in kinds:
            send, status = REQUESTS[kind]
            r = send(client)
            assert r.status_code == status, (kind, r.text)
            if status >= 400:
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}
                seen[str(status)] += 1
    after = _refused(failing.url)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == dict(seen)


def test_a_500_is_answered_and_the_connection_stays_open(failing):
    conn = http.client.HTTPConnection("127.0.0.1", int(failing.url.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("GET", VOICES)
        first = conn.getresponse()
        body = first.read()
        sock = conn.sock
        assert first.status == 500 and b"internal_error" in body
        assert first.getheader("connection") != "close"
        conn.request("GET", "/health")  # the same connection: no reconnect in between
        second = conn.getresponse()
        assert second.status == 200 and second.read() and conn.sock is sock
    finally:
        conn.close()


# --- methods ---

PATHS = {"/v1/audio/speech": {"POST"}, "/v1/models": {"GET"}, "/v1/audio/voices": {"GET", "POST", "DELETE"},
         "/v1/audio/voices/alloy": {"DELETE"}, "/health": {"GET"}, "/metrics": {"GET"}, "/": {"GET"},
         "/openapi.json": {"GET"}}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_405_names_every_method_the_path_takes_and_head_works_where_get_does(live, path):
    takes = PATHS[path] | ({"HEAD"} if "GET" in PATHS[path] else set())
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        if method in takes:
            continue
        r = httpx.request(method, live.url + path, timeout=30)
        assert r.status_code == 405, (method, path, r.status_code)
        assert set(m.strip() for m in r.headers["allow"].split(",")) == takes, (method, path, r.headers["allow"])
    if "GET" in takes:
        get, head = httpx.get(live.url + path, timeout=30), httpx.head(live.url + path, timeout=30)
        assert head.status_code == get.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == get.headers["content-type"]
        if path in ("/", "/openapi.json"):  # the same bytes every time
            assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))


# --- serve ---

def test_serve_on_a_busy_port_is_one_error_line_and_a_failing_exit():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "v2", "serve", "--port", str(port), "--no-access-log"],
                              cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                              timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error:") and str(port) in lines[0], done.stderr
