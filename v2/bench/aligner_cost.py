"""What word timestamps cost the serving path: `python -m v2.bench --aligner CARD [--paired N]`.

Owns: the aligned workload (every request asks for `timestamps: "word"`), the paired scenario (the same
requests on a runtime without the aligner, then on the runtime with it, `repeat` times alternating, so a busy
spell on a shared machine hits both ways; `--paired-one-runtime`: the plain requests on the aligned runtime
itself), the cost row (each way's median audio-s/s, TTFA p50 / p99 and CPU seconds per audio second; the drop
with the aligner, the goal a drop of at most 10 %; the aligner's launches per run and spans per launch) and its
table.
Must not know: the aligner's internals, any family, the engine beyond `run_serving`'s figures.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from v2.bench.serving import run_serving
from v2.runtime import Runtime

GOAL_DROP = 0.10  # neither audio-s/s nor TTFA may get worse by more than this with word timestamps
WORDS = "word"


def with_words(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same requests, each asking for word timestamps."""
    return [{**r, "timestamps": WORDS} for r in requests]


def _align_counts(runtime: Runtime) -> tuple[int, int]:
    """The aligner's work kinds (`<name>_align`) so far: (launches, rows), a row one span of a request's audio."""
    kinds = runtime.stats()["kinds"]
    return (sum(int(v.get("calls", 0)) for k, v in kinds.items() if k.endswith("_align")),
            sum(int(v.get("rows", 0)) for k, v in kinds.items() if k.endswith("_align")))


def _timed(runtime: Runtime, requests: list[dict[str, Any]], concurrency: int, stream: bool,
           tick: Callable[[], None]) -> dict[str, Any]:
    cpu = time.process_time()
    calls, rows = _align_counts(runtime)
    s = run_serving(runtime, requests, concurrency=concurrency, stream=stream, tick=tick)
    s["cpu_s_per_audio_s"] = (time.process_time() - cpu) / s["audio_s"] if s["audio_s"] > 0 else float("nan")
    after = _align_counts(runtime)
    s["align_calls"], s["align_rows"] = after[0] - calls, after[1] - rows
    return s


def paired(plain: Runtime, aligned: Runtime, requests: list[dict[str, Any]], *, concurrency: int, stream: bool,
           repeat: int, tick: Callable[[], None] = lambda: None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first aligned run's full figures, its codes kept, and the cost row): `repeat` alternations of the plain
    requests on `plain` and the same requests with word timestamps on `aligned`. `plain` is a runtime without the
    aligner (what serving with it costs), or `aligned` itself (what asking for words costs, one runtime's memory:
    the aligner's added loop idles for a request that does not ask)."""
    words = with_words(requests)
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "words": []}
    for _ in range(repeat):
        runs["plain"].append(_timed(plain, requests, concurrency, stream, tick))
        runs["words"].append(_timed(aligned, words, concurrency, stream, tick))
    first = runs["words"][0]
    same_codes = all(all(np.array_equal(a, b) for a, b in zip(p["codes"], w["codes"]))
                     for p, w in zip(runs["plain"], runs["words"]))
    for way in runs.values():
        for s in way:
            if s is not first:
                s.pop("codes", None)
    row = cost_row(concurrency, stream, runs["plain"], runs["words"], same_codes)
    row["plain_on"] = "the aligned runtime" if plain is aligned else "a runtime without the aligner"
    return first, row


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def cost_row(concurrency: int, stream: bool, plain: list[dict[str, Any]], words: list[dict[str, Any]],
             same_codes: bool) -> dict[str, Any]:
    keys = ("audio_s_per_s", "ttfa_p50_s", "ttfa_p99_s", "cpu_s_per_audio_s", "wall_s")
    ways = {name: {k: _median(runs, k) for k in keys} | {"runs": len(runs)}
            for name, runs in (("plain", plain), ("words", words))}
    p, w = ways["plain"], ways["words"]
    aligner_s = [r.get("kind_seconds", {}).get(k, 0.0) for r in words for k in r.get("kind_seconds", {})
                 if k.endswith("_align")]
    drop = 1 - w["audio_s_per_s"] / p["audio_s_per_s"]
    rise = w["ttfa_p50_s"] / p["ttfa_p50_s"] - 1 if p["ttfa_p50_s"] > 0 else float("nan")
    row: dict[str, Any] = {"concurrency": concurrency, "stream": stream, **ways, "throughput_drop": drop,
           "ttfa_p50_rise": rise,
           "cpu_rise": w["cpu_s_per_audio_s"] / p["cpu_s_per_audio_s"] - 1,
           "aligner_engine_s_per_run": float(sum(aligner_s)) / len(words),
           # the aligner's launches per run and spans per launch: how well its forwards batch across requests
           "aligner_calls_per_run": sum(r.get("align_calls", 0) for r in words) / len(words),
           "aligner_rows_per_call": (sum(r.get("align_rows", 0) for r in words)
                                     / max(1, sum(r.get("align_calls", 0) for r in words))),
           "same_codes": same_codes, "load_avg_1min": os.getloadavg()[0]}
    row["within_goal"] = bool(drop <= GOAL_DROP and rise <= GOAL_DROP)
    return row


def table(rows: list[dict[str, Any]], aligner: str) -> str:
    head = (f"{'conc':>4} {'stream':>6} {'audio-s/s':>9} {'+words':>8} {'drop':>6}   {'TTFA p50':>9} {'+words':>9} "
            f"{'rise':>6}   {'CPU/aud-s':>9} {'+words':>7}  {'align s':>7} {'spans/fwd':>9}")
    lines = [f"word timestamps ({aligner}): medians of alternating runs, without then with", head, "-" * len(head)]
    for r in rows:
        p, w = r["plain"], r["words"]
        lines.append(f"{r['concurrency']:>4} {str(r['stream']):>6} {p['audio_s_per_s']:>9.2f} {w['audio_s_per_s']:>8.2f} "
                     f"{r['throughput_drop'] * 100:>5.1f}%   {p['ttfa_p50_s'] * 1e3:>7.1f}ms {w['ttfa_p50_s'] * 1e3:>7.1f}ms "
                     f"{r['ttfa_p50_rise'] * 100:>5.1f}%   {p['cpu_s_per_audio_s']:>9.3f} {w['cpu_s_per_audio_s']:>7.3f}  "
                     f"{r['aligner_engine_s_per_run']:>7.2f} {r['aligner_rows_per_call']:>9.1f}")
    lines.append(f"goal: audio-s/s drop and TTFA p50 rise each <= {GOAL_DROP:.0%}; align s: engine seconds in the "
                 "aligner's work kind per run; spans/fwd: spans aligned per forward; CPU/aud-s: this process's CPU "
                 "seconds per audio second (load-robust).")
    if rows:
        lines.append(f"without: {rows[0]['plain_on']}")
    return "\n".join(lines)
