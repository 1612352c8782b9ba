"""Barge-in timing for `python -m v2.bench.opentext`: `input.cancel` over the speech stream, at a concurrency.

Owns: `cancel_sweep(rt, concurrency, ...)`: the server over `rt` on a loopback port, `concurrency` WebSocket
sessions at once, each speaking a seeded reply (streamed pcm, min = max = `frames` frames; no min where the
family takes none, `floor` False) and
cancelling it once `after_chunks` binary frames of it have arrived; per session the time from sending
`input.cancel` to its acknowledgement (`input.cancelled`) and to the last binary frame of the utterance that
arrived after it (0 when none did), the frames and bytes that did, and whether anything of it came after
the acknowledgement (it must not); p50 / p99 over the sessions; and the time from the last session's
`input.cancel` to the runtime holding nothing (no request, no KV or codec slot: `rt.stats()`).
Must not know: the engine's internals, the session's code (it is a client of the protocol).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np


async def _session(url: str, text: str, seed: int, frames: int, floor: bool, after_chunks: int,
                   cancels: list[float]) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        budget = {"max_new_tokens": frames, **({"min_new_tokens": frames} if floor else {})}
        await ws.send(json.dumps({"type": "session.config", "seed": seed, **budget, "response_format": "pcm",
                                  "stream_audio": True}))
        assert json.loads(await ws.recv())["type"] == "session.ready"
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        chunks = 0
        while chunks < after_chunks:
            msg = await asyncio.wait_for(ws.recv(), 600)
            chunks += isinstance(msg, bytes)
        start = time.perf_counter()
        await ws.send(json.dumps({"type": "input.cancel"}))
        cancels.append(start)
        last, late_frames, late_bytes = None, 0, 0
        while True:
            msg = await asyncio.wait_for(ws.recv(), 600)
            if isinstance(msg, bytes):
                last, late_frames, late_bytes = time.perf_counter(), late_frames + 1, late_bytes + len(msg)
            elif json.loads(msg)["type"] == "input.cancelled":
                ack = time.perf_counter()
                break
        try:  # nothing of it after the acknowledgement
            stray = await asyncio.wait_for(ws.recv(), 0.2)
        except asyncio.TimeoutError:
            stray = None
        return {"ack_s": ack - start, "last_byte_s": 0.0 if last is None else last - start,
                "frames_after_cancel": late_frames, "bytes_after_cancel": late_bytes, "after_ack": stray is not None}


def cancel_sweep(rt: Any, concurrency: int, texts: list[str], *, seed: int, frames: int, floor: bool = True,
                 after_chunks: int = 2) -> dict[str, Any]:
    """`concurrency` sessions cancelled mid-utterance at once (`texts[i]` spoken by session i)."""
    from v2.server import ServerConfig, create_app
    from v2.server.serve import ThreadedServer

    app = create_app(rt, ServerConfig.for_card(rt.card.name))
    with ThreadedServer(app) as server:
        url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"

        cancels: list[float] = []

        async def freed() -> float:
            """Seconds from the last input.cancel to the runtime holding nothing."""
            while True:
                s = rt.stats()
                idle = s["running"] == s["waiting"] == s["kv_slots_in_use"] == s["codec_slots_in_use"] == 0
                if len(cancels) == concurrency and idle:
                    return time.perf_counter() - max(cancels)
                await asyncio.sleep(0.001)

        async def run() -> tuple[list[dict[str, Any]], float]:
            watch = asyncio.create_task(freed())
            rows = await asyncio.gather(*(_session(url, texts[i % len(texts)], seed + i, frames, floor, after_chunks,
                                                   cancels) for i in range(concurrency)))
            return list(rows), await watch

        rows, freed_s = asyncio.run(run())
    out: dict[str, Any] = {"sessions": len(rows), "cancelled_after_chunks": after_chunks,
                           "frames_after_cancel_max": max(r["frames_after_cancel"] for r in rows),
                           "anything_after_ack": any(r["after_ack"] for r in rows), "cancel_to_freed_s": freed_s}
    for key in ("ack_s", "last_byte_s"):
        xs = [r[key] for r in rows]
        out[f"cancel_to_{key[:-2]}_p50_s"] = float(np.percentile(xs, 50))
        out[f"cancel_to_{key[:-2]}_p99_s"] = float(np.percentile(xs, 99))
    return out
