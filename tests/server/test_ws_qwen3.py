"""`/v1/audio/speech/stream` with one Qwen3-TTS session on the tiny card: `voice` names the checkpoint's
speaker, the text is fed as it arrives (this family's trailing text rows: one segment, so one sentence
message for the utterance), and the pcm is the runtime's own open request for the same text and seed,
sample for sample (24 kHz mono, no resampling); a second utterance on the same connection too. It takes no
conversation context: `context` and `context.append` are refused naming them."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any, Iterator

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from serverkit import LiveServer, s16, wait_idle
from v2.server import ServerConfig

TEXT = "The quiet river runs past old stone houses. A second sentence follows it!"
CONFIG = {"type": "session.config", "voice": "Vivian", "seed": 7, "max_new_tokens": 20, "response_format": "pcm"}


@pytest.fixture(scope="module")
def qlive() -> Iterator[tuple[Any, str]]:
    from v2.runtime import Runtime

    rt = Runtime.from_card("qwen3_tts_tiny")
    try:
        with LiveServer(rt, ServerConfig.for_card("qwen3_tts_tiny")) as server:
            yield rt, server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    finally:
        rt.close()


def reference(rt: Any, text: str) -> Any:
    h = rt.open({"speaker": "vivian", "seed": 7, "max_frames": 20})
    h.feed(text)
    h.end_text()
    return h.result(120)


async def utterance(ws: Any) -> tuple[list[dict], list[bytes]]:
    events, frames = [], []
    while True:
        msg = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(msg, bytes):
            frames.append(msg)
            continue
        events.append(json.loads(msg))
        if events[-1]["type"] in ("session.done", "error"):
            return events, frames


def test_a_qwen3_session_speaks_the_runtime_s_audio(qlive):
    rt, url = qlive
    ref = reference(rt, TEXT)
    other = reference(rt, "Something else.")

    async def go() -> list[tuple[list[dict], list[bytes]]]:
        out = []
        async with connect(url) as ws:
            for stream_audio, text in ((False, TEXT), (True, "Something else.")):
                await ws.send(json.dumps({**CONFIG, "stream_audio": stream_audio}))
                ready = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert ready["type"] == "session.ready" and ready["sample_rate"] == 24000, ready
                rng, pos = random.Random(5), 0
                while pos < len(text):
                    n = rng.randint(1, 8)
                    await ws.send(json.dumps({"type": "input.text", "text": text[pos:pos + n]}))
                    await asyncio.sleep(rng.choice([0.0, 0.01]))
                    pos += n
                await ws.send(json.dumps({"type": "input.done"}))
                out.append(await utterance(ws))
        return out

    (events, frames), (events2, frames2) = asyncio.run(go())
    kinds = [e["type"] for e in events]
    assert kinds == ["audio.start", "audio.done", "session.done"], events
    assert events[0]["sentence_text"] and events[-1]["total_sentences"] == 1
    assert np.array_equal(np.frombuffer(b"".join(frames), "<i2"), s16(ref.audio)[:, 0])
    assert events2[-1]["type"] == "session.done" and len(frames2) >= 1
    assert np.array_equal(np.frombuffer(b"".join(frames2), "<i2"), s16(other.audio)[:, 0])
    wait_idle(rt)


def test_a_refused_config_names_the_http_parameter(qlive):
    _, url = qlive

    async def go() -> tuple[dict, dict]:
        async with connect(url) as ws:
            await ws.send(json.dumps({**CONFIG, "temperature": -1.0}))
            refused = json.loads(await asyncio.wait_for(ws.recv(), 60))  # before any session.ready
            await ws.send(json.dumps(CONFIG))
            return refused, json.loads(await asyncio.wait_for(ws.recv(), 60))

    err, ready = asyncio.run(go())
    assert err["type"] == "error" and err["param"] == "temperature", err
    assert ready["type"] == "session.ready", ready


def test_qwen3_takes_no_context_and_says_so_naming_it(qlive):
    """Over HTTP and over the WebSocket (its config and `context.append`): refused naming `context` / `type`,
    and the session goes on."""
    _, url = qlive
    turn = {"speaker": 0, "text": "Hi."}
    r = httpx.post(url.replace("ws://", "http://").replace("/v1/audio/speech/stream", "/v1/audio/speech"),
                   json={"input": "Hello.", "context": [turn], "response_format": "pcm"}, timeout=60)
    assert r.status_code == 400 and (r.json()["error"]["param"], r.json()["error"]["code"]) == ("context", "unsupported")

    async def go() -> list[dict]:
        async with connect(url) as ws:
            await ws.send(json.dumps({**CONFIG, "context": [turn]}))
            refused = json.loads(await asyncio.wait_for(ws.recv(), 60))
            await ws.send(json.dumps(CONFIG))
            assert json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "context.append", **turn}))
            return [refused, json.loads(await asyncio.wait_for(ws.recv(), 60))]

    answers = asyncio.run(go())
    assert [(a["type"], a["param"], a["code"]) for a in answers] == [("error", "context", "unsupported"),
                                                                      ("error", "type", "unsupported")], answers
