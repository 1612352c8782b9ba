"""CSM's benches, found through the registry (what v2/bench/family.py asks of a family's bench).

For `python -m v2.bench`: its runtime for the bench, a request, the sequential baseline.

Owns: building the runtime the bench measures (`Runtime.from_card`: the card's weights, seeded on the tiny
card), the request a workload text becomes (one turn in the card's default speaker, no context), and one
request through the simple sequential path on the runtime's own weights: the family's prompt layout,
`v2.models.csm.generate.generate` (the reference loop, eager), then the codec's whole `decode` of the frames
the reference decodes, which the runtime's codes must equal. No engine-overhead stand-ins for this family's
executors (`overhead` None), no fixed-batch reference for the engine bench. The comparison with transformers'
`generate` is `reference.py` (`python -m v2.bench.reference --family csm`), the launch count `launches.py`.
Must not know: the engine's internals, scheduling.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

overhead = None


def runtime(card: Any, *, device: str, random_weights: bool = False) -> Any:
    from v2.runtime import Runtime

    if random_weights:
        raise ValueError("--random-weights: this card's family has no release-dimension random build here; "
                         "its tiny card is seeded already")
    return Runtime.from_card(card, device=device)


def request(family: Any, text: str, *, seed: int, max_frames: int) -> dict[str, Any]:
    return {"text": text, "seed": seed, "max_frames": max_frames}


def sequential(runtime: Any, req: dict[str, Any]) -> tuple[np.ndarray, float, dict[str, float]]:
    """One request through the reference loop then decode(): the codes it decodes [F, N], seconds of audio,
    and the wall seconds of each part (`generate`, `decode`)."""
    import torch

    from v2.families.csm.rows import embed_rows
    from v2.models.csm.generate import generate

    family, model = runtime.family, runtime.model
    work = family.prepare(family.parse(req))
    assert not work.recordings, "the bench's requests encode no recording"
    with torch.no_grad():
        rows = embed_rows(model, work.rows.to(model.device))
    t0 = time.perf_counter()
    gen = generate(model, rows, max_new_tokens=work.max_frames, sampling=work.sampling, seed=req["seed"])
    t1 = time.perf_counter()
    codes, seconds = gen.audio_codes, 0.0
    if len(codes):
        codec = family.codec
        with torch.no_grad():
            clamped = codes.clamp(max=codec.cfg.codebook_size - 1)  # spare ids are no codec codes (codec_executor.py)
            seconds = codec.decode(clamped[None].to(codec.device)).shape[-1] / family.sample_rate
    return codes.cpu().numpy(), seconds, {"generate": t1 - t0, "decode": time.perf_counter() - t1}
