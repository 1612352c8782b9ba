"""`python -m v2.bench.opentext`: text fed as an LLM writes it (open requests) against the same text submitted
whole; one JSON line last.

Owns: a seeded reply of a few sentences, fed to `Runtime.open` in pieces of 1-5 words at a steady token rate
(`--tokens-per-s`, a word counted as 4/3 tokens), each session on its own thread, `--concurrency` sessions
at once; the same text through `submit` at once, under the same frame budget (`--frames` per sentence: per
segment where the family speaks a segment per sentence, else over the whole reply up to the card's cap,
opentext_budget.py); a session whose request ends before its text does stops feeding and is counted. Per session: the time from the first complete sentence's
arrival (the piece holding its end mark and the space after it was fed) to its first audio; the time from
the first piece to the first audio (whole: from the moment the whole reply would have been written, i.e.
the last piece's time, plus its own time to first audio); a player that starts at the first chunk and
plays in real time (underruns: times it ran dry before the request ended, and the seconds it waited, and
the audio it still held when the first chunk of each new segment came; the same player on the whole text's
stream: the gap a segment switch would open
is heard only if that reaches 0); the time per frame of the chunks that hold a segment switch against the
other chunks' (the switch's cost: its prefill and the steps without a frame). p50 / p99 over the sessions.
Then barge-in over the speech stream at each concurrency (opentext_cancel.py, unless `--no-cancel`): the
time from `input.cancel` to its acknowledgement, to the utterance's last byte and to the runtime holding
nothing.
Must not know: the engine's internals (it reads chunks, marks and results only).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from typing import Any

import numpy as np

from v2.bench.__main__ import machine
from v2.bench.opentext_budget import budget
from v2.card import DEFAULT_CARD

WORDS = ("the quiet river runs past old stone houses while children play near the bridge and a small dog "
         "waits by the gate for someone to come home before the rain").split()


def reply(sentences: int, seed: int) -> str:
    """A reply of `sentences` sentences of 8-14 words."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 14))]
        out.append(" ".join(words).capitalize() + rng.choice(".!?"))
    return " ".join(out)


def pieces(text: str, seed: int) -> list[str]:
    """1-5 words a piece, each with the space after it."""
    rng, words, out = random.Random(seed), text.split(" "), []
    while words:
        n = rng.randint(1, 5)
        out.append(" ".join(words[:n]) + (" " if len(words) > n else ""))
        words = words[n:]
    return out


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def player(arrivals: list[tuple[float, float]]) -> tuple[int, float]:
    """(underruns, seconds waited) of a player that starts at the first chunk and plays in real time;
    `arrivals`: (time, seconds of audio) per chunk."""
    if not arrivals:
        return 0, 0.0
    clock, ahead, underruns, waited = arrivals[0][0], 0.0, 0, 0.0
    for t, seconds in arrivals:
        played = t - clock
        if played > ahead and ahead > 0:  # ran dry before this chunk came
            underruns += 1
            waited += played - ahead
            clock = t - ahead  # playback resumes now, from where it stopped
        ahead += seconds
    return underruns, waited


