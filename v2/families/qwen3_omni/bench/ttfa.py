"""Time to first audio of Qwen3-Omni at concurrency 1 and N with a long thinker reply, and the proof that the
first audio leaves before the thinker ends (`python -m v2.families.qwen3_omni.bench ttfa`).

Owns: the scenario: a runtime over `--card` (default the seeded `qwen3_omni_tiny`), per concurrency level c
(default 1 and 16) c chat requests submitted at once, each with `max_tokens` `--tokens` (default 120) and a
prompt whose greedy reply runs to that cap (the family has no ignore-eos option; the tiny card's seeded
thinker never picks `<|im_end|>` on these prompts, and each request's reply length is reported and must be at
least `--min-tokens`, default 100); per request, measured where a client sees them (the subscribers' callbacks,
seconds from the submit): the first audio chunk, every text delta (`AddedEvent(loop="thinker")`), the last
one (the thinker's end); the runtime's own `metrics.ttfa_s`; the text tokens delivered before the first audio;
and `first_audio_before_thinker_end` (first audio chunk < last text delta). One JSON line (the table before
it on stderr). The subscriptions are made right after the submit; a subscriber is handed what was made before
it subscribed at that moment, which can only make the first audio look later.
Must not know: model or engine internals (it uses `Runtime.submit_many`, `subscribe`, `subscribe_events`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from v2.bench.threads import keeps_threads

TEXTS = ("Tell me a long story about the sea.", "Explain how a bicycle works.", "Write a poem about winter.",
         "Describe your favourite city.", "What should I cook tonight?", "Why is the sky blue?",
         "Summarise the history of flight.", "Give me ten tips for studying.")


@dataclass
class Seen:
    """What one request's subscribers saw, in seconds from the submit."""

    t0: float
    first_audio: float | None = None
    deltas: list[tuple[float, int]] = field(default_factory=list)  # (time, token count) per text delta
    lock: threading.Lock = field(default_factory=threading.Lock)

    def chunk(self, c: Any) -> None:
        now = time.perf_counter() - self.t0
        with self.lock:
            if self.first_audio is None and c.audio.shape[-1] > 0:
                self.first_audio = now

    def event(self, e: Any) -> None:
        now = time.perf_counter() - self.t0
        if e.loop == "thinker":
            with self.lock:
                self.deltas.append((now, len(e.item.ids)))


def request(i: int, tokens: int, frames: int, speaker: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": [{"role": "user", "content": TEXTS[i % len(TEXTS)]}], "max_tokens": tokens,
                           "max_frames": frames, "seed": i, "stream": True}
    return out | ({"speaker": speaker} if speaker else {})


def level(rt: Any, c: int, tokens: int, frames: int, speaker: str | None) -> dict[str, Any]:
    """c requests at once: per request what its subscribers saw, and the level's medians."""
    reqs = [request(i, tokens, frames, speaker) for i in range(c)]
    t0 = time.perf_counter()
    handles = rt.submit_many(reqs)
    seen = [Seen(t0) for _ in handles]
    for h, s in zip(handles, seen):
        h.subscribe(s.chunk)
        h.subscribe_events(s.event)
    results = [h.result() for h in handles]
    time.sleep(0.2)  # the callbacks of the last items run on the callback thread after the result is set
    rows = []
    for r, s in zip(results, seen):
        if r.error is not None:
            raise RuntimeError(f"a request failed: {r.error}")
        with s.lock:
            end = s.deltas[-1][0] if s.deltas else None
            before = sum(n for t, n in s.deltas if s.first_audio is not None and t < s.first_audio)
        rows.append({"text_tokens": len(r.text_ids or ()), "text_finish_reason": r.text_finish_reason,
                     "frames": int(r.codes.shape[0]), "first_audio_s": s.first_audio, "thinker_end_s": end,
                     "runtime_ttfa_s": r.metrics.ttfa_s, "total_s": r.metrics.total_s,
                     "text_tokens_before_first_audio": before,
                     "first_audio_before_thinker_end": (s.first_audio is not None and end is not None
                                                        and s.first_audio < end)})
    firsts = [x["first_audio_s"] for x in rows if x["first_audio_s"] is not None]
    ends = [x["thinker_end_s"] for x in rows if x["thinker_end_s"] is not None]
    return {"concurrency": c, "ttfa_s_median": statistics.median(firsts) if firsts else None,
            "ttfa_s_max": max(firsts) if firsts else None,
            "thinker_end_s_median": statistics.median(ends) if ends else None,
            "text_tokens_min": min(x["text_tokens"] for x in rows),
            "first_audio_before_thinker_end_all": all(x["first_audio_before_thinker_end"] for x in rows),
            "requests": rows}


@keeps_threads
def run(card: str, *, tokens: int, frames: int, concurrency: list[int], min_tokens: int,
        speaker: str | None = None, threads: int | None = None, device: str = "cpu") -> dict[str, Any]:
    import torch

    from v2.runtime import Runtime

    if threads:
        torch.set_num_threads(threads)
    load_before = os.getloadavg()
    with Runtime.from_card(card, device=device) as rt:
        rt.submit(request(0, 4, 4, speaker)).result()  # warm-up
        levels = [level(rt, c, tokens, frames, speaker) for c in concurrency]
    short = [(lv["concurrency"], lv["text_tokens_min"]) for lv in levels if lv["text_tokens_min"] < min_tokens]
    return {"card": card, "tokens": tokens, "frames": frames, "min_tokens": min_tokens, "levels": levels,
            "replies_long_enough": not short, "short_replies": short,
            "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}


def table(report: dict[str, Any]) -> str:
    lines = [f"{'c':>3} {'ttfa med s':>10} {'ttfa max s':>10} {'thinker end med s':>17} {'min tokens':>10} "
             f"{'audio first':>11}"]
    for lv in report["levels"]:
        lines.append(f"{lv['concurrency']:>3} {lv['ttfa_s_median']:>10.3f} {lv['ttfa_s_max']:>10.3f} "
                     f"{lv['thinker_end_s_median']:>17.3f} {lv['text_tokens_min']:>10} "
                     f"{str(lv['first_audio_before_thinker_end_all']):>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from v2.bench.__main__ import machine

    p = argparse.ArgumentParser(prog="python -m v2.families.qwen3_omni.bench ttfa", description=__doc__.splitlines()[0])
    p.add_argument("--card", default="qwen3_omni_tiny", help="a Qwen3-Omni card (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=120, help="each reply's max_tokens (default: %(default)s)")
    p.add_argument("--min-tokens", type=int, default=100,
                   help="the reply length every request must reach (default: %(default)s)")
    p.add_argument("--frames", type=int, default=None, help="each reply's max_frames (default: tokens + 8)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16], help="levels (default: 1 16)")
    p.add_argument("--speaker", default=None, help="the voice (default: the card's first)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = p.parse_args(argv)
    for name in ("tokens", "min_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(c < 1 for c in args.concurrency):
        p.error("--concurrency: every level must be >= 1")
    report = run(args.card, tokens=args.tokens, frames=args.frames or args.tokens + 8, concurrency=args.concurrency,
                 min_tokens=min(args.min_tokens, args.tokens), speaker=args.speaker, threads=args.threads)
    print(table(report), file=sys.stderr)
    print(json.dumps({"bench": "v2.qwen3_omni.ttfa", "machine": machine("cpu"), **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
