"""Parts 3 and 4 of `python -m v2.bench.engine` (engine.py): the real model. "serving_vs_generate_batch": 16
requests of a fixed number of frames submitted together against the family's plain batched reference loop
(its bench's `fixed_batch`) on the same prompts, sampling settings and seeds, each side timed in turn (which
goes first alternates), per-frame wall time, the overhead fraction (`SERVING_GOAL`) and whether the codes are
equal; "time_to_first_audio": one streaming request at a time, submit to first chunk. `log`: a progress line
on stderr (the command's too).
Must not know: model internals, loop logic, how the engine plans or schedules, any family (its bench is found
through v2/bench/family.py), the command line, the table.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

from v2.bench.family import family_bench
from v2.bench.serving import workload
from v2.runtime import Runtime
from v2.runtime.device import HostStream, SimulatedStream

SERVING_GOAL = 0.05                 # the runtime's per-frame time over generate_batch's


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


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