def session(rt: Any, text: str, seed: int, args: argparse.Namespace, out: dict[str, Any]) -> None:
    request = {"seed": seed, **args.budget.request(), "stream": True}
    parts, per_token = pieces(text, seed), 1.0 / args.tokens_per_s
    first_end = min(text.index(next(c for c in text if c in ".!?")) + 2, len(text))  # the end mark, the space after
    rate, fps = rt.sample_rate, rt.frame_rate
    arrivals: list[tuple[float, float]] = []
    boundary: list[float] = []  # seconds per frame of each chunk holding a new segment's first frame
    inner: list[float] = []
    held: list[float] = []      # audio the player still had when each new segment's first chunk came
    h = rt.open(request)
    done = threading.Event()

    def read() -> None:
        frames, received = 0, 0.0
        for chunk in h:
            now = time.perf_counter()
            if arrivals and chunk.frames:
                starts = [m.frame_start for m in h.marks()]
                new = any(frames <= s < frames + chunk.frames and s > 0 for s in starts)
                (boundary if new else inner).append((now - arrivals[-1][0]) / chunk.frames)
                if new:
                    held.append(received - (now - arrivals[0][0]))
            arrivals.append((now, chunk.audio.shape[1] / rate))
            frames += chunk.frames
            received += chunk.audio.shape[1] / rate
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start, fed, sentence_at, cut = time.perf_counter(), 0, None, False
    for p in parts:
        time.sleep(len(p.split()) * 4 / 3 * per_token)
        try:
            h.feed(p)
        except RuntimeError:  # the request ended (its frame cap) before its text did: the rest is not spoken
            cut = True
            break
        fed += len(p)
        if sentence_at is None and fed >= first_end:
            sentence_at = time.perf_counter()
    written = time.perf_counter()
    if not cut:
        try:
            h.end_text()
        except RuntimeError:
            cut = True
    result = h.result(600)
    done.wait(60)
    first = arrivals[0][0] if arrivals else None
    underruns, waited = player(arrivals)
    out.update(first_sentence_to_audio_s=None if first is None or sentence_at is None else first - sentence_at,
               first_piece_to_audio_s=None if first is None else first - start, written_s=written - start,
               underruns=underruns, waited_s=waited, boundary_intervals_s=boundary, inner_intervals_s=inner, held_s=held,
               segments=len(result.segments), audio_s=result.audio.shape[1] / rate, finish=result.finish_reason,
               frames_per_s=fps, text_cut=cut)


def whole(rt: Any, text: str, seed: int, args: argparse.Namespace, written_s: float, out: dict[str, Any]) -> None:
    start = time.perf_counter()
    h = rt.submit({"text": text, "seed": seed, **args.budget.request(), "stream": True})
    arrivals = [(time.perf_counter(), chunk.audio.shape[1] / rt.sample_rate) for chunk in h]
    h.result(600)
    first = arrivals[0][0] if arrivals else None
    underruns, waited = player(arrivals)
    out.update(ttfa_s=None if first is None else first - start, underruns=underruns, waited_s=waited,
               first_piece_to_audio_s=None if first is None else written_s + first - start)


