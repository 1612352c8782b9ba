"""Barge-in on `/v1/audio/speech/stream` with a real websocket client, on both tiny cards: `input.cancel`
mid-utterance ends it at once (its open sentence's `audio.done` and its `session.done`, both `"cancelled":
true`, then the acknowledgement `input.cancelled`), no binary frame of it comes after those, its request is
freed, and the same session speaks the next utterance with the same config exactly as the runtime does;
cancelling before any text, twice, between utterances or before a config is harmless."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterator

import numpy as np
import pytest
import soxr
from websockets.asyncio.client import connect

from holds import slow_frames
from serverkit import LiveServer, shared_runtime, wait_idle
from v2.server import ServerConfig
from v2.server.audio import to_s16
from wskit import recv_json, until, ws_url

LONG = "The quiet river runs past old stone houses while children play. A second sentence follows it, and goes on."
NEXT = "One more time."


class Family:
    def __init__(self, rt: Any, url: str, config: dict, request: dict) -> None:
        self.rt, self.url, self.config, self.request = rt, url, config, request

    def reference(self, text: str, frames: int, least: int = 1) -> Any:
        h = self.rt.open({**self.request, "max_frames": frames, "min_frames": least})
        h.feed(text)
        h.end_text()
        return h.result(120)

    def pcm(self, result: Any) -> bytes:
        """What the stream's pcm (24 kHz mono s16) carries for `result`."""
        mono = result.audio.mean(axis=0)
        if result.sample_rate != 24000:
            mono = soxr.resample(mono, result.sample_rate, 24000, "HQ")
        return to_s16(mono).astype("<i2").tobytes()


@pytest.fixture(scope="module", params=["moss_tts_local_tiny", "qwen3_tts_tiny"])
def family(request) -> Iterator[Family]:
    from v2.runtime import Runtime

    card = request.param
    rt = shared_runtime() if card == "moss_tts_local_tiny" else Runtime.from_card(card)
    voice = {"voice": "Vivian"} if card == "qwen3_tts_tiny" else {}
    try:
        with LiveServer(rt, ServerConfig.for_card(card)) as server:
            yield Family(rt, ws_url(server), {"type": "session.config", "seed": 7, "response_format": "pcm",
                                              "stream_audio": True, **voice},
                         {"seed": 7, **({"speaker": "vivian"} if voice else {})})
    finally:
        if rt is not shared_runtime():
            rt.close()


async def speak(ws: Any, text: str) -> tuple[list[dict], bytes]:
    await ws.send(json.dumps({"type": "input.text", "text": text}))
    await ws.send(json.dumps({"type": "input.done"}))
    events, frames = await until(ws, "session.done")
    return events, b"".join(frames)


