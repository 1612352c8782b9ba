"""`python -m v2.families.moss_tts_local.bench.encode`: reference-audio encode throughput, one at a time vs
batched, and the time to
first audio of cloned requests through the runtime; one JSON line last.

Owns: building the codec encoder (from a codec checkpoint, or the card's), a seeded set of references of
mixed lengths, timing their encoding one after another (batch 1) and in one padded batch, one long
reference whole vs in chunks (`encode_chunk`, what the engine runs a step at a time), their preparation
(16 kHz mono samples -> soxr -> stereo at the codec rate, level-set; no file decoding), and TTFA of
streaming requests that carry reference audio vs the same requests with the references' codes, at
concurrency 1 and 16. Throughput figures are seconds of reference audio per second of wall time.
Must not know: the engine's internals, scheduling.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.__main__ import machine
from v2.bench.threads import keeps_threads
from v2.card import build_encoder as build_card_encoder
from v2.card import load_card
from v2.families.moss_tts_local.card import MossCard
from v2.models.moss_codec import MossAudioEncoder, prepare_reference


def best_seconds(fn: Callable[[], Any], iters: int, device: torch.device) -> float:
    """The fastest of `iters` timed calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def chunk_seconds(encoder: MossAudioEncoder, audio: torch.Tensor, chunk_frames: int, device: torch.device) -> list[float]:
    """Wall time of each `encode_chunk` call that encodes audio [1, channels, S] `chunk_frames` at a time."""
    state = encoder.allocate_state(1)
    step = chunk_frames * encoder.cfg.hop
    times = []
    for start in range(0, audio.shape[2] // step * step, step):
        begin = time.perf_counter()
        encoder.encode_chunk(torch.tensor([0]), audio[:, :, start : start + step], state=state)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - begin)
    return times


def build_encoder(card_name: str, checkpoint: str | None, device: torch.device) -> tuple[MossAudioEncoder, str]:
    card = load_card(card_name)
    if not isinstance(card, MossCard):
        raise SystemExit(f"--card {card_name}: not a card of this family ({card.family!r})")
    source = checkpoint or card.experts.vocoder.checkpoint
    return build_card_encoder(card, checkpoint=checkpoint, device=device), f"card {card.name} ({source})"


