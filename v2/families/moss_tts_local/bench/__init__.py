"""MOSS-TTS-Local's benches, found through the registry (what v2/bench/family.py asks of a family's bench).

Owns, for `python -m v2.bench`: building the runtime the bench measures (the card's weights, or the release's
dimensions with random weights: nothing to download), the request a workload text becomes, and one request
through the simple sequential path on the runtime's own weights (`v2.models.moss_tts_local.generate.generate`,
then the codec's whole `decode`), which the runtime's codes must equal; for `python -m v2.bench.engine`:
`overhead` (instant stand-ins for its executors, `overhead.py`) and `fixed_batch` (requests of a fixed
length and `generate_batch` over the same prompts). Its parts: `launches.py` (`python -m v2.bench.launches`),
`reference.py` + `reference_worker.py` (`python -m v2.bench.reference`: the frame step against the
reference implementation's own generate()), and its own benches, run as modules: `framestep.py` (the AR
frame step per bucket), `kv.py` (paged KV figures), `encode.py` (reference-audio encoding).
Must not know: the engine's internals, scheduling.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import numpy as np
import torch

from v2.families.moss_tts_local.bench import overhead

__all__ = ["fixed_batch", "overhead", "request", "runtime", "sequential"]


def runtime(card: Any, *, device: str, random_weights: bool = False) -> Any:
    from v2.card import build_codec, build_model, build_tokenizer
    from v2.models.moss_tts_local.tokenizer import ByteTokenizer
    from v2.runtime import Runtime

    if random_weights:
        from v2.families.moss_tts_local.shapes import SHAPES
        from v2.models.moss_codec import MossAudioDecoder
        from v2.models.moss_tts_local.model import MossTTSLocal

        dtype = getattr(torch, card.experts.backbone.dtype)
        model = MossTTSLocal.from_seed(json.loads(SHAPES.joinpath("moss_tts_local_v1_5.json").read_text()), 0,
                                       dtype=dtype, device=device, init_device=device)
        codec = MossAudioDecoder.from_seed(json.loads(SHAPES.joinpath("moss_audio_tokenizer_v2.json").read_text()), 0,
                                           dtype=getattr(torch, card.experts.vocoder.dtype), device=device,
                                           init_device=device)
        return Runtime(card, model, codec, ByteTokenizer())
    return Runtime(card, build_model(card, device=device), build_codec(card, device=device), build_tokenizer(card))


def request(family: Any, text: str, *, seed: int, max_frames: int) -> dict[str, Any]:
    return {"text": text, "seed": seed, "max_frames": max_frames}


def sequential(runtime: Any, req: dict[str, Any]) -> tuple[np.ndarray, float, dict[str, float]]:
    """One request through generate() then decode(): its codes [F, G], seconds of audio, and the wall seconds
    of each part (`generate`, `decode`)."""
    from v2.models.moss_tts_local.generate import generate
    from v2.models.moss_tts_local.prompt import build_prompt

    model, codec = runtime.model, runtime.family.codec
    rows = build_prompt(runtime.family.tokenizer, model.cfg, req["text"])
    t0 = time.perf_counter()
    codes = generate(model, rows, max_frames=req["max_frames"], seed=req["seed"],
                     sampling=runtime.card.loops.ar_decode.sampling.settings())
    t1 = time.perf_counter()
    seconds = 0.0
    if len(codes):
        seconds = codec.decode(codes.T[None].to(codec.device)).shape[-1] / codec.sample_rate
    return codes.cpu().numpy(), seconds, {"generate": t1 - t0, "decode": time.perf_counter() - t1}


def fixed_batch(runtime: Any, texts: list[str], *, frames: int) -> tuple[list[dict[str, Any]],
                                                                        Callable[[bool], list[np.ndarray]]]:
    """Requests for `texts` (request i seeded i) that decode exactly `frames` frames each, and the plain batched
    reference loop over the same prompts, settings and seeds (`generate_batch`; with `audio`, then one whole
    `decode` per request): its codes [F, G] per request."""
    from v2.models.moss_tts_local.generate import generate_batch
    from v2.models.moss_tts_local.prompt import build_prompt

    model, codec = runtime.model, runtime.family.codec
    prompts = [build_prompt(runtime.family.tokenizer, model.cfg, t) for t in texts]
    seeds = list(range(len(texts)))
    settings = [runtime.card.loops.ar_decode.sampling.settings()] * len(texts)

    def reference(audio: bool) -> list[np.ndarray]:
        gens = generate_batch(model, prompts, settings, seeds, max_frames=frames, min_frames=frames)
        if audio:
            for g in gens:
                codec.decode(g.codes.T[None].to(codec.device))
        return [g.codes.cpu().numpy() for g in gens]

    requests = [{"prompt_rows": p, "seed": s, "max_frames": frames, "min_frames": frames}
                for p, s in zip(prompts, seeds)]
    return requests, reference
