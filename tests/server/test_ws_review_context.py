"""A conversation over `/v1/audio/speech/stream` (`csm_tiny`, whose prompt is capped at 64 rows here) that the
client grows with `context.append`, with a real `websockets` client: once the turns pass the family's cap,
each further turn is still taken (the oldest dropped, as when an utterance opens), never refused for what
the conversation holds; a turn the family refuses alone is refused naming `context`; the session speaks on
(from a config that starts the conversation again)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect

from serverkit import wait_idle
from v2.server import ServerConfig, create_app
from v2.server.serve import ThreadedServer
from wskit import recv_json, server_log, until, ws_url

TURN = "Yes."


@pytest.fixture(scope="module")
def live() -> Any:
    from v2.card import load_card
    from v2.runtime import Runtime

    card = load_card("csm_tiny")
    data = card.model_dump(by_alias=True)
    data["loops"]["backbone"] = card.loops.backbone.model_copy(update={"max_prompt_rows": 64}).model_dump(
        by_alias=True)
    rt = Runtime.from_card(type(card).model_validate(data), device="cpu")
    try:
        with ThreadedServer(create_app(rt, ServerConfig.for_card("csm_tiny"))) as server:
            yield rt, ws_url(server)
    finally:
        rt.close()


def test_appended_turns_past_the_familys_cap_drop_the_oldest_and_are_never_refused(live):
    rt, url = live

    async def go() -> tuple[list[dict], dict, list[dict]]:
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "session.config", "voice": "0", "max_new_tokens": 4}))
            assert (await recv_json(ws))["type"] == "session.ready"
            answers = []
            for i in range(8):
                await ws.send(json.dumps({"type": "context.append", "speaker": i % 2, "text": f"{i}. {TURN}"}))
                answers.append(await recv_json(ws))
            await ws.send(json.dumps({"type": "context.append", "speaker": 1, "text": TURN * 20}))  # too long alone
            alone = await recv_json(ws)
            await ws.send(json.dumps({"type": "session.config", "voice": "0", "max_new_tokens": 4, "context": []}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": "And now I answer."}))
            await ws.send(json.dumps({"type": "input.done"}))
            events, _ = await until(ws, "session.done")
            return answers, alone, events

    with server_log() as log:
        answers, alone, events = asyncio.run(go())
    assert all(a["type"] == "context.appended" for a in answers), answers
    held = [a["context_turns"] for a in answers]
    assert held[:2] == [1, 2] and max(held) < 8 and held[-1] >= 1, held  # the oldest dropped, the newest kept
    assert alone["type"] == "error" and alone["param"] == "context", alone
    assert [e for e in events if e["type"] == "error"] == [] and events[-1]["type"] == "session.done", events
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(rt)
