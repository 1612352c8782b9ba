"""Engine overhead: the runtime's host time per step when the model's work is negligible.

Two figures per number of rows: wall time per step (everything the process does: submits, the engine,
publishing results and their audio on other threads) and the engine thread's own time in steps
(`stats()["host_seconds"]`: planning, scheduling, the executors' host halves, reading back, delivery).

Owns: the measurement at several numbers of running requests, `settle` (wait until the engine is idle),
and `instant_experts` / `one_row_requests`, which hand over to the card's family's stand-ins (its bench
package's `overhead`: executors that answer at once, so what is timed is the engine; v2/bench/family.py).
Must not know: model internals, any family.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

from v2.bench.family import family_bench
from v2.runtime import Runtime


def stand_ins(runtime: Runtime) -> Any:
    """The runtime's family's stand-ins (its bench's `overhead`); ValueError where it has none."""
    found = getattr(family_bench(runtime.card), "overhead", None)
    if not found:
        raise ValueError(f"family {runtime.card.family!r} has no stand-ins for its experts (its bench's `overhead`)")
    return found


def instant_experts(runtime: Runtime) -> AbstractContextManager[None]:
    """Inside: the runtime's experts keep their host halves and answer at once on the device side (the family's
    stand-ins). The real executors are back on exit. Swap only while the runtime is idle."""
    return stand_ins(runtime).instant_experts(runtime)  # type: ignore[no-any-return]


def one_row_requests(runtime: Runtime, rows: int, *, frames: int) -> list[dict[str, Any]]:
    """`rows` requests with a one-row prompt, each decoding exactly `frames` frames (request i seeded i)."""
    return stand_ins(runtime).one_row_requests(runtime, rows, frames=frames)  # type: ignore[no-any-return]


def settle(runtime: Runtime, timeout: float = 30.0) -> None:
    """Wait until the engine holds no request and no launched step (the device halves it queued have run)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        s = runtime.stats()
        if s["running"] == s["waiting"] == s["steps_in_flight"] == 0:
            return
        time.sleep(0.001)


def run_overhead(runtime: Runtime, rows: int, *, frames: int) -> dict[str, Any]:
    """`rows` requests decoding `frames` frames each with instant experts: host microseconds per step and per row."""
    with instant_experts(runtime):
        before = runtime.stats()
        start = time.perf_counter()
        handles = runtime.submit_many(one_row_requests(runtime, rows, frames=frames))
        for h in handles:
            h.result()
        wall = time.perf_counter() - start
        after = runtime.stats()
    ran = after["steps"] - before["steps"]
    frame_rows = after["kinds"]["ar_frame"]["rows"] - before["kinds"]["ar_frame"]["rows"]
    host = after["host_seconds"] - before["host_seconds"]
    return {"rows": rows, "steps": ran, "mean_rows_per_step": frame_rows / ran, "us_per_step": wall / ran * 1e6,
            "us_per_row": wall / frame_rows * 1e6, "engine_us_per_step": host / ran * 1e6,
            "engine_us_per_row": host / frame_rows * 1e6}
