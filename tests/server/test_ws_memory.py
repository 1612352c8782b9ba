"""Memory over many speech-stream sessions on the tiny card: 160 sessions of every kind (spoken, cancelled,
left abruptly mid-audio, refused configs, context refused) leave no session, utterance or sentence splitter
alive once they have ended, and the process's resident memory after them is within a few MB of its level
after the first 40 (the allocator's warm-up; printed with -s)."""

from __future__ import annotations

import asyncio
import gc
import json

from websockets.asyncio.client import connect

from serverkit import LiveServer, shared_runtime, wait_idle
from v2.server import ws, ws_speak, ws_utterances
from wskit import recv_json, until, ws_url

CONFIG = {"type": "session.config", "max_new_tokens": 6, "response_format": "pcm", "stream_audio": True}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def session(url: str, i: int) -> None:
    kind = i % 4
    async with connect(url) as client:
        if kind == 3:  # refused configs, then a spoken utterance
            await client.send(json.dumps({**CONFIG, "temperature": float("nan")}, allow_nan=True))
            await recv_json(client)
        await client.send(json.dumps({**CONFIG, "seed": i}))
        await recv_json(client)
        await client.send(json.dumps({"type": "input.text", "text": f"Sentence number {i} is here. And one more"}))
        await client.send(json.dumps({"type": "input.done"}))
        if kind in (1, 2) and (await first_of(client, "audio.start", "session.done")) == "audio.start":
            if kind == 2:  # left abruptly while its audio comes
                client.transport.abort()
                return
            await client.send(json.dumps({"type": "input.cancel"}))  # cancelled mid-way
            await until(client, "input.cancelled")
            return
        await until(client, "session.done")


async def first_of(client: object, *kinds: str) -> str:
    while True:
        msg = await asyncio.wait_for(client.recv(), 60)  # type: ignore[attr-defined]
        if isinstance(msg, str) and (kind := json.loads(msg)["type"]) in kinds:
            return kind


def alive(*classes: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) in classes)


def test_many_sessions_leave_nothing_behind_and_memory_flat():
    rt = shared_runtime()
    with LiveServer(rt) as server:
        url = ws_url(server)

        async def run(first: int, n: int) -> None:
            for start in range(first, first + n, 4):  # four at a time, one of each kind
                await asyncio.gather(*(session(url, i) for i in range(start, start + 4)))

        asyncio.run(run(0, 40))
        wait_idle(rt, timeout=30)
        warm = rss_mb()
        asyncio.run(run(40, 120))
        wait_idle(rt, timeout=30)
        after = rss_mb()
        left = alive(ws.Session, ws_utterances.Speaker, ws_speak.Utterance, ws_speak.Sentences)
    print(f"RSS after 40 sessions {warm:.1f} MB, after 160 {after:.1f} MB ({after - warm:+.1f} MB)")
    assert left == 0, f"{left} session objects still alive"
    assert after - warm < 30, (warm, after)
