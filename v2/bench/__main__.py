"""`python -m v2.bench`: v2 against the sequential baseline, side by side, on one card; one JSON line last.

Owns: the command line, which scenarios run (end-to-end serving at several concurrencies, streaming and
not; the sequential baseline on the same weights; engine overhead), the progress bar, the table, the
picture (`--plot FILE.png`: audio-s/s and TTFA against concurrency, the baseline drawn across), and the
final JSON line with every figure, the machine, the torch version and the git commit.
Must not know: engine or model internals.
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
from typing import Any

import numpy as np
import torch

from v2.bench.overhead import run_overhead
from v2.bench.serving import peak_memory_mb, run_baseline, run_serving, workload
from v2.families.moss_tts_local.shapes import SHAPES
from v2.card import build_codec, build_model, build_tokenizer, load_card
from v2.models.codec import MossAudioDecoder
from v2.models.moss_tts_local import MossTTSLocal
from v2.models.tokenizer import ByteTokenizer
from v2.runtime import Runtime


class Bar:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled, self.label = total, 0, enabled, ""
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
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                             f"{time.perf_counter() - self.start:6.1f} s  {self.label:<40}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


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


def build_runtime(args: argparse.Namespace) -> Runtime:
    card = load_card(args.card)
    if args.random_weights:  # the release's dimensions with random weights: nothing to download
        dtype = getattr(torch, card.experts.backbone.dtype)
        model = MossTTSLocal.from_seed(json.loads(SHAPES.joinpath("moss_tts_local_v1_5.json").read_text()), 0,
                                       dtype=dtype, device=args.device, init_device=args.device)
        codec = MossAudioDecoder.from_seed(json.loads(SHAPES.joinpath("moss_audio_tokenizer_v2.json").read_text()), 0,
                                           dtype=getattr(torch, card.experts.vocoder.dtype), device=args.device,
                                           init_device=args.device)
        return Runtime(card, model, codec, ByteTokenizer())
    return Runtime(card, build_model(card, device=args.device), build_codec(card, device=args.device),
                   build_tokenizer(card))


def table(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> str:
    head = (f"{'conc':>4} {'stream':>6} {'audio-s/s':>9} {'x base':>6} {'req/s':>6} {'TTFA p50':>9} {'TTFA p99':>9} "
            f"{'RTF p50':>8} {'AR batch':>8} {'underruns':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['concurrency']:>4} {str(r['stream']):>6} {r['audio_s_per_s']:>9.2f} {r['speedup_vs_baseline']:>6.2f} "
                     f"{r['requests_per_s']:>6.2f} {r['ttfa_p50_s'] * 1e3:>7.1f}ms {r['ttfa_p99_s'] * 1e3:>7.1f}ms "
                     f"{r['rtf_p50']:>8.3f} {r['mean_ar_batch']:>8.2f} {r['underruns']:>9}")
    lines.append(f"baseline (sequential generate() + decode()): {baseline['audio_s_per_s']:.2f} audio-s/s, "
                 f"{baseline['requests_per_s']:.2f} req/s")
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
          note="baseline: the same requests through generate() then decode(), one after another")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench", description=__doc__.splitlines()[0])
    p.add_argument("--card", default="moss_tts_local_tiny")
    p.add_argument("--random-weights", action="store_true", help="the release's dimensions with random weights")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="a small run (under a minute on a 2-core CPU)")
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--concurrency", type=int, nargs="+", default=None)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="also draw the sweep (needs the plot extra)")
    args = p.parse_args(argv)
    check_plot(p, args.plot)
    n = args.requests or (8 if args.quick else 48)
    max_frames = args.max_frames or (24 if args.quick else 100)
    levels = args.concurrency or ([1, 4] if args.quick else [1, 4, 16, 64])
    overhead_rows = [1, 16, 64]

    runtime = build_runtime(args)
    requests = workload(n, max_frames=max_frames)
    bar = Bar(n * (1 + 2 * len(levels)) + len(overhead_rows), enabled=not args.no_progress)
    try:
        runtime.submit({**requests[0], "max_frames": 4}).result()  # warm up
        bar.stage("baseline")
        baseline = run_baseline(runtime, requests, tick=bar.tick)
        scenarios = []
        for level in levels:
            for stream in (True, False):
                bar.stage(f"concurrency {level}, stream {stream}")
                s = run_serving(runtime, requests, concurrency=level, stream=stream, tick=bar.tick)
                s["codes_match_baseline"] = all(np.array_equal(a, b) for a, b in zip(s.pop("codes"), baseline["codes"]))
                s["speedup_vs_baseline"] = s["audio_s_per_s"] / baseline["audio_s_per_s"]
                s["peak_memory_mb"] = peak_memory_mb(args.device)
                scenarios.append(s)
        overhead = []
        for rows in overhead_rows:
            bar.stage(f"engine overhead, {rows} rows")
            overhead.append(run_overhead(runtime, rows, frames=50))
            bar.tick()
    finally:
        bar.close()
        runtime.close()
    baseline.pop("codes")
    print(table(scenarios, baseline))
    for o in overhead:
        print(f"engine overhead at {o['rows']:>2} rows: {o['us_per_step']:8.0f} us per step, {o['us_per_row']:7.0f} us per row "
              f"(instant experts; {o['mean_rows_per_step']:.1f} rows per step on average)")
    report = {"bench": "v2.serving", "card": runtime.card.name, "random_weights": args.random_weights,
              "quick": args.quick, "requests": n, "max_frames": max_frames, "machine": machine(args.device),
              "baseline": baseline, "scenarios": scenarios, "engine_overhead": overhead,
              "rtf_note": "RTF = generation time / audio duration, lower is better"}
    if args.plot:
        plot(report, args.plot)
        report["plot"] = str(Path(args.plot).absolute())
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
