"""What every family's frame-step bench does the same way: time a call, give a bare executor's slots block
tables scattered over its pool, and time one bucket's step eager and replayed from a CUDA graph, checking that
a replay equals an eager step from the same state.

Owns: `timed`, `scatter_blocks`, `graph_bucket_row`, `say_row` (a row's line on stderr). Each family's bench (v2/families/<name>/bench/framestep.py)
builds its executor and plans and names what its step writes.
Must not know: any family, model or executor class (an executor here is anything with `frame_step(key)` and, for
`scatter_blocks`, `apply(copies, entries)`).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Protocol

import torch

from v2.runtime.graphs import StepGraphs


class _Tables(Protocol):
    def apply(self, copies: list[tuple[int, int]], entries: list[tuple[int, int, int]]) -> None: ...


def timed(fn: Callable[[], Any], iters: int, device: torch.device) -> float:
    """Mean milliseconds per call after two warm-up calls."""
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / iters * 1e3


def scatter_blocks(ex: _Tables, slots: int, width: int, seed: int = 0) -> None:
    """Give each of `slots` slots a full table of `width` blocks of its own, in a random order over the pool of
    `slots * width` blocks (as a long-running pool's are)."""
    order = torch.randperm(slots * width, generator=torch.Generator().manual_seed(seed)).tolist()
    ex.apply([], [(s, i, order[s * width + i]) for s in range(slots) for i in range(width)])


def graph_bucket_row(step: Callable[[tuple[int, ...]], torch.Tensor], key: tuple[int, ...], bucket: int,
                     state: Callable[[], list[torch.Tensor]], iters: int, device: torch.device) -> dict[str, Any]:
    """One bucket: eager ms; on CUDA also graph ms and `graph_equals_eager` (one replay and one eager step from
    the same state give the same packed result [bucket, ...] and leave the same `state()`, bit for bit)."""
    row: dict[str, Any] = {"bucket": bucket, "eager_ms": timed(lambda: step(key), iters, device)}
    if device.type != "cuda":
        row["frames_per_s"] = bucket / row["eager_ms"] * 1e3
        return row
    graphs = StepGraphs("bench", step, [key], device=device, enabled=True)
    graphs.capture()
    saved = [t.clone() for t in state()]
    replayed = graphs.run(key)
    after = [t.clone() for t in state()]
    for t, s in zip(state(), saved):
        t.copy_(s)
    direct = step(key)
    row["graph_equals_eager"] = bool(torch.equal(replayed[:bucket], direct[:bucket])
                                     and all(torch.equal(a, t) for a, t in zip(after, state())))
    row["graph_ms"] = timed(lambda: graphs.run(key), iters, device)
    row["frames_per_s"] = bucket / row["graph_ms"] * 1e3
    return row


def say_row(row: dict[str, Any]) -> dict[str, Any]:
    """A bench row as one `key=value` line on stderr (floats to 3 places); the row, for the JSON."""
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), file=sys.stderr)
    return row
