"""End-to-end scenarios: a seeded workload through the runtime at a concurrency, and the sequential baseline.

Owns: the workload (seeded texts of mixed lengths, made requests by the card's family: `family_bench`), a
closed-loop client that keeps `concurrency`
requests in flight and timestamps every chunk on arrival, the per-scenario figures, and the baseline:
the same requests through the family's simple sequential path (its reference loop, then the codec's whole
decode), one after another, on the same weights.
Must not know: engine internals beyond `submit`, handles and `stats()`; any family (the card names it).
"""

from __future__ import annotations

import random
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.family import family_bench
from v2.bench.metrics import ChunkArrival, percentile, rtf, underruns
from v2.bench.threads import keeps_threads
from v2.runtime import Runtime

__all__ = ["family_bench", "peak_memory_mb", "run_baseline", "run_serving", "workload"]

WORDS = ("the quiet river runs past old stone houses while children laugh and a dog barks at birds over the "
         "bright morning market where people sell bread fruit flowers and warm tea to travellers").split()


def workload(n: int, *, seed: int = 0, max_frames: int, runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """n requests with seeded texts of 3 to 40 words; request i carries seed `seed + i`. With `runtime`, its
    family makes each request (every request keeps `text`, `seed` and `max_frames`)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))).capitalize() + "." for _ in range(n)]
    if runtime is None:
        return [{"text": t, "seed": seed + i, "max_frames": max_frames} for i, t in enumerate(texts)]
    make = family_bench(runtime.card).request
    return [make(runtime.family, t, seed=seed + i, max_frames=max_frames) for i, t in enumerate(texts)]


@dataclass
class _Trace:
    submitted: float
    chunks: list[ChunkArrival]
    finished: float = 0.0
    result: Any = None


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_serving(runtime: Runtime, requests: list[dict[str, Any]], *, concurrency: int, stream: bool,
                tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Keep `concurrency` requests in flight until all are done; figures for the scenario."""
    cond = threading.Condition()
    traces: list[_Trace] = []
    in_flight = 0

    def on_done(trace: _Trace, result: Any) -> None:
        nonlocal in_flight
        with cond:
            trace.finished, trace.result = time.perf_counter(), result
            in_flight -= 1
            cond.notify_all()

    kinds_before = runtime.stats()["kinds"]
    before = kinds_before["ar_frame"]
    start = time.perf_counter()
    for req in requests:
        with cond:
            cond.wait_for(lambda: in_flight < concurrency)
            in_flight += 1
        trace = _Trace(time.perf_counter(), [])
        traces.append(trace)
        handle = runtime.submit({**req, "stream": stream})
        handle.subscribe(lambda c, t=trace: t.chunks.append(ChunkArrival(time.perf_counter(), c.audio.shape[1] / c.sample_rate)))
        def done(r: Any, t: _Trace = trace) -> None:
            on_done(t, r)
            tick()

        handle.on_done(done)
    with cond:
        cond.wait_for(lambda: in_flight == 0)
    wall = time.perf_counter() - start
    kinds_after = runtime.stats()["kinds"]
    after = kinds_after["ar_frame"]
    audio = [t.result.metrics.audio_seconds for t in traces]
    ttfa = [t.chunks[0].at - t.submitted for t in traces if t.chunks]
    rtfs = [rtf(t.finished - t.submitted, a) for t, a in zip(traces, audio) if a > 0]
    calls = after["calls"] - before["calls"]
    return {
        "concurrency": concurrency, "stream": stream, "requests": len(requests), "wall_s": wall,
        "audio_s": sum(audio), "audio_s_per_s": sum(audio) / wall, "requests_per_s": len(requests) / wall,
        "ttfa_p50_s": percentile(ttfa, 50), "ttfa_p99_s": percentile(ttfa, 99),
        "rtf_p50": percentile(rtfs, 50), "rtf_mean": float(np.mean(rtfs)) if rtfs else float("nan"),
        "mean_ar_batch": (after["rows"] - before["rows"]) / calls if calls else 0.0, "ar_calls": calls,
        "underruns": sum(underruns(t.chunks) for t in traces) if stream else 0,
        "finish_reasons": sorted({t.result.finish_reason for t in traces}),
        "codes": [t.result.codes for t in traces],
        # seconds the engine spent running each kind of work (prefill, frames, audio chunks, ...) in this scenario
        "kind_seconds": {k: kinds_after[k]["seconds"] - kinds_before[k]["seconds"] for k in kinds_after},
    }


@keeps_threads
def run_baseline(runtime: Runtime, requests: list[dict[str, Any]], tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The simple sequential loop on the runtime's own weights, one request at a time: the family's reference
    loop, then the codec's whole decode (`family_bench(card).sequential`)."""
    model, sequential = runtime.model, family_bench(runtime.card).sequential
    codes_out, audio_s, parts = [], 0.0, {"generate": 0.0, "decode": 0.0}
    threads = runtime.card.runtime.cpu_threads
    if threads is not None and model.device.type == "cpu":
        torch.set_num_threads(threads)  # the same threading as the engine thread: a like-for-like baseline
    start = time.perf_counter()
    for req in requests:
        codes, seconds, took = sequential(runtime, req)
        audio_s += seconds
        parts = {k: parts[k] + took[k] for k in parts}
        codes_out.append(codes)
        tick()
    wall = time.perf_counter() - start
    return {"requests": len(requests), "wall_s": wall, "audio_s": audio_s, "audio_s_per_s": audio_s / wall,
            "requests_per_s": len(requests) / wall, "codes": codes_out,
            "part_seconds": parts}
