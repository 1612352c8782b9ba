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

Owns: the command line, running the parts in order, the JSON line. The measurements are engine_instant.py's
(parts 1, 2, 2b: a step-timestamp wrapper around the engine's step) and engine_model.py's (parts 3, 4: the
paired and alternated timing of the two sides); the table and the picture of the one sweep (`--plot
FILE.png`: the overhead's microseconds per row and per step against rows, the goal drawn) are
engine_table.py's; their names are re-exported here.
The card's family must have stand-ins and a fixed-batch reference (refused with the reason otherwise).
Must not know: model internals, loop logic, how the engine plans or schedules (it times `_step` from
outside and reads `stats()`), any family.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from v2.bench.__main__ import check_plot, machine
from v2.bench.engine_instant import (  # re-exported: engine_instant.py's
    FIGURES, OVERHEAD_GOAL_US_PER_ROW, OVERHEAD_ROWS, PERIOD_SLACK_MS, overhead, simulated_device, steady_period,
    step_starts, two_paged_loops,
)
from v2.bench.engine_model import SERVING_GOAL, log, serving_vs_generate_batch, time_to_first_audio  # re-exported
from v2.bench.engine_table import plot, table  # re-exported: engine_table.py's
from v2.bench.family import family_bench
from v2 import registry
from v2.card import DEFAULT_CARD, load_card
from v2.runtime import Runtime
from v2.runtime.device import CudaStream, HostStream, SimulatedStream
from v2.bench.threads import keeps_threads


@keeps_threads
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
