"""`python -m v2.bench.soak`: many requests with random lengths, random cancels and slow subscribers.

Owns: the soak load (a seeded mix: streaming and not, lengths 1-60 frames, a fifth cancelled at a random
moment, a tenth read by a subscriber that sleeps on every chunk), the checks after it (every request ended
once, no slot held, no queue left, engine alive), and RSS at start, middle and end; one JSON line last.
Must not know: engine internals beyond `submit`, handles and `stats()`.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import threading
import time
from collections import Counter
from typing import Any

from v2.card import DEFAULT_CARD
from v2.runtime import Runtime


def rss_mb() -> float:
    """Resident set size now (Linux /proc), in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def run(runtime: Runtime, n: int, *, seed: int = 0, concurrency: int = 32) -> dict[str, Any]:
    rng = random.Random(seed)
    cond = threading.Condition()
    in_flight = 0
    reasons: Counter[str] = Counter()
    ends: Counter[int] = Counter()
    rss = {"start": rss_mb()}
    start = time.perf_counter()

    def done(rid: int, result: Any) -> None:
        nonlocal in_flight
        with cond:
            reasons[result.finish_reason] += 1
            ends[rid] += 1
            in_flight -= 1
            cond.notify_all()

    for i in range(n):
        with cond:
            cond.wait_for(lambda: in_flight < concurrency)
            in_flight += 1
        stream = rng.random() < 0.5
        frames = rng.randint(1, 60)
        handle = runtime.submit({"text": f"soak request {i} " * rng.randint(1, 8), "seed": i, "stream": stream,
                                 "max_frames": frames, "min_frames": rng.randint(0, frames)})
        if stream and rng.random() < 0.1:
            handle.subscribe(lambda chunk: time.sleep(0.02))  # a slow reader
        if rng.random() < 0.2:
            delay = rng.random() * 0.2
            threading.Timer(delay, handle.cancel).start()
        handle.on_done(lambda r, rid=handle.request_id: done(rid, r))
        if i == n // 2:
            rss["middle"] = rss_mb()
    with cond:
        cond.wait_for(lambda: in_flight == 0, timeout=600)
    wall = time.perf_counter() - start
    time.sleep(0.05)  # let the engine finish its last step's bookkeeping
    stats = runtime.stats()
    rss["end"] = rss_mb()
    return {"requests": n, "ended": sum(ends.values()), "ended_twice": sum(1 for c in ends.values() if c > 1),
            "finish_reasons": dict(reasons), "errors": reasons.get("error", 0), "wall_s": wall,
            "leaked_kv_slots": stats["kv_slots_in_use"], "leaked_codec_slots": stats["codec_slots_in_use"],
            "leaked_kv_blocks": stats["kv_blocks_held"],
            "left_waiting": stats["waiting"], "left_running": stats["running"],
            "engine_alive": runtime.engine.thread.is_alive(), "rss_mb": rss,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.soak", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1000, help="requests in all (default: %(default)s)")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (default: %(default)s)")
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to load, a name or a path (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    args = p.parse_args(argv)
    with Runtime.from_card(args.card, device=args.device) as runtime:
        report = run(runtime, args.requests, concurrency=args.concurrency)
    print(f"{report['ended']}/{report['requests']} ended, reasons {report['finish_reasons']}, "
          f"leaked slots {report['leaked_kv_slots']}+{report['leaked_codec_slots']}, "
          f"RSS start/middle/end {report['rss_mb']['start']:.0f}/{report['rss_mb'].get('middle', 0):.0f}/"
          f"{report['rss_mb']['end']:.0f} MiB, {report['wall_s']:.1f} s", file=sys.stderr)
    print(json.dumps({"bench": "v2.soak", **report}))
    ok = report["ended"] == report["requests"] and not report["ended_twice"] and not report["errors"] \
        and not (report["leaked_kv_slots"] or report["leaked_codec_slots"] or report["leaked_kv_blocks"]
                 or report["left_waiting"]) \
        and report["engine_alive"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
