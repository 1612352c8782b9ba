"""`python -m v2.bench.http`: what the HTTP server costs, measured against the same workload in-process, in one
run: audio-s/s and TTFA p50/p99 at concurrency 1, 16 and 64, both ways, then time to first byte per response
format (v2.bench.ttfb); one JSON line last.

Owns: one runtime serving both ways (in-process through `run_serving`, and over HTTP through the server on a
free loopback port in this process), the HTTP clients in a child process (v2.bench.http_client: streaming
wav, TTFA taken at the first audio byte past the header), the comparison (throughput cost, TTFA added) and
the report, and its picture (`--plot FILE.png`: audio-s/s and TTFA against concurrency, both ways). Goal:
HTTP costs <= 5% of throughput and <= 10 ms of TTFA p50.
Must not know: engine or model internals, the server's routes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np
import torch
from prometheus_client.parser import text_string_to_metric_families

from v2.bench.__main__ import build_runtime, check_plot, machine
from v2.bench.metrics import percentile
from v2.bench.serving import run_serving, workload
from v2.bench.ttfb import table as ttfb_table
from v2.bench.ttfb import ttfb_sweep
from v2.card import DEFAULT_CARD
from v2.server import ServerConfig, create_app
from v2.server.serve import ThreadedServer


def run_http(url: str, requests: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """The requests through the server by streaming clients in a child process. Also splits the mean TTFA
    into the runtime's own (submit -> first chunk, from the server's metrics) and the rest (HTTP both ways,
    parsing, the worker-thread hop, encoding)."""
    job = json.dumps({"url": url, "requests": requests, "concurrency": concurrency})
    before = _runtime_ttfa(url)
    done = subprocess.run([sys.executable, "-m", "v2.bench.http_client"], input=job, capture_output=True, text=True,
                          timeout=3600, check=True)
    after = _runtime_ttfa(url)
    out = json.loads(done.stdout)
    traces, wall = out["traces"], out["wall_s"]
    audio = sum(t["audio_s"] for t in traces)
    ttfa = [t["first"] - t["sent"] for t in traces if t["first"] is not None]
    runtime_ttfa = (after[0] - before[0]) / max(1.0, after[1] - before[1])
    return {"concurrency": concurrency, "requests": len(traces), "wall_s": wall, "audio_s": audio,
            "audio_s_per_s": audio / wall, "ttfa_p50_s": percentile(ttfa, 50), "ttfa_p99_s": percentile(ttfa, 99),
            "ttfa_mean_s": float(np.mean(ttfa)), "runtime_ttfa_mean_s": runtime_ttfa}


def _runtime_ttfa(url: str) -> tuple[float, float]:
    """(sum, count) of the server's `v2_ttfa_seconds` histogram."""
    text = httpx.get(url + "/metrics", timeout=30).text
    found = {s.name: s.value for f in text_string_to_metric_families(text) if f.name == "v2_ttfa_seconds"
             for s in f.samples if s.name in ("v2_ttfa_seconds_sum", "v2_ttfa_seconds_count")}
    return found.get("v2_ttfa_seconds_sum", 0.0), found.get("v2_ttfa_seconds_count", 0.0)


KEYS = ("requests", "wall_s", "audio_s", "audio_s_per_s", "ttfa_p50_s", "ttfa_p99_s", "cpu_s_per_audio_s")


HTTP_THREADS = ("v2-http", "AnyIO worker thread")  # uvicorn's event loop; submit and encoders


def with_cpu(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A run's figures plus CPU seconds per second of audio: this whole process (engine, server, in-process
    clients), the server's own threads alone, and the child clients (HTTP). The server threads' share is the
    HTTP layer's cost that a busy machine does not blur."""
    own, children, server = time.process_time(), _children_cpu(), _threads_cpu(HTTP_THREADS)
    figures = run()
    audio = figures["audio_s"]
    figures["cpu_s_per_audio_s"] = (time.process_time() - own) / audio
    figures["server_cpu_s_per_audio_s"] = (_threads_cpu(HTTP_THREADS) - server) / audio
    figures["client_cpu_s_per_audio_s"] = (_children_cpu() - children) / audio
    return figures


def _threads_cpu(prefixes: tuple[str, ...]) -> float:
    """CPU seconds so far of this process's threads whose names start with one of `prefixes` (Linux /proc;
    0 elsewhere). A worker thread that ends between two readings takes its seconds with it."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for thread in threading.enumerate():
        if thread.name.startswith(prefixes) and thread.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over repeated runs (the machine may be shared: one run can be unlucky)."""
    extra = ("server_cpu_s_per_audio_s", "client_cpu_s_per_audio_s", "ttfa_mean_s", "runtime_ttfa_mean_s")
    out: dict[str, Any] = {k: float(np.median([r[k] for r in runs])) for k in (*KEYS, *extra) if k in runs[0]}
    return out | {"requests": runs[0]["requests"], "runs": len(runs)}


