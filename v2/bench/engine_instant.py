"""Parts 1, 2 and 2b of `python -m v2.bench.engine` (engine.py): the engine with instant experts (the family's
stand-ins, `v2.bench.overhead`). "overhead": on the synchronous CPU stream at 1, 16 and 64 rows, wall and
engine-thread microseconds per step and per row, best and median of the runs; "simulated_device": on
`SimulatedStream(D)` at 64 rows, the steady period between step starts (`step_starts`, a timestamp wrapper
around the engine's step; `steady_period`); "two_paged_loops": a card whose graph pages two loops. Their
goals' numbers (`OVERHEAD_GOAL_US_PER_ROW`, `PERIOD_SLACK_MS`).
Must not know: model internals, loop logic, how the engine plans or schedules (it times `step` from outside
and reads `stats()`), any family, the command line, the table.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from v2.bench.overhead import instant_experts, one_row_requests, run_overhead
from v2.runtime import Runtime
from v2.runtime.device import HostStream, SimulatedStream

OVERHEAD_ROWS = (1, 16, 64)
OVERHEAD_GOAL_US_PER_ROW = 15.0     # engine time per row at 64 rows
PERIOD_SLACK_MS = 0.25              # the simulated device's step period may exceed D by this much
FIGURES = ("us_per_step", "us_per_row", "engine_us_per_step", "engine_us_per_row")


# ----- 1. overhead --------------------------------------------------------------------------------
def overhead(runtime: Runtime, repeat: int, frames: int) -> dict[str, Any]:
    run_overhead(runtime, 64, frames=5)  # warm up: static outputs per bucket, first-call costs
    rows_out: list[dict[str, Any]] = []
    for rows in OVERHEAD_ROWS:
        runs = [run_overhead(runtime, rows, frames=frames) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["engine_us_per_row"])
        rows_out.append({"rows": rows, "best": best,
                         "median": {k: statistics.median(r[k] for r in runs) for k in FIGURES}, "runs": len(runs)})
    at64 = next(r for r in rows_out if r["rows"] == 64)["best"]["engine_us_per_row"]
    return {"frames": frames, "repeat": repeat, "rows": rows_out,
            "goal": {"engine_us_per_row_at_64_rows_max": OVERHEAD_GOAL_US_PER_ROW, "value": at64,
                     "met": at64 <= OVERHEAD_GOAL_US_PER_ROW}}


# ----- 2. simulated device ------------------------------------------------------------------------
@contextmanager
def step_starts(runtime: Runtime) -> Iterator[list[float]]:
    """perf_counter at the start of every engine step while inside (wraps the engine's `step`, passing its
    result through)."""
    stamps: list[float] = []
    real = runtime.engine.step

    def timed() -> bool:
        stamps.append(time.perf_counter())
        return real()  # whether the step did anything: the engine sleeps after a step that did nothing

    runtime.engine.step = timed  # type: ignore[method-assign]  # the engine thread looks `step` up every step
    try:
        yield stamps
    finally:
        del runtime.engine.step  # the class's method again


def steady_period(stamps: list[float], edge: int) -> tuple[float, int]:
    """Median interval between step starts, `edge` intervals left out at each end; and how many were kept."""
    intervals = np.diff(stamps)
    kept = intervals[edge: len(intervals) - edge] if len(intervals) > 2 * edge + 2 else intervals
    return float(np.median(kept)), len(kept)


def simulated_device(card: Any, device: str, latency: float, frames: int, repeat: int, host_engine_us_per_step: float) -> dict[str, Any]:
    rows = 64
    runtime = Runtime.from_card(card, device=device, stream=SimulatedStream(latency))
    runs = []
    try:
        with instant_experts(runtime):
            for h in runtime.submit_many(one_row_requests(runtime, rows, frames=5)):  # warm up
                h.result()
        for _ in range(repeat):
            with instant_experts(runtime), step_starts(runtime) as stamps:
                before = runtime.stats()
                for h in runtime.submit_many(one_row_requests(runtime, rows, frames=frames)):
                    h.result()
                after = runtime.stats()
            steps = after["steps"] - before["steps"]
            period, kept = steady_period(stamps, edge=5)
            runs.append({"period_ms": period * 1e3, "steps": steps, "intervals_kept": kept,
                         "engine_us_per_step": (after["host_seconds"] - before["host_seconds"]) / steps * 1e6})
    finally:
        runtime.close()
    best = min(runs, key=lambda r: r["period_ms"])
    d_ms = latency * 1e3
    return {"rows": rows, "frames": frames, "D_ms": d_ms, "period_ms": best["period_ms"],
            "period_ms_median_of_runs": statistics.median(r["period_ms"] for r in runs),
            "engine_us_per_step": best["engine_us_per_step"], "steps": best["steps"],
            "intervals_kept": best["intervals_kept"],
            "no_overlap_estimate_ms": d_ms + host_engine_us_per_step / 1e3,
            "no_overlap_note": "D + the CPU stream's engine time per step at 64 rows (part 'overhead', best)",
            "goal": {"period_ms_max": d_ms + PERIOD_SLACK_MS, "value": best["period_ms"],
                     "met": best["period_ms"] <= d_ms + PERIOD_SLACK_MS}}


# ----- 2b. two paged loops -----------------------------------------------------------------------------
def two_paged_loops(card: Any, frames: int, repeat: int) -> dict[str, Any]:
    """A card whose graph pages two loops or more (one fed by the other while both decode), its experts
    instant, on the CPU stream: engine microseconds per step and per launched row (every kind's rows
    together), best and median of `repeat` runs at each of OVERHEAD_ROWS requests."""
    runtime = Runtime.from_card(card, device="cpu", stream=HostStream())
    try:
        paged = runtime.engine.paged
        if paged is None or len(paged.kvs) < 2:
            raise ValueError(f"--two-loop {card.name}: its graph pages {0 if paged is None else len(paged.kvs)} loop(s)")
        with instant_experts(runtime):
            for h in runtime.submit_many(one_row_requests(runtime, 64, frames=5)):  # warm up
                h.result()
        out = []
        for rows in OVERHEAD_ROWS:
            runs = []
            for _ in range(repeat):
                with instant_experts(runtime):
                    before = runtime.stats()
                    for h in runtime.submit_many(one_row_requests(runtime, rows, frames=frames)):
                        h.result()
                    after = runtime.stats()
                steps = after["steps"] - before["steps"]
                launched = sum(after["kinds"][k]["rows"] - before["kinds"][k]["rows"] for k in after["kinds"])
                host = after["host_seconds"] - before["host_seconds"]
                runs.append({"steps": steps, "rows_per_step": launched / steps,
                             "engine_us_per_step": host / steps * 1e6, "engine_us_per_row": host / launched * 1e6})
            best = min(runs, key=lambda r: r["engine_us_per_row"])
            out.append({"rows": rows, "best": best, "median_engine_us_per_row":
                        statistics.median(r["engine_us_per_row"] for r in runs)})
        return {"card": card.name, "paged_loops": [str(kv.name) for kv in paged.kvs], "frames": frames, "rows": out}
    finally:
        runtime.close()


