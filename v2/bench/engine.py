"""`python -m v2.bench.engine`: the engine's own cost, on one card; a small table, then one JSON line last.

Four parts (five with `--two-loop`):
- "overhead": the engine with instant experts (`v2.bench.overhead`: the family's stand-ins) on the synchronous CPU stream at 1, 16
  and 64 rows: wall and engine-thread microseconds per step and per row, best and median of `--repeat`
  runs; goal: engine time <= 15 us per row at 64 rows.
- "simulated_device": instant experts on `SimulatedStream(D)` (an asynchronous device whose every step takes
  D of device time), 64 rows: the steady period between steps (the median interval between the starts of
  the engine's steps, first and last few left out); goal: <= D + 0.25 ms, i.e. the host's work hides
  under the device's. For comparison, what it would be without overlap: D + the engine time per step on
  the CPU stream at 64 rows.
- "two_paged_loops" (with `--two-loop CARD`): a card whose graph pages two loops, one feeding the other while
  both decode (the test family's, tests/runtime/twoloop), instant experts on the CPU stream at 1, 16 and 64
  requests: engine microseconds per step and per launched row, every kind's rows together.
- "time_to_first_audio": one streaming request at a time on the real model, submit to first chunk in ms and
  in engine steps, on the CPU stream and on the simulated device (chunks go out in the step right after
  their frames are read).
- "serving_vs_generate_batch": the real model, one intra-op thread on every side: 16 requests of a fixed
  number of frames submitted together, against the family's plain batched reference loop on the same
  prompts, sampling settings and seeds (its bench's `fixed_batch`, v2/bench/family.py); per-frame wall time of both, the runtime's overhead fraction (goal
  <= 5 %) and whether the codes are equal; on the CPU stream and on the threaded device
  (`SimulatedStream(0.0)`: the model on a worker thread, host work overlapping it); on CUDA the two rows
  are the synchronous order (`CudaStream`, depth 0) and the overlapped one (depth 1); without audio, then
  with audio (runtime decoding chunks vs. one `codec.decode` per request afterwards: informative only).

Owns: the command line, the measurements above (a step-timestamp wrapper around the engine's step,
the paired and alternated timing of the two sides), the table, the JSON line, and the picture of the one
sweep (`--plot FILE.png`: the overhead's microseconds per row and per step against rows, the goal drawn).
The card's family must have stand-ins and a fixed-batch reference (refused with the reason otherwise).
Must not know: model internals, loop logic, how the engine plans or schedules (it times `_step` from
outside and reads `stats()`), any family.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from v2.bench.__main__ import check_plot, machine
from v2.bench.family import family_bench
from v2 import registry
from v2.bench.overhead import instant_experts, one_row_requests, run_overhead
from v2.bench.serving import workload
from v2.card import DEFAULT_CARD, load_card
from v2.runtime import Runtime
from v2.runtime.device import CudaStream, HostStream, SimulatedStream

OVERHEAD_ROWS = (1, 16, 64)
OVERHEAD_GOAL_US_PER_ROW = 15.0     # engine time per row at 64 rows
PERIOD_SLACK_MS = 0.25              # the simulated device's step period may exceed D by this much
SERVING_GOAL = 0.05                 # the runtime's per-frame time over generate_batch's
FIGURES = ("us_per_step", "us_per_row", "engine_us_per_step", "engine_us_per_row")


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


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


# ----- 3. serving vs generate_batch ---------------------------------------------------------------
def _timed(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out


def serving_vs_generate_batch(runtimes: dict[str, Runtime], n: int, frames: int, repeat: int) -> list[dict[str, Any]]:
    first = next(iter(runtimes.values()))
    fixed_batch = family_bench(first.card).fixed_batch
    texts = [r["text"] for r in workload(n, max_frames=frames)]
    requests, reference = fixed_batch(first, texts, frames=frames)

    def serve(rt: Runtime, audio: bool) -> list[np.ndarray]:
        handles = rt.submit_many([{**r, "decode_audio": audio} for r in requests])
        return [np.asarray(h.result().codes) for h in handles]

    # warm up every side once, briefly
    warm, warm_reference = fixed_batch(first, texts[:2], frames=4)
    warm_reference(False)
    for rt in runtimes.values():
        for h in rt.submit_many(warm):
            h.result()

    cases = [(name, audio) for audio in (False, True) for name in runtimes]
    walls: dict[tuple[str, bool], dict[str, list[float]]] = {c: {"runtime": [], "generate_batch": []} for c in cases}
    equal = {c: True for c in cases}
    for i in range(repeat):
        for j, (name, audio) in enumerate(cases):
            sides: list[tuple[str, Callable[[], Any]]] = [
                ("generate_batch", functools.partial(reference, audio)),
                ("runtime", functools.partial(serve, runtimes[name], audio))]
            if (i + j) % 2:
                sides.reverse()  # alternate which side goes first: spread the machine's noise
            got = {}
            for side, work in sides:
                wall, got[side] = _timed(work)
                walls[(name, audio)][side].append(wall)
            equal[(name, audio)] &= all(np.array_equal(a, b) for a, b in zip(got["runtime"], got["generate_batch"]))
            log(f"  serving {name:>9} audio={audio!s:<5} run {i + 1}/{repeat}: runtime "
                f"{walls[(name, audio)]['runtime'][-1] / frames * 1e3:6.2f} ms/frame, generate_batch "
                f"{walls[(name, audio)]['generate_batch'][-1] / frames * 1e3:6.2f} ms/frame")
    out = []
    for name, audio in cases:
        w = walls[(name, audio)]
        rt_ms, ref_ms = min(w["runtime"]) / frames * 1e3, min(w["generate_batch"]) / frames * 1e3
        fraction = rt_ms / ref_ms - 1
        row = {"stream": name, "decode_audio": audio, "requests": n, "frames": frames,
               "runtime_ms_per_frame": rt_ms, "generate_batch_ms_per_frame": ref_ms,
               "runtime_ms_per_frame_median": statistics.median(w["runtime"]) / frames * 1e3,
               "generate_batch_ms_per_frame_median": statistics.median(w["generate_batch"]) / frames * 1e3,
               "overhead_fraction": fraction, "codes_equal": equal[(name, audio)], "runs": len(w["runtime"])}
        if audio:
            row["note"] = ("informative: the runtime decodes audio in chunks as frames come; the reference decodes "
                           "each request's codes once afterwards")
        else:
            row["goal"] = {"overhead_fraction_max": SERVING_GOAL, "value": fraction, "met": fraction <= SERVING_GOAL}
        out.append(row)
    return out


# ----- 4. time to first audio ----------------------------------------------------------------------
def time_to_first_audio(card: Any, device: str, latency: float, runs: int) -> list[dict[str, Any]]:
    """One streaming request at a time on the real model (30 frames): submit to its first chunk, in
    milliseconds and in engine steps, on the synchronous stream and on the simulated device."""
    out = []
    streams = (("cpu_stream", HostStream()), ("simulated_device", SimulatedStream(latency)))
    for name, stream in streams:
        runtime = Runtime.from_card(card, device=device, stream=stream)
        try:
            runtime.submit({"text": "warm up", "seed": 0, "max_frames": 4}).result(60)
            ms, steps = [], []
            for i in range(runs):
                before = runtime.stats()["steps"]
                start = time.perf_counter()
                handle = runtime.submit({"text": "time to first audio", "seed": i, "max_frames": 30,
                                         "min_frames": 30, "stream": True})
                next(iter(handle))
                ms.append((time.perf_counter() - start) * 1e3)
                steps.append(runtime.stats()["steps"] - before)
                handle.result(60)
        finally:
            runtime.close()
        out.append({"stream": name, "latency_ms": latency * 1e3 if name == "simulated_device" else 0.0,
                    "ttfa_ms_p50": statistics.median(ms), "ttfa_steps_p50": statistics.median(steps), "runs": runs})
    return out


# ----- the command --------------------------------------------------------------------------------
def table(report: dict[str, Any]) -> str:
    lines = ["engine overhead (instant experts, CPU stream)",
             f"{'rows':>5} {'wall us/step':>12} {'wall us/row':>11} {'eng us/step':>11} {'eng us/row':>10}  (best; median)"]
    for r in report["overhead"]["rows"]:
        b, m = r["best"], r["median"]
        lines.append(f"{r['rows']:>5} {b['us_per_step']:>12.0f} {b['us_per_row']:>11.1f} {b['engine_us_per_step']:>11.0f} "
                     f"{b['engine_us_per_row']:>10.1f}  ({m['us_per_step']:.0f}, {m['us_per_row']:.1f}, "
                     f"{m['engine_us_per_step']:.0f}, {m['engine_us_per_row']:.1f})")
    g = report["overhead"]["goal"]
    lines.append(f"goal: engine <= {g['engine_us_per_row_at_64_rows_max']:.0f} us/row at 64 rows: "
                 f"{g['value']:.1f} -> {'met' if g['met'] else 'NOT met'}")
    s = report["simulated_device"]
    lines.append(f"simulated device D = {s['D_ms']:.2f} ms, 64 rows: step period {s['period_ms']:.3f} ms "
                 f"(goal <= {s['goal']['period_ms_max']:.2f}: {'met' if s['goal']['met'] else 'NOT met'}); "
                 f"engine {s['engine_us_per_step']:.0f} us/step; without overlap ~{s['no_overlap_estimate_ms']:.3f} ms")
    lines.append(f"{'stream':>9} {'audio':>5} {'runtime ms/frame':>16} {'generate_batch':>14} {'overhead':>8} {'codes equal':>11}")
    for r in report["serving_vs_generate_batch"]:
        goal = r.get("goal")
        mark = "" if goal is None else ("  goal met" if goal["met"] else "  goal NOT met")
        lines.append(f"{r['stream']:>9} {str(r['decode_audio']):>5} {r['runtime_ms_per_frame']:>16.2f} "
                     f"{r['generate_batch_ms_per_frame']:>14.2f} {r['overhead_fraction'] * 100:>7.1f}% "
                     f"{str(r['codes_equal']):>11}{mark}")
    for r in report["time_to_first_audio"]:
        lines.append(f"time to first audio, {r['stream']}: {r['ttfa_ms_p50']:.1f} ms, {r['ttfa_steps_p50']:.0f} steps (p50)")
    two = report.get("two_paged_loops")
    if two:
        lines.append(f"two paged loops ({two['card']}: {' -> '.join(two['paged_loops'])}; instant experts, CPU stream)")
        for r in two["rows"]:
            b = r["best"]
            lines.append(f"{r['rows']:>5} requests: {b['rows_per_step']:.1f} rows/step, engine {b['engine_us_per_step']:.0f} "
                         f"us/step, {b['engine_us_per_row']:.1f} us/row (median {r['median_engine_us_per_row']:.1f})")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Part "overhead": engine and wall microseconds per row and per step against rows (best of the runs)."""
    from v2.bench.plot import Panel, Series, sweep

    over = report["overhead"]["rows"]
    rows = [r["rows"] for r in over]
    per_row = Panel("per row", "microseconds", [Series("engine thread", [r["best"]["engine_us_per_row"] for r in over]),
                                                Series("wall", [r["best"]["us_per_row"] for r in over])],
                    {f"goal at 64 rows ({OVERHEAD_GOAL_US_PER_ROW:g} us)": OVERHEAD_GOAL_US_PER_ROW})
    per_step = Panel("per step", "microseconds", [Series("engine thread", [r["best"]["engine_us_per_step"] for r in over]),
                                                  Series("wall", [r["best"]["us_per_step"] for r in over])])
    sweep(path, f"engine overhead, {report['card']} (instant experts, CPU stream; best of {report['repeat']})",
          "rows per step (one-row requests)", rows, [per_row, per_step])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.engine", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="the device the engine's tensors live on (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="a short run (well under a minute on a 2-core CPU)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is reported (default: %(default)s)")
    p.add_argument("--latency", type=float, default=0.005,
                   help="the simulated device's time per step, seconds (default: %(default)s)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the overhead sweep (the plot extra; default: no picture)")
    p.add_argument("--two-loop", default=None, metavar="CARD",
                   help="also time a card whose graph pages two loops (a name or a path; e.g. the test family's "
                        "tests/runtime/twoloop/twoloop.toml with --register twoloop=twoloop and tests/runtime on "
                        "PYTHONPATH; default: none)")
    p.add_argument("--register", action="append", default=[], metavar="NAME=PACKAGE",
                   help="a family package to find by name (v2.registry.register), for --card or --two-loop; "
                        "may be given again (default: none)")
    args = p.parse_args(argv)
    check_plot(p, args.plot)
    for entry in args.register:
        name, _, package = entry.partition("=")
        if not name or not package:
            p.error(f"--register {entry}: give NAME=PACKAGE")
        registry.register(name, package)
    frames = 40 if args.quick else 100
    sim_frames = 60 if args.quick else 100
    load_before = os.getloadavg()
    started = time.perf_counter()

    torch.set_num_threads(1)  # generate_batch's thread; the engine and device threads use the card's
    card = load_card(args.card)
    bench = family_bench(card)
    if not getattr(bench, "overhead", None) or not hasattr(bench, "fixed_batch"):
        p.error(f"--card {args.card}: family {card.family!r} has no stand-ins for its experts or no fixed-batch "
                "reference loop in its bench package (`overhead`, `fixed_batch`)")
    card = card.model_copy(update={"runtime": card.runtime.model_copy(update={"cpu_threads": 1})})
    if args.device.startswith("cuda"):  # the synchronous order against the overlapped one, both on CUDA
        dev = torch.device(args.device)
        host = Runtime.from_card(card, device=args.device, stream=CudaStream(dev, depth=0))
        threaded = Runtime.from_card(card, device=args.device, stream=CudaStream(dev, depth=1))
    else:
        host = Runtime.from_card(card, device=args.device, stream=HostStream())
        threaded = Runtime.from_card(card, device=args.device, stream=SimulatedStream(0.0, threads=1))
    try:
        log("overhead ...")
        over = overhead(host, args.repeat, frames=50)
        at64 = next(r for r in over["rows"] if r["rows"] == 64)["best"]["engine_us_per_step"]
        log("simulated device ...")
        sim = simulated_device(card, args.device, args.latency, sim_frames, args.repeat, at64)
        log("serving vs generate_batch ...")
        serving = serving_vs_generate_batch({"host": host, "threaded": threaded}, 16, frames, args.repeat)
        log("time to first audio ...")
        ttfa = time_to_first_audio(card, args.device, args.latency, 3 if args.quick else 7)
        two = None
        if args.two_loop:
            log("two paged loops ...")
            two_card = load_card(args.two_loop)
            two_card = two_card.model_copy(update={"runtime": two_card.runtime.model_copy(update={"cpu_threads": 1})})
            two = two_paged_loops(two_card, 30, args.repeat)
    finally:
        host.close()
        threaded.close()
    report = {"bench": "v2.engine", "card": card.name, "quick": args.quick, "repeat": args.repeat,
              "machine": machine(args.device), "load_average_before": list(load_before),
              "load_average_after": list(os.getloadavg()), "seconds": time.perf_counter() - started,
              "overhead": over, "simulated_device": sim, "serving_vs_generate_batch": serving,
              "time_to_first_audio": ttfa, **({"two_paged_loops": two} if two is not None else {})}
    print(table(report))
    if args.plot:
        plot(report, args.plot)
        report["plot"] = os.path.abspath(args.plot)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
