"""`python -m v2.bench.batch`: one `POST /v1/audio/speech/batch` of N items against the same N requests sent
one by one to `POST /v1/audio/speech` (whole files), through a real server on 127.0.0.1; one JSON line last.

Owns: N seeded sentences, each item a fixed workload (`--frames`: min = max frames), one bad item among
them where `--bad` is set (its error must name its field; the others must still be answered); the server
(the card's runtime, an ephemeral loopback port); the wall time of the batch and of the one-by-one run over
`--rounds` alternating rounds (the medians reported), the speedup, and a check that each item's audio in the
batch is the same bytes as its one-by-one answer (same seed: the batch changes nothing but the time).
Must not know: the engine's internals (it speaks HTTP only).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from typing import Any

import httpx

from v2.bench.__main__ import machine
from v2.card import DEFAULT_CARD

WORDS = "the quiet river runs past old stone houses while children play near the bridge".split()


def sentence(i: int) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6 + i % 5)]
    return " ".join(words).capitalize() + "."


def one_by_one(url: str, items: list[dict[str, Any]], defaults: dict[str, Any]) -> tuple[float, list[bytes | None]]:
    out: list[bytes | None] = []
    started = time.perf_counter()
    with httpx.Client(timeout=600) as client:
        for item in items:
            r = client.post(url + "/v1/audio/speech", json={**defaults, **item, "stream": False})
            out.append(r.content if r.status_code == 200 else None)
    return time.perf_counter() - started, out


def batched(url: str, items: list[dict[str, Any]], defaults: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    r = httpx.post(url + "/v1/audio/speech/batch", json={**defaults, "items": items}, timeout=600)
    wall = time.perf_counter() - started
    r.raise_for_status()
    return wall, r.json()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.batch", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the card's)")
    p.add_argument("--items", type=int, default=16, help="items in the batch (default: %(default)s)")
    p.add_argument("--frames", type=int, default=24,
                   help="frames each item speaks (min = max: a fixed workload) (default: %(default)s)")
    p.add_argument("--bad", type=int, default=5,
                   help="the index of an item made bad (speed 2.0); -1: none (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="batches sent, one after another (default: %(default)s)")
    p.add_argument("--format", default="wav", help="every item's response_format (default: %(default)s)")
    args = p.parse_args(argv)

    from v2.runtime import Runtime
    from v2.server import ServerConfig, create_app
    from v2.server.serve import ThreadedServer

    rt = Runtime.from_card(args.card, device=args.device)
    device = rt.family.device
    items: list[dict[str, Any]] = [{"input": sentence(i), "seed": i} for i in range(args.items)]
    if 0 <= args.bad < args.items:
        items[args.bad]["speed"] = 2.0
    defaults = {"response_format": args.format, "max_frames": args.frames, "min_frames": args.frames}
    config = ServerConfig.for_card(rt.card.name, max_batch_items=max(args.items, 1))
    batch_s, single_s = [], []
    try:
        with ThreadedServer(create_app(rt, config)) as server:
            batched(server.url, items[:2], defaults)  # warm-up: first-call costs out of both timings
            for _ in range(args.rounds):
                wall, body = batched(server.url, items, defaults)
                batch_s.append(wall)
                wall, singles = one_by_one(server.url, items, defaults)
                single_s.append(wall)
    finally:
        rt.close()
    results = body["results"]
    same = all(r["status"] == "error" if s is None else base64.b64decode(r.get("audio_data", "")) == s
               for r, s in zip(results, singles))
    errors = {str(r["index"]): r["error"]["param"] for r in results if r["status"] == "error"}
    b, s = statistics.median(batch_s), statistics.median(single_s)
    print(json.dumps({"bench": "v2.batch", "card": args.card, "items": args.items, "frames": args.frames,
                      "format": args.format, "rounds": args.rounds, "succeeded": body["succeeded"],
                      "failed": body["failed"], "errors": errors, "same_audio_as_one_by_one": same,
                      "batch_s": round(b, 3), "one_by_one_s": round(s, 3), "speedup": round(s / b, 2),
                      "batch_runs_s": [round(x, 3) for x in batch_s],
                      "one_by_one_runs_s": [round(x, 3) for x in single_s], "machine": machine(str(device))}))
    return 0 if same and b < s else 1


if __name__ == "__main__":
    sys.exit(main())
