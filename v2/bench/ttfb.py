"""Time to first byte per response format, for `python -m v2.bench.http`: each format as a client asks for it by
default (streamed), and mp3 with `stream: false` (the whole file) beside it.

Owns: the sweep (the same requests one at a time in every format, the formats' order rotated from one request
to the next so a busy spell on the machine hits them all), its client in a child process (`python -m
v2.bench.ttfb` reads a job as JSON on stdin: per request the time to the response headers, to the first body
byte and to the last, and the body's pieces), and the figures: TTFB p50 and max per format, each format's
p50 less pcm's, and pcm's median gap between body pieces (one chunk's time), which "within a chunk of pcm"
is measured against.
Must not know: the runtime, torch, the server's code.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

FORMATS = ("pcm", "wav", "mp3", "opus", "aac", "flac")
WHOLE = "mp3 (stream: false)"  # the opt-in whole file, for comparison


def _body(request: dict[str, Any], case: str) -> dict[str, Any]:
    body = {"input": request["text"], "seed": request["seed"], "max_frames": request["max_frames"],
            "response_format": case.split()[0]}
    return body | ({"stream": False} if case == WHOLE else {})


def _time_one(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    sent = time.perf_counter()
    first, pieces, size = None, 0, 0
    with client.stream("POST", "/v1/audio/speech", json=body) as r:
        headers = time.perf_counter()
        r.raise_for_status()
        for piece in r.iter_raw():
            if piece:
                first = first if first is not None else time.perf_counter()
                pieces, size = pieces + 1, size + len(piece)
    done = time.perf_counter()
    return {"headers_s": headers - sent, "ttfb_s": (first or done) - sent, "done_s": done - sent,
            "pieces": pieces, "bytes": size}


def run_client(url: str, requests: list[dict[str, Any]], cases: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    with httpx.Client(base_url=url, timeout=600) as client:
        for i, request in enumerate(requests):
            for case in cases[i % len(cases):] + cases[:i % len(cases)]:
                out[case].append(_time_one(client, _body(request, case)))
    return out


def ttfb_sweep(url: str, requests: list[dict[str, Any]], formats: tuple[str, ...] = FORMATS) -> dict[str, Any]:
    """Each format's TTFB over `requests` (one at a time), from a child process."""
    cases = list(dict.fromkeys(("pcm", *formats))) + [WHOLE]
    job = json.dumps({"url": url, "requests": requests, "cases": cases})
    done = subprocess.run([sys.executable, "-m", "v2.bench.ttfb"], input=job, capture_output=True, text=True,
                          timeout=3600, check=True)
    traces: dict[str, list[dict[str, Any]]] = json.loads(done.stdout)
    pcm = traces["pcm"]
    gaps = [(t["done_s"] - t["ttfb_s"]) / (t["pieces"] - 1) for t in pcm if t["pieces"] > 1]
    chunk_s = statistics.median(gaps) if gaps else float("nan")
    pcm_p50 = statistics.median(t["ttfb_s"] for t in pcm)
    rows = {}
    for case, ts in traces.items():
        p50 = statistics.median(t["ttfb_s"] for t in ts)
        rows[case] = {"requests": len(ts), "ttfb_p50_s": p50, "ttfb_max_s": max(t["ttfb_s"] for t in ts),
                      "headers_p50_s": statistics.median(t["headers_s"] for t in ts),
                      "done_p50_s": statistics.median(t["done_s"] for t in ts),
                      "pieces_p50": statistics.median(t["pieces"] for t in ts),
                      "ttfb_p50_minus_pcm_ms": (p50 - pcm_p50) * 1e3,
                      "within_a_chunk_of_pcm": p50 - pcm_p50 <= chunk_s}
    return {"formats": rows, "pcm_chunk_gap_p50_s": chunk_s, "requests_per_format": len(requests)}


def table(sweep: dict[str, Any]) -> str:
    head = f"{'format':>20} {'TTFB p50':>9} {'TTFB max':>9} {'- pcm':>8} {'done p50':>9} {'pieces':>6}"
    lines = [head, "-" * len(head)]
    for case, r in sweep["formats"].items():
        lines.append(f"{case:>20} {r['ttfb_p50_s'] * 1e3:>7.1f}ms {r['ttfb_max_s'] * 1e3:>7.1f}ms "
                     f"{r['ttfb_p50_minus_pcm_ms']:>6.1f}ms {r['done_p50_s'] * 1e3:>7.1f}ms {r['pieces_p50']:>6.0f}")
    lines.append(f"TTFB: request sent -> first body byte, one request at a time, {sweep['requests_per_format']} per "
                 f"format; pcm's median gap between pieces (one chunk): {sweep['pcm_chunk_gap_p50_s'] * 1e3:.1f} ms.")
    return "\n".join(lines)


def main() -> int:
    job = json.load(sys.stdin)
    print(json.dumps(run_client(job["url"], job["requests"], job["cases"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
