"""`/v1/audio/speech/stream` under a hostile client, with a real `websockets` client against a real uvicorn
server, for what the protocol's framing refuses before a session sees it: a text frame that is not UTF-8 is
closed with 1007 (the WebSocket's own answer) and logged in one line, never with a traceback; the server
takes the next session as before and the runtime ends idle."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from serverkit import CARD, LiveServer, shared_runtime, wait_idle
from v2.server import ServerConfig
from wskit import recv_json, server_log, until, ws_url


@pytest.fixture(scope="module")
def url():
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD)) as server:
        yield ws_url(server)


@pytest.mark.parametrize("frame", [b"\xff", b'{"type": "input.text", "text": "\xc3("}', b"\xed\xa0\x80"])
@pytest.mark.parametrize("configured", [False, True])
def test_a_text_frame_that_is_not_utf8_is_closed_1007_in_one_log_line(url, frame, configured):
    async def go() -> tuple[int | None, list[dict]]:
        async with connect(url) as ws:
            if configured:
                await ws.send(json.dumps({"type": "session.config", "max_new_tokens": 4}))
                assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(frame, text=True)  # the bytes as they are, in a text frame
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            code = ws.close_code
        async with connect(url) as ws:  # the server goes on
            await ws.send(json.dumps({"type": "session.config", "max_new_tokens": 4}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
            await ws.send(json.dumps({"type": "input.done"}))
            events, _ = await until(ws, "session.done")
        return code, events

    with server_log() as log:
        code, events = asyncio.run(go())
    assert code == 1007
    assert [e for e in events if e["type"] == "error"] == [] and events[-1]["type"] == "session.done"
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(shared_runtime())


def test_an_utterance_over_the_input_cap_names_the_option_and_keeps_what_it_took():
    """The per-utterance cap is the server's `--max-input-chars`: a piece that would pass it is refused naming
    `text` and the option, and the utterance goes on with the text it already took."""
    from dataclasses import replace

    async def go(url: str) -> tuple[list[dict], list[dict]]:
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "session.config", "max_new_tokens": 4}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": "Hello there. "}))
            await ws.send(json.dumps({"type": "input.text", "text": "And more words."}))
            refused = await recv_json(ws)
            while refused["type"] != "error":
                refused = await recv_json(ws)
            await ws.send(json.dumps({"type": "input.done"}))
            events, _ = await until(ws, "session.done")
        return [refused], events

    config = replace(ServerConfig.for_card(CARD), max_input_chars=20)
    with LiveServer(shared_runtime(), config) as server:
        (refused,), events = asyncio.run(go(ws_url(server)))
    error = refused
    assert error["param"] == "text" and error["code"] == "string_above_max_length", refused
    assert "28 characters" in error["message"] and "limit of 20 (--max-input-chars)" in error["message"], refused
    assert [e for e in events if e["type"] == "error"] == [] and events[-1]["type"] == "session.done"
    wait_idle(shared_runtime())