@pytest.mark.parametrize("after_done", [False, True])
def test_cancel_mid_utterance_acknowledges_sends_nothing_more_frees_and_the_session_goes_on(family, after_done,
                                                                                            monkeypatch):
    """Cancelled while its text is still being written (`after_done` False: the first sentence is spoken,
    the rest not ended) or while it is spoken after input.done (its frames take >= 10 ms each: 120 a sentence
    outlast the cancel's way to the server however fast the host is)."""
    slow_frames(family.rt.engine.graph.paged_loop, monkeypatch, 0.01)
    async def go() -> tuple[list[Any], list[Any], bytes, list[dict]]:
        async with connect(family.url) as ws:
            await ws.send(json.dumps({**family.config, "max_new_tokens": 120, "min_new_tokens": 120}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": LONG}))
            if after_done:
                await ws.send(json.dumps({"type": "input.done"}))
            before: list[Any] = []
            while not any(isinstance(m, bytes) for m in before):  # audio of it is arriving
                msg = await asyncio.wait_for(ws.recv(), 60)
                before.append(msg if isinstance(msg, bytes) else json.loads(msg))
            await ws.send(json.dumps({"type": "input.cancel"}))
            after: list[Any] = []
            while not (after and isinstance(after[-1], dict) and after[-1]["type"] == "input.cancelled"):
                msg = await asyncio.wait_for(ws.recv(), 60)
                after.append(msg if isinstance(msg, bytes) else json.loads(msg))
            with pytest.raises(asyncio.TimeoutError):  # nothing of it after the acknowledgement
                await asyncio.wait_for(ws.recv(), 1.0)
            idle = family.rt.card.runtime.input_idle_timeout_s  # freed at once, not at the idle timeout
            held = wait_idle(family.rt, timeout=idle / 2)  # its request freed though the session is open
            assert held["kv_blocks_held"] == held["encode_slots_in_use"] == 0, held
            events, pcm = await speak(ws, NEXT)  # the same session and config
            return before, after, pcm, events

    before, after, pcm, events = asyncio.run(go())
    closing = [i for i, m in enumerate(after) if isinstance(m, dict) and m.get("cancelled") is True]
    assert closing, after
    assert not any(isinstance(m, bytes) for m in after[closing[0]:]), after  # no audio after the cancel's events
    tail = [m for m in after[closing[0]:]]
    assert [m["type"] for m in tail][-2:] == ["session.done", "input.cancelled"], tail
    assert tail[-1] == {"type": "input.cancelled", "utterance_index": 0, "cancelled": True}
    assert tail[-2]["utterance_index"] == 0 and tail[-2]["cancelled"] is True
    if tail[0]["type"] == "audio.done":  # the sentence open: its bytes counted up to the cancel
        sent = sum(len(m) for m in [*before, *after] if isinstance(m, bytes))
        assert tail[0]["cancelled"] is True and 0 < tail[0]["total_bytes"] <= sent
    # the next utterance: a new one (index 1), the runtime's own audio
    assert events[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    assert pcm == family.pcm(family.reference(NEXT, 120, 120))
    wait_idle(family.rt)


def test_cancel_with_nothing_under_way_is_harmless(family):
    async def go() -> list[Any]:
        out: list[Any] = []
        async with connect(family.url) as ws:
            await ws.send(json.dumps({"type": "input.cancel"}))  # before any config
            out.append(await recv_json(ws))
            await ws.send(json.dumps({**family.config, "max_new_tokens": 8}))
            assert (await recv_json(ws))["type"] == "session.ready"
            for _ in range(2):  # before any text, twice
                await ws.send(json.dumps({"type": "input.cancel"}))
                out.append(await recv_json(ws))
            out.append(await speak(ws, NEXT))
            await ws.send(json.dumps({"type": "input.cancel"}))  # between utterances
            out.append(await recv_json(ws))
            out.append(await speak(ws, NEXT))
        return out

    out = asyncio.run(go())
    nothing = {"type": "input.cancelled", "utterance_index": None, "cancelled": False}
    assert out[0] == out[1] == out[2] == out[4] == nothing, out
    want = family.pcm(family.reference(NEXT, 8))
    for i, (events, pcm) in ((0, out[3]), (1, out[5])):
        assert events[-1] == {"type": "session.done", "utterance_index": i, "total_sentences": 1}, events
        assert pcm == want
    wait_idle(family.rt)


def test_cancel_drops_held_text_and_the_next_utterance_speaks_its_own(family):
    """split_granularity none: pieces held until input.done; a cancel drops them (nothing was spoken: no
    audio.done, session.done with no sentence)."""
    async def go() -> tuple[list[dict], tuple[list[dict], bytes]]:
        async with connect(family.url) as ws:
            await ws.send(json.dumps({**family.config, "split_granularity": "none", "max_new_tokens": 8}))
            assert (await recv_json(ws))["incremental"] is False
            await ws.send(json.dumps({"type": "input.text", "text": "Something never said. "}))
            await ws.send(json.dumps({"type": "input.cancel"}))
            acks, _ = await until(ws, "input.cancelled")
            return acks, await speak(ws, NEXT)

    acks, (events, pcm) = asyncio.run(go())
    assert acks == [{"type": "session.done", "utterance_index": 0, "total_sentences": 0, "cancelled": True},
                    {"type": "input.cancelled", "utterance_index": 0, "cancelled": True}], acks
    assert events[-1]["utterance_index"] == 1 and pcm == family.pcm(family.reference(NEXT, 8))
    wait_idle(family.rt)


def test_a_cancel_racing_the_end_of_an_utterance_closes_it_once(family):
    """input.cancel right behind input.done, over and over: each utterance gets exactly one session.done
    before the acknowledgement, cancelled exactly when the acknowledgement says it cancelled it, and no
    binary frame after either."""
    async def go() -> list[tuple[list[Any], dict]]:
        out = []
        async with connect(family.url) as ws:
            await ws.send(json.dumps({**family.config, "max_new_tokens": 3, "min_new_tokens": 1}))
            assert (await recv_json(ws))["type"] == "session.ready"
            for _ in range(12):
                for msg in ({"type": "input.text", "text": "Quick."}, {"type": "input.done"}, {"type": "input.cancel"}):
                    await ws.send(json.dumps(msg))
                seen: list[Any] = []
                while not (seen and isinstance(seen[-1], dict) and seen[-1]["type"] == "input.cancelled"):
                    msg = await asyncio.wait_for(ws.recv(), 60)
                    seen.append(msg if isinstance(msg, bytes) else json.loads(msg))
                out.append((seen, seen[-1]))
        return out

    for i, (seen, ack) in enumerate(asyncio.run(go())):
        done = [m for m in seen if isinstance(m, dict) and m["type"] == "session.done"]
        assert len(done) == 1 and done[0]["utterance_index"] == i, seen
        assert ack["cancelled"] is done[0].get("cancelled", False), seen
        assert ack["utterance_index"] == (i if ack["cancelled"] else None), seen
        after = seen[seen.index(done[0]):]
        assert not any(isinstance(m, bytes) for m in after), seen
    wait_idle(family.rt)
