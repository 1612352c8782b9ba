"""The HTTP side of `python -m v2.bench.http`: closed-loop streaming clients in their own process.

Owns: reading a job (server URL, requests, concurrency) as JSON on stdin, keeping `concurrency` streaming
wav requests in flight with httpx, timing each one (sent, first audio bytes past the header, last byte),
and printing the timings and audio lengths as JSON on stdout. Runs apart from the server's process so its
Python does not compete with the server and the engine for one interpreter lock.
Must not know: the runtime, torch, the server's code.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx

WAV_HEADER = 44


async def _one(client: httpx.AsyncClient, request: dict[str, Any]) -> dict[str, Any]:
    body = {"input": request["text"], "seed": request["seed"], "max_frames": request["max_frames"],
            "response_format": "wav", "stream_format": "audio"}
    sent, first, size = time.perf_counter(), None, 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as r:
        r.raise_for_status()
        rate, channels = int(r.headers["x-sample-rate"]), int(r.headers["x-channels"])
        async for piece in r.aiter_raw():
            size += len(piece)
            if first is None and size > WAV_HEADER:
                first = time.perf_counter()
    done = time.perf_counter()
    audio_s = (size - WAV_HEADER) / (2 * channels * rate)
    return {"sent": sent, "first": first, "done": done, "audio_s": audio_s, "bytes": size}


async def run(url: str, requests: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def paced(request: dict[str, Any]) -> dict[str, Any]:
            async with gate:
                return await _one(client, request)

        start = time.perf_counter()
        traces = await asyncio.gather(*(paced(r) for r in requests))
        wall = time.perf_counter() - start
    return {"wall_s": wall, "traces": traces}


def main() -> int:
    job = json.load(sys.stdin)
    print(json.dumps(asyncio.run(run(job["url"], job["requests"], job["concurrency"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