def cloned_ttfa(card_name: str, refs: list[np.ndarray], rate: int, concurrency: int, frames: int) -> dict[str, float]:
    """TTFA p50 / max (s) of `concurrency` streaming requests each carrying one reference recording, and of the
    same requests given the references' codes instead (no encode): the difference is what cloning costs."""
    from v2.runtime import Runtime

    with tempfile.TemporaryDirectory() as voices, Runtime.from_card(card_name, voices_dir=voices) as rt:
        rt.submit({"text": "warm up", "max_frames": 2, "reference_audio": (refs[0], rate)}).result(300)
        picks = [refs[i % len(refs)] for i in range(concurrency)]
        codes = [rt.encode_audio((r, rate)) for r in picks]
        out = {}
        for kind, fields in (("audio", [{"reference_audio": (r, rate)} for r in picks]),
                             ("codes", [{"reference_codes": c} for c in codes])):
            handles = rt.submit_many([{"text": f"Cloned voice number {i}.", "seed": i, "stream": True,
                                       "max_frames": frames, "min_frames": frames, **f} for i, f in enumerate(fields)])
            ttfa = sorted(h.result(600).metrics.ttfa_s or float("nan") for h in handles)
            out[f"{kind}_ttfa_p50_s"], out[f"{kind}_ttfa_max_s"] = ttfa[len(ttfa) // 2], ttfa[-1]
        return out


def references(count: int, shortest: float, longest: float, rate: int) -> list[np.ndarray]:
    """`count` seeded stereo signals [2, n] at `rate`, lengths spread evenly over [shortest, longest] seconds."""
    gen = np.random.default_rng(0)
    spans = np.linspace(shortest, longest, count)
    return [(0.1 * gen.standard_normal((2, int(s * rate)))).astype(np.float32) for s in spans]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.moss_tts_local.bench.encode",
                                description=__doc__.splitlines()[0])
    p.add_argument("--card", default="moss_tts_local_tiny", help="card whose codec is encoded with")
    p.add_argument("--checkpoint", default=None, help="a codec checkpoint directory instead of the card's codec")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8, help="references per batched call")
    p.add_argument("--seconds", type=float, nargs=2, default=[3.0, 10.0], metavar=("SHORTEST", "LONGEST"))
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--long-seconds", type=float, default=30.0, help="one long reference: whole vs in chunks")
    p.add_argument("--chunk-frames", type=int, default=25)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the card's runtime setting)")
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 16], help="cloned requests at once (runtime)")
    p.add_argument("--reference-seconds", type=float, default=5.0, help="each cloned request's reference")
    p.add_argument("--frames", type=int, default=20, help="frames each cloned request speaks")
    args = p.parse_args(argv)
    threads = args.threads or load_card(args.card).runtime.cpu_threads
    if threads:
        torch.set_num_threads(threads)
    print(json.dumps(run(args)))
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    encoder, source = build_encoder(args.card, args.checkpoint, device)
    rate = encoder.sample_rate
    shortest, longest = args.seconds
    refs = references(args.batch, shortest, longest, rate)
    audio_seconds = sum(r.shape[1] for r in refs) / rate
    lengths = [r.shape[1] for r in refs]
    padded = torch.zeros(len(refs), 2, max(lengths))
    for i, r in enumerate(refs):
        padded[i, :, : r.shape[1]] = torch.from_numpy(r)
    alone_inputs = [torch.from_numpy(r)[None].to(device) for r in refs]
    padded = padded.to(device)

    def one_at_a_time() -> None:
        for x in alone_inputs:
            encoder.encode(x)

    alone_s = best_seconds(one_at_a_time, args.iters, device)
    batched_s = best_seconds(lambda: encoder.encode(padded, lengths), args.iters, device)
    long_ref = torch.from_numpy(references(1, args.long_seconds, args.long_seconds, rate)[0])[None].to(device)
    long_whole_s = best_seconds(lambda: encoder.encode(long_ref), args.iters, device)
    chunk_seconds(encoder, long_ref, args.chunk_frames, device)  # warm-up
    chunks = chunk_seconds(encoder, long_ref, args.chunk_frames, device)
    mono_16k = [r[0, :: rate // 16000].copy() for r in refs] if rate % 16000 == 0 else [r[0] for r in refs]
    prep_rate = 16000 if rate % 16000 == 0 else rate
    prepare_s = best_seconds(lambda: [prepare_reference((m, prep_rate), sample_rate=rate) for m in mono_16k],
                             args.iters, torch.device("cpu"))
    result = {
        "bench": "v2.encode", "encoder": source, "machine": machine(args.device), "references": len(refs),
        "reference_seconds": [round(n / rate, 3) for n in lengths], "audio_seconds": round(audio_seconds, 3),
        "alone_s": alone_s, "batched_s": batched_s,
        "alone_audio_s_per_s": audio_seconds / alone_s, "batched_audio_s_per_s": audio_seconds / batched_s,
        "batched_speedup": alone_s / batched_s,
        "prepare_from_16k_mono_audio_s_per_s": audio_seconds / prepare_s,
        "long_reference_seconds": args.long_seconds, "long_whole_s": long_whole_s,
        "long_chunk_frames": args.chunk_frames, "long_chunks": len(chunks),
        "long_chunk_mean_s": sum(chunks) / len(chunks), "long_chunk_max_s": max(chunks),
    }
    clone_refs = references(4, args.reference_seconds, args.reference_seconds, rate)
    for c in args.concurrency:
        for key, value in cloned_ttfa(args.card, clone_refs, rate, c, args.frames).items():
            result[f"c{c}_{key}"] = value
    print(f"alone {result['alone_audio_s_per_s']:.1f} audio s/s, batched x{len(refs)} "
          f"{result['batched_audio_s_per_s']:.1f} audio s/s, prepare {result['prepare_from_16k_mono_audio_s_per_s']:.0f}"
          f" audio s/s; {args.long_seconds:g} s whole {long_whole_s * 1e3:.0f} ms, {len(chunks)} chunks of "
          f"{args.chunk_frames} frames {result['long_chunk_mean_s'] * 1e3:.1f} ms each (max "
          f"{result['long_chunk_max_s'] * 1e3:.1f})", file=sys.stderr)
    for c in args.concurrency:
        print(f"concurrency {c}: TTFA p50 {result[f'c{c}_audio_ttfa_p50_s'] * 1e3:.0f} ms with a "
              f"{args.reference_seconds:g} s reference to encode, {result[f'c{c}_codes_ttfa_p50_s'] * 1e3:.0f} ms "
              f"with its codes", file=sys.stderr)
    return result


if __name__ == "__main__":
    sys.exit(main())
