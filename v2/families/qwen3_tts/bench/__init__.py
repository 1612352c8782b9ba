"""Qwen3-TTS's benches, found through the registry (what v2/bench/family.py asks of a family's bench).

For `python -m v2.bench`: its runtime for the bench, a request, the sequential baseline. Its parts:
`launches.py` (`python -m v2.bench.launches --family qwen3_tts --size 1.7b|0.6b`), and its own benches, run
as modules: `frames.py` (frames per second through the reference loop), `codec.py` (the codec's decode).

Owns: the runtime the bench measures (`v2.bench.family.card_runtime`: the card's weights, seeded on the tiny
card), the request a workload text becomes (voice design on a Base or VoiceDesign checkpoint; the first
speaker of a CustomVoice one, which needs one), and one request through the simple sequential path on the
runtime's own weights: the family's prompt layout, `v2.models.qwen3_tts.generate.generate` (the reference
loop, eager), then the codec's whole `decode`, which the runtime's codes must equal. No engine-overhead
stand-ins for this family's executors (`overhead` None), no fixed-batch reference for the engine bench, no
reference-implementation comparison.
Must not know: the engine's internals, scheduling.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from v2.bench.family import card_runtime as runtime

__all__ = ["overhead", "request", "runtime", "sequential"]
overhead = None


def request(family: Any, text: str, *, seed: int, max_frames: int) -> dict[str, Any]:
    req: dict[str, Any] = {"text": text, "seed": seed, "max_frames": max_frames}
    if family.cfg.model_type == "custom_voice":
        req["speaker"] = sorted(family.cfg.speakers)[0]
    return req


def sequential(runtime: Any, req: dict[str, Any]) -> tuple[np.ndarray, float, dict[str, float]]:
    """One request through the reference loop then decode(): its codes [F, G], seconds of audio, and the wall
    seconds of each part (`generate`, `decode`)."""
    import torch

    from v2.models.qwen3_tts.generate import generate
    from v2.models.qwen3_tts.prompt import embed_layout

    family, model = runtime.family, runtime.model
    work = family.prepare(family.parse(req))
    assert work.recording is None, "the bench's requests encode no recording"
    rows, trailing = embed_layout(model, work.layout)
    t0 = time.perf_counter()
    codes = generate(model, rows, trailing, max_new_tokens=work.max_frames + 1, min_new_tokens=work.floor,
                     sampling=work.sampling, seed=req["seed"])
    t1 = time.perf_counter()
    seconds = 0.0
    if len(codes):
        with torch.no_grad():
            seconds = family.codec.decode(codes[None].to(family.codec.device)).shape[-1] / family.sample_rate
    return codes.cpu().numpy(), seconds, {"generate": t1 - t0, "decode": time.perf_counter() - t1}