def compare(level: int, inproc: dict[str, Any], http: dict[str, Any]) -> dict[str, Any]:
    return {"concurrency": level, "in_process": inproc, "http": http,
            "throughput_cost": 1 - http["audio_s_per_s"] / inproc["audio_s_per_s"],
            "ttfa_p50_added_ms": (http["ttfa_p50_s"] - inproc["ttfa_p50_s"]) * 1e3,
            "ttfa_p99_added_ms": (http["ttfa_p99_s"] - inproc["ttfa_p99_s"]) * 1e3,
            "cpu_added_per_audio_s": http["cpu_s_per_audio_s"] - inproc["cpu_s_per_audio_s"],
            "ttfa_mean_outside_runtime_ms": (http["ttfa_mean_s"] - http["runtime_ttfa_mean_s"]) * 1e3,
            "same_audio_seconds": abs(http["audio_s"] - inproc["audio_s"]) < 1e-6}  # same seeds, same lengths


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'conc':>4} {'reqs':>4} {'way':>10} {'audio-s/s':>9} {'TTFA p50':>9} {'TTFA p99':>9} {'CPU/aud-s':>9}"
            f" {'server':>7}   {'HTTP cost':>9} {'+TTFA p50':>9} {'HTTP part':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        for way in ("in_process", "http"):
            f = r[way]
            extra = (f"   {r['throughput_cost'] * 100:>8.1f}% {r['ttfa_p50_added_ms']:>7.1f}ms "
                     f"{r['ttfa_mean_outside_runtime_ms']:>7.1f}ms" if way == "http" else "")
            lines.append(f"{r['concurrency']:>4} {f['requests']:>4} {way:>10} {f['audio_s_per_s']:>9.2f} "
                         f"{f['ttfa_p50_s'] * 1e3:>7.1f}ms {f['ttfa_p99_s'] * 1e3:>7.1f}ms "
                         f"{f['cpu_s_per_audio_s']:>9.3f} {f['server_cpu_s_per_audio_s']:>7.4f}{extra}")
    lines.append("Medians of alternating runs. HTTP cost = 1 - HTTP audio-s/s / in-process audio-s/s (goal <= 5%); "
                 "+TTFA p50 goal <= 10 ms.\nCPU/aud-s: CPU seconds of the serving process (engine and server) per "
                 "second of audio; server: of that, the HTTP server's threads (event loop, workers); the HTTP "
                 "clients run in a child process and are in neither.\nHTTP part: the mean TTFA at the client less "
                 "the runtime's own mean TTFA for the same requests (submit -> first chunk).")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], card: str, path: str) -> None:
    """audio-s/s and TTFA (p50, p99) against concurrency, in-process and over HTTP."""
    from v2.bench.plot import Panel, Series, sweep

    levels = [r["concurrency"] for r in rows]
    ways = (("in_process", "in-process"), ("http", "HTTP"))
    throughput = Panel("throughput", "audio seconds per second",
                       [Series(name, [r[way]["audio_s_per_s"] for r in rows]) for way, name in ways])
    ttfa = Panel("time to first audio", "ms", [Series(f"{name} {q}", [r[way][f"ttfa_{q}_s"] * 1e3 for r in rows],
                                                      dashed=q == "p99") for way, name in ways for q in ("p50", "p99")])
    sweep(path, f"HTTP against in-process, {card} (streamed wav; medians of alternating runs)",
          "concurrency (requests in flight)", levels, [throughput, ttfa])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.http", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--random-weights", action="store_true", help="the release's dimensions with random weights")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu, cuda or cuda:N (default: cuda when available, else cpu; here %(default)s)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64],
                   help="requests in flight, one level each (default: 1 16 64)")
    p.add_argument("--requests", type=int, default=0,
                   help="requests per level; 0: max(8, 2 x concurrency) (default: %(default)s)")
    p.add_argument("--max-frames", type=int, default=40, help="frames each request may speak (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per way and level, alternating; medians reported (default: %(default)s)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the sweep (needs the plot extra; default: no picture)")
    p.add_argument("--ttfb-requests", type=int, default=8,
                   help="requests per format in the TTFB sweep (0: no sweep) (default: %(default)s)")
    p.add_argument("--ttfb-only", action="store_true", help="only the per-format TTFB sweep")
    args = p.parse_args(argv)
    check_plot(p, args.plot)
    runtime = build_runtime(args, p)
    load_before = os.getloadavg()[0]
    rows, sweep = [], None
    try:
        app = create_app(runtime, ServerConfig.for_card(runtime.card.name))
        with ThreadedServer(app) as server:
            warm = workload(2, seed=999, max_frames=8, runtime=runtime)
            run_serving(runtime, warm, concurrency=2, stream=True)
            run_http(server.url, warm, 2)
            for level in [] if args.ttfb_only else args.concurrency:
                n = args.requests or max(8, 2 * level)
                requests = workload(n, seed=level, max_frames=args.max_frames, runtime=runtime)
                inproc, http = [], []
                for i in range(args.repeat):  # alternating, so a busy spell on the machine hits both ways
                    print(f"concurrency {level}: {n} requests in-process, then over HTTP ({i + 1}/{args.repeat})",
                          file=sys.stderr, flush=True)
                    inproc.append(with_cpu(lambda: run_serving(runtime, requests, concurrency=level, stream=True)))
                    http.append(with_cpu(lambda: run_http(server.url, requests, level)))
                rows.append(compare(level, median_of(inproc), median_of(http)))
            if args.ttfb_requests:
                print(f"TTFB per format: {args.ttfb_requests} requests each", file=sys.stderr, flush=True)
                sweep = ttfb_sweep(server.url, workload(args.ttfb_requests, seed=7, max_frames=args.max_frames,
                                                        runtime=runtime))
    finally:
        runtime.close()
    print("\n\n".join(([table(rows)] if rows else []) + ([ttfb_table(sweep)] if sweep else [])))
    report = {"bench": "v2.http", "card": runtime.card.name, "random_weights": args.random_weights,
              "max_frames": args.max_frames, "format": "wav, streamed", "machine": machine(args.device),
              "load_avg_1min": {"before": load_before, "after": os.getloadavg()[0]},
              "levels": rows, "goal": {"throughput_cost_max": 0.05, "ttfa_p50_added_ms_max": 10.0},
              "ttfb_by_format": sweep}
    if args.plot and rows:
        plot(rows, runtime.card.name, args.plot)
        report["plot"] = str(Path(args.plot).absolute())
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
