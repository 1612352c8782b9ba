"""The API key on `/v1/audio/speech/stream` from a client that can set no header on a WebSocket (a browser):
offered as the `Sec-WebSocket-Protocol` entry `v2.bearer.<KEY as unpadded base64url>` beside `v2.speech`,
which is echoed back (never the key's entry, which the route does not see). A wrong, malformed or doubled
key entry is refused at the handshake (401), as a wrong `Authorization` header is; the header, when sent,
is the one compared."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from serverkit import LiveServer, shared_runtime, wait_idle
from wskit import recv_json, until, ws_url

KEY = "sekrit-ключ"  # not ASCII: the entry carries its UTF-8 bytes
CONFIG = {"type": "session.config", "seed": 7, "max_new_tokens": 4, "min_new_tokens": 1, "response_format": "pcm"}


def entry(key: str) -> str:
    return "v2.bearer." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


@pytest.fixture(scope="module")
def url():
    with LiveServer(shared_runtime(), api_key=KEY) as server:
        yield ws_url(server)
    wait_idle(shared_runtime())


def handshake(url: str, protocols: list[str] | None, **headers: str) -> tuple[int, str | None]:
    """The handshake's status (101: taken, and the session then speaks) and the subprotocol echoed."""
    async def go() -> tuple[int, str | None]:
        try:
            async with connect(url, subprotocols=protocols, additional_headers=headers) as ws:
                await ws.send(json.dumps(CONFIG))
                assert (await recv_json(ws))["type"] == "session.ready"
                await ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
                await ws.send(json.dumps({"type": "input.done"}))
                events, frames = await until(ws, "session.done")
                assert [e for e in events if e["type"] == "error"] == [] and frames, events
                return 101, ws.subprotocol
        except InvalidStatus as e:
            return e.response.status_code, None

    return asyncio.run(go())


def test_a_browser_offers_the_key_as_a_subprotocol_entry_and_gets_the_plain_name_back(url):
    assert handshake(url, ["v2.speech", entry(KEY)]) == (101, "v2.speech")
    assert handshake(url, [entry(KEY), "v2.speech"]) == (101, "v2.speech")


@pytest.mark.parametrize("protocols", [
    ["v2.speech"],                                        # no key
    ["v2.speech", entry("wrong")],                        # a wrong key
    ["v2.speech", entry(KEY[:-1])],                       # a prefix of it
    ["v2.speech", "v2.bearer.!!!"],                       # not base64url
    ["v2.speech", "v2.bearer."],                          # empty
    ["v2.speech", entry(KEY), entry("wrong")],            # two keys
])
def test_a_wrong_or_malformed_key_entry_is_refused_at_the_handshake(url, protocols):
    assert handshake(url, protocols) == (401, None)


def test_the_header_when_sent_is_the_key_compared(url):
    assert handshake(url, ["v2.speech", entry(KEY)], Authorization="Bearer wrong") == (401, None)


def test_a_key_entry_is_no_way_past_the_origin_rule(url):
    host = url.split("//")[1].split("/")[0]
    assert handshake(url, ["v2.speech", entry(KEY)], Origin="https://evil.example") == (403, None)
    assert handshake(url, ["v2.speech", entry(KEY)], Origin=f"http://{host}") == (101, "v2.speech")


def test_without_a_key_set_the_name_is_echoed_and_nothing_is_needed():
    with LiveServer(shared_runtime()) as server:
        assert handshake(ws_url(server), ["v2.speech"]) == (101, "v2.speech")
        assert handshake(ws_url(server), None) == (101, None)


def test_the_route_never_sees_the_key_entry():
    """The Gate takes the key's entry out of the handshake's `subprotocols` before the route runs."""
    from types import SimpleNamespace

    from v2.server.middleware import Gate
    from v2.server.state import ServerConfig

    seen: list[dict] = []

    async def app(scope, receive, send) -> None:
        seen.append(scope)

    state = SimpleNamespace(config=ServerConfig.for_card("csm_tiny", api_key=KEY), draining=False)
    scope = {"type": "websocket", "path": "/v1/audio/speech/stream", "headers": [(b"host", b"x")],
             "subprotocols": ["v2.speech", entry(KEY), "other"]}
    asyncio.run(Gate(app, state)(scope, None, None))
    assert [s["subprotocols"] for s in seen] == [["v2.speech", "other"]]
