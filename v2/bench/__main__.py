"""`python -m v2.bench`: v2 against the sequential baseline, side by side, on one card; one JSON line last.

Owns: the command line, which scenarios run (end-to-end serving at several concurrencies, streaming and
not; the sequential baseline on the same weights; engine overhead where the card's family has stand-ins
for its executors; with `--reference DIR`, the frame step against the reference implementation's own
generate(), `v2.bench.reference`, where the family has one), on any card (its family builds the runtime, the requests and the
baseline), the progress bar (on a terminal only), the table (with the engine's seconds per kind of work in each scenario), the
picture (`--plot FILE.png`: audio-s/s and TTFA against concurrency, the baseline drawn across), and the
final JSON line with every figure, the machine, the torch version and the git commit.
Must not know: engine or model internals, any family.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from v2.bench.aligner_cost import paired, with_words
from v2.bench.aligner_cost import table as aligner_table
from v2.bench.family import family_bench
from v2.bench.reference import compare, locate
from v2.bench.reference import table as reference_table
from v2.bench.serving import peak_memory_mb, run_baseline, run_serving, workload
from v2.card import DEFAULT_CARD, load_card
from v2.runtime import Runtime


class Bar:
    """The progress bar: `\\r` frames redrawn in place, so only on a terminal (a log or a pipe gets none)."""

    def __init__(self, total: int, enabled: bool, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self.total, self.done, self.label = total, 0, ""
        self.enabled = enabled and self.out.isatty()
        self.start = time.perf_counter()

    def tick(self) -> None:
        self.done += 1
        self.draw()

    def stage(self, label: str) -> None:
        self.label = label
        self.draw()

    def draw(self) -> None:
        if self.enabled:
            filled = int(30 * self.done / max(1, self.total))
            self.out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                           f"{time.perf_counter() - self.start:6.1f} s  {self.label:<40}")
            self.out.flush()

    def close(self) -> None:
        if self.enabled:
            self.out.write("\n")


def machine(device: str) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "device": device, "git_commit": commit}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info


def check_plot(parser: argparse.ArgumentParser, path: str | None) -> None:
    """Refuse `--plot` before anything runs when it cannot be drawn (matplotlib missing, a bad path)."""
    if path is not None:
        from v2.bench.plot import PlotError, check

        try:
            check(path)
        except PlotError as e:
            parser.error(str(e))


def build_runtime(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> Runtime:
    """The card's runtime, built by its family's bench module (`--random-weights`: the release's dimensions
    with random weights, where the family has them; refused through `parser` otherwise)."""
    card = load_card(args.card)
    aligner = getattr(args, "aligner", None)
    if aligner is not None:
        if args.random_weights:
            message = "--aligner: the aligner is added to the card's own weights (no --random-weights)"
            if parser is None:
                raise ValueError(message)
            parser.error(message)
        return Runtime.from_card(card, device=args.device, aligner=aligner)
    try:
        return family_bench(card).runtime(card, device=args.device, random_weights=args.random_weights)  # type: ignore[no-any-return]
    except ValueError as e:
        if parser is None:
            raise
        parser.error(str(e))


def table(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> str:
    head = (f"{'conc':>4} {'stream':>6} {'audio-s/s':>9} {'x base':>6} {'req/s':>6} {'TTFA p50':>9} {'TTFA p99':>9} "
            f"{'RTF p50':>8} {'AR batch':>8} {'underruns':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['concurrency']:>4} {str(r['stream']):>6} {r['audio_s_per_s']:>9.2f} {r['speedup_vs_baseline']:>6.2f} "
                     f"{r['requests_per_s']:>6.2f} {r['ttfa_p50_s'] * 1e3:>7.1f}ms {r['ttfa_p99_s'] * 1e3:>7.1f}ms "
                     f"{r['rtf_p50']:>8.3f} {r['mean_ar_batch']:>8.2f} {r['underruns']:>9}")
    lines.append(f"baseline (sequential reference loop + decode()): {baseline['audio_s_per_s']:.2f} audio-s/s, "
                 f"{baseline['requests_per_s']:.2f} req/s; "
                 + ", ".join(f"{k} {v:.1f} s" for k, v in baseline.get("part_seconds", {}).items()))
    lines.append("engine seconds per kind of work: "
                 + "; ".join(f"c={r['concurrency']} {'stream' if r['stream'] else 'whole'}: wall {r['wall_s']:.1f}, "
                             + ", ".join(f"{k} {v:.1f}" for k, v in r.get("kind_seconds", {}).items() if v > 0)
                             for r in rows))
    lines.append("RTF = generation time / audio duration: lower is better.")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """audio-s/s and TTFA (p50, p99) against concurrency, streamed and not, with the sequential baseline."""
    from v2.bench.plot import Panel, Series, sweep

    base = report["baseline"]
    levels = sorted({s["concurrency"] for s in report["scenarios"]})
    at = {(s["concurrency"], s["stream"]): s for s in report["scenarios"]}
    ways = [(True, "streamed"), (False, "whole")]
    throughput = Panel("throughput", "audio seconds per second",
                       [Series(name, [at[(c, stream)]["audio_s_per_s"] for c in levels]) for stream, name in ways],
                       {"sequential baseline": base["audio_s_per_s"]})
    ttfa = Panel("time to first audio", "ms",
                 [Series(f"{name} {q}", [at[(c, stream)][f"ttfa_{q}_s"] * 1e3 for c in levels], dashed=q == "p99")
                  for stream, name in ways for q in ("p50", "p99")],
                 {"sequential, one request alone": base["wall_s"] / base["requests"] * 1e3})
    sweep(path, f"v2 serving, {report['card']} on {report['machine']['device']} ({report['requests']} requests, "
          f"{report['max_frames']} frames each)", "concurrency (requests in flight)", levels, [throughput, ttfa],
          note="baseline: the same requests through the reference loop then decode(), one after another")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--random-weights", action="store_true", help="the release's dimensions with random weights")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu, cuda or cuda:N (default: cuda when available, else cpu; here %(default)s)")
    p.add_argument("--quick", action="store_true", help="a small run (under a minute on a 2-core CPU)")
    p.add_argument("--requests", type=int, default=None,
                   help="requests per scenario (default: 48; 8 with --quick)")
    p.add_argument("--max-frames", type=int, default=None,
                   help="frames each request may speak (default: 100; 24 with --quick)")
    p.add_argument("--concurrency", type=int, nargs="+", default=None,
                   help="requests in flight, one scenario each (default: 1 4 16 64; 1 4 with --quick)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (default: a bar on stderr when it is a terminal)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the sweep (needs the plot extra; default: no picture)")
    p.add_argument("--reference", default=None,
                   help="a local copy of the card's family's reference implementation: adds the frame-step comparison "
                        "with its own generate() (v2.bench.reference; default: the family's environment variable, "
                        "skipped when neither is set or the family has none)")
    p.add_argument("--reference-python", default=None,
                   help="the python that runs it (default: the family's environment variable, else this one)")
    p.add_argument("--aligner", default=None, metavar="CARD",
                   help="serve with this word aligner added (an aligner card, e.g. forced_aligner_tiny) and ask every "
                        "request for timestamps: \"word\" (default: no aligner)")
    p.add_argument("--paired", type=int, default=0, metavar="N",
                   help="with --aligner: each scenario also without it (a runtime without the aligner), N runs each "
                        "way alternating, and what the timestamps cost (default: 0, no pairing)")
    p.add_argument("--paired-one-runtime", action="store_true",
                   help="with --paired: the requests without timestamps on the aligned runtime itself, not on a "
                        "second runtime without the aligner (what asking for words costs; one runtime's memory)")
    args = p.parse_args(argv)
    check_plot(p, args.plot)
    if args.paired and args.aligner is None:
        p.error("--paired: needs --aligner (what is paired is without and with it)")
    if args.paired < 0:
        p.error("--paired: a count of runs, 0 or more")
    if args.paired_one_runtime and not args.paired:
        p.error("--paired-one-runtime: needs --paired N (it says where the requests without timestamps run)")
    n = args.requests or (8 if args.quick else 48)
    max_frames = args.max_frames or (24 if args.quick else 100)
    levels = args.concurrency or ([1, 4] if args.quick else [1, 4, 16, 64])
    overhead_rows = [1, 16, 64]

    load_before = os.getloadavg()[0]
    runtime = build_runtime(args, p)
    requests = workload(n, max_frames=max_frames, runtime=runtime)
    plain = (runtime if args.paired_one_runtime else Runtime.from_card(runtime.card, device=args.device)
             ) if args.paired else None
    plain_requests = requests
    if args.aligner is not None:
        requests = with_words(requests)
    if not family_bench(runtime.card).overhead or args.paired:
        overhead_rows = []  # no stand-ins for this family's executors; or what is measured is the aligner's cost
    bar = Bar(n * (1 + 2 * len(levels) * max(1, 2 * args.paired)) + len(overhead_rows), enabled=not args.no_progress)
    costs: list[dict[str, Any]] = []
    try:
        runtime.submit({**requests[0], "max_frames": 4}).result()  # warm up
        if plain is not None and plain is not runtime:
            plain.submit({**plain_requests[0], "max_frames": 4}).result()
        bar.stage("baseline")
        baseline = run_baseline(runtime, requests, tick=bar.tick)
        scenarios = []
        for level in levels:
            for stream in (True, False):
                bar.stage(f"concurrency {level}, stream {stream}")
                if plain is not None:
                    s, cost = paired(plain, runtime, plain_requests, concurrency=level, stream=stream,
                                     repeat=args.paired, tick=bar.tick)
                    costs.append(cost)
                else:
                    s = run_serving(runtime, requests, concurrency=level, stream=stream, tick=bar.tick)
                s["codes_match_baseline"] = all(np.array_equal(a, b) for a, b in zip(s.pop("codes"), baseline["codes"]))
                s["speedup_vs_baseline"] = s["audio_s_per_s"] / baseline["audio_s_per_s"]
                s["peak_memory_mb"] = peak_memory_mb(args.device)
                scenarios.append(s)
        overhead = []
        for rows in overhead_rows:
            from v2.bench.overhead import run_overhead

            bar.stage(f"engine overhead, {rows} rows")
            overhead.append(run_overhead(runtime, rows, frames=50))
            bar.tick()
    finally:
        bar.close()
        runtime.close()
        if plain is not None and plain is not runtime:
            plain.close()
    baseline.pop("codes")
    print(table(scenarios, baseline))
    if costs:
        print(aligner_table(costs, str(args.aligner)))
    reference_dir, python, why = locate(runtime.card.family, args.reference, args.reference_python)
    if reference_dir is None:
        print(f"reference comparison: {why}")
        comparison: dict[str, Any] = {"skipped": why}
    else:
        comparison = compare(runtime.card.family, reference_dir, python, repeat=3 if args.quick else 5,
                             log=lambda m: print(m, file=sys.stderr) if not args.no_progress else None)
        print(reference_table(comparison))
    for o in overhead:
        print(f"engine overhead at {o['rows']:>2} rows: {o['us_per_step']:8.0f} us per step, {o['us_per_row']:7.0f} us per row "
              f"(instant experts; {o['mean_rows_per_step']:.1f} rows per step on average)")
    report = {"bench": "v2.serving", "card": runtime.card.name, "random_weights": args.random_weights,
              "quick": args.quick, "requests": n, "max_frames": max_frames, "machine": machine(args.device),
              "baseline": baseline, "scenarios": scenarios, "engine_overhead": overhead,
              "reference_comparison": comparison, "aligner": args.aligner, "aligner_cost": costs,
              "load_avg_1min": {"before": load_before, "after": os.getloadavg()[0]},
              "rtf_note": "RTF = generation time / audio duration, lower is better"}
    if args.plot:
        plot(report, args.plot)
        report["plot"] = str(Path(args.plot).absolute())
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
