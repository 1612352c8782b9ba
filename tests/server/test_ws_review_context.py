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


@pytest.mark.parametrize("granularity", ["none", "sentence"])
def test_an_utterance_whose_own_text_passes_the_cap_drops_the_oldest_turns(live, granularity):
    """The conversation fits the cap with the placeholder an utterance opens with; its own text then pushes the
    prompt past it (at `input.done` when held, at `input.text` when fed as written): the oldest turns are
    dropped until it fits, and it is spoken. A text that does not fit even alone is refused naming `text`."""
    rt, url = live
    said = "Then I will say a somewhat longer answer now."  # fits alone, not after the turns below

    async def go() -> tuple[list[int], list[dict], list[dict], list[dict]]:
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "session.config", "voice": "0", "max_new_tokens": 4,
                                      "split_granularity": granularity}))
            assert (await recv_json(ws))["type"] == "session.ready"
            held = []
            for i in range(4):
                await ws.send(json.dumps({"type": "context.append", "speaker": i % 2, "text": f"{i}. {TURN}"}))
                held.append((await recv_json(ws))["context_turns"])
            await ws.send(json.dumps({"type": "input.text", "text": said}))
            await ws.send(json.dumps({"type": "input.done"}))
            spoken, _ = await until(ws, "session.done")
            await ws.send(json.dumps({"type": "input.text", "text": "Next."}))
            await ws.send(json.dumps({"type": "input.done"}))
            after, _ = await until(ws, "session.done")
            await ws.send(json.dumps({"type": "input.text", "text": TURN * 20}))  # too long with no context
            await ws.send(json.dumps({"type": "input.done"}))
            alone, _ = await until(ws, "session.done")
            return held, spoken, after, alone

    with server_log() as log:
        held, spoken, after, alone = asyncio.run(go())
    assert held == [1, 2, 3, 4], held  # all four fit with a placeholder
    assert [e for e in spoken if e["type"] == "error"] == [], spoken
    assert [e["type"] for e in spoken].count("audio.start") >= 1 and not spoken[-1].get("cancelled"), spoken
    assert [e for e in after if e["type"] == "error"] == [], after
    errors = [e for e in alone if e["type"] == "error"]
    assert [e["param"] for e in errors] == ["text"], alone
    assert not log.tracebacks(), log.tracebacks()
    wait_idle(rt)