def sweep(rt: Any, concurrency: int, args: argparse.Namespace, offset: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`concurrency` sessions fed at once, then the same texts submitted whole at once."""
    texts = [reply(args.sentences, args.seed + offset + i) for i in range(concurrency)]
    opened: list[dict[str, Any]] = [{} for _ in texts]
    threads = [threading.Thread(target=session, args=(rt, t, args.seed + offset + i, args, opened[i]))
               for i, t in enumerate(texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = float(np.mean([o["written_s"] for o in opened]))
    plain: list[dict[str, Any]] = [{} for _ in texts]
    threads = [threading.Thread(target=whole, args=(rt, t, args.seed + offset + i, args, written, plain[i]))
               for i, t in enumerate(texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return opened, plain


def summary(opened: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict[str, Any]:
    written = float(np.mean([o["written_s"] for o in opened]))
    key = lambda rows, k: [r[k] for r in rows if r.get(k) is not None]  # noqa: E731
    boundary = [x for o in opened for x in o["boundary_intervals_s"]]
    inner = [x for o in opened for x in o["inner_intervals_s"]]
    out: dict[str, Any] = {"sessions": len(opened), "written_s": written,
                           "segments_per_session": float(np.mean([o["segments"] for o in opened])),
                           "audio_s_per_session": float(np.mean([o["audio_s"] for o in opened])),
                           "underruns": sum(o["underruns"] for o in opened),
                           "underrun_wait_s": sum(o["waited_s"] for o in opened),
                           "whole_underruns": sum(w["underruns"] for w in plain),
                           "whole_underrun_wait_s": sum(w["waited_s"] for w in plain),
                           "finishes": sorted({o["finish"] for o in opened}),
                           "text_cut_sessions": sum(o["text_cut"] for o in opened)}
    for name, xs in (("first_sentence_to_audio", key(opened, "first_sentence_to_audio_s")),
                     ("open_first_piece_to_audio", key(opened, "first_piece_to_audio_s")),
                     ("whole_ttfa", key(plain, "ttfa_s")),
                     ("whole_first_piece_to_audio", key(plain, "first_piece_to_audio_s")),
                     ("switch_chunk_per_frame", boundary), ("other_chunk_per_frame", inner)):
        out[f"{name}_p50_s"], out[f"{name}_p99_s"] = pct(xs, 50), pct(xs, 99)
    held = [x for o in opened for x in o["held_s"]]
    out["audio_held_at_switch_min_s"], out["audio_held_at_switch_p50_s"] = (min(held) if held else None), pct(held, 50)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.opentext", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the card's)")
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 16],
                   help="sessions at once, one sweep each (default: 1 16)")
    p.add_argument("--rounds", type=int, default=3,
                   help="sweeps at concurrency 1 (more sessions for its p99) (default: %(default)s)")
    p.add_argument("--sentences", type=int, default=5, help="sentences in each session's reply (default: %(default)s)")
    p.add_argument("--frames", type=int, default=30,
                   help="frames each sentence speaks (min = max: a fixed workload); a family that speaks an open "
                        "request as one sequence gets frames x sentences for the whole reply, at most the card's cap "
                        "(default: %(default)s)")
    p.add_argument("--tokens-per-s", type=float, default=30.0,
                   help="the pace the text is written at, as an LLM streams it (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds the replies' text, their pieces and the sampling (default: %(default)s)")
    p.add_argument("--no-cancel", action="store_true", help="skip the barge-in timing over the speech stream")
    args = p.parse_args(argv)
    from v2.runtime import Runtime

    rt = Runtime.from_card(args.card, device=args.device)
    try:
        warm = rt.submit({"text": "Warm up.", "max_frames": 4})
        warm.result(120)
        fed = [reply(args.sentences, args.seed + 100 * r + i) for c in args.concurrency  # every session's reply
               for r in range(args.rounds if c == 1 else 1) for i in range(c)]
        plan = budget(rt, args.frames, args.sentences, max(len(t.encode()) for t in fed))
        args.budget = plan
        result: dict[str, Any] = {"bench": "v2.opentext", "card": args.card, "machine": machine(str(rt.family.device)),
                                  "tokens_per_s": args.tokens_per_s, "sentences": args.sentences,
                                  "frames_per_sentence": args.frames, **plan.fields()}
        for c in args.concurrency:
            opened, plain = [], []
            for r in range(args.rounds if c == 1 else 1):
                o, w = sweep(rt, c, args, offset=100 * r)
                opened += o
                plain += w
            merged = result[f"c{c}"] = summary(opened, plain)
            print(f"concurrency {c}: first sentence -> audio p50 {merged['first_sentence_to_audio_p50_s'] * 1e3:.0f} ms "
                  f"(p99 {merged['first_sentence_to_audio_p99_s'] * 1e3:.0f}); whole text TTFA p50 "
                  f"{merged['whole_ttfa_p50_s'] * 1e3:.0f} ms; first piece -> audio {merged['open_first_piece_to_audio_p50_s']:.2f} s "
                  f"open vs {merged['whole_first_piece_to_audio_p50_s']:.2f} s whole; underruns {merged['underruns']}",
                  file=sys.stderr)
            if merged["text_cut_sessions"]:
                print(f"concurrency {c}: {merged['text_cut_sessions']} of {merged['sessions']} requests reached their "
                      f"frame cap ({plan.frames}) before their text ended (the rest of it was not fed)", file=sys.stderr)
            if not args.no_cancel:
                from v2.bench.opentext_cancel import cancel_sweep

                texts = [reply(args.sentences, args.seed + 500 + i) for i in range(c)]
                cut = result[f"cancel_c{c}"] = cancel_sweep(rt, c, texts, seed=args.seed, frames=plan.frames,
                                                          floor=plan.floor)
                print(f"concurrency {c}: input.cancel -> acknowledgement p50 {cut['cancel_to_ack_p50_s'] * 1e3:.0f} ms "
                      f"(p99 {cut['cancel_to_ack_p99_s'] * 1e3:.0f}), -> last byte p50 "
                      f"{cut['cancel_to_last_byte_p50_s'] * 1e3:.0f} ms (p99 {cut['cancel_to_last_byte_p99_s'] * 1e3:.0f}); "
                      f"runtime idle {cut['cancel_to_freed_s'] * 1e3:.0f} ms after the last cancel; "
                      f"audio after the acknowledgement: {cut['anything_after_ack']}", file=sys.stderr)
    finally:
        rt.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
