"""Qwen3-Omni's benches, found through the registry (what v2/bench/family.py asks of a family's bench).

Owns: the runtime a bench measures (the card's own weights: `card_runtime`; the tiny card is seeded) and the
request a workload text becomes (one user turn as chat messages, the card's default speaker). The comparison
with transformers' `generate(return_audio=True)` is `reference.py` (`python -m v2.bench.reference --family
qwen3_omni`), time to first audio against the thinker's end `ttfa.py` (`python -m v2.families.qwen3_omni.bench
ttfa`). No sequential baseline or engine-overhead stand-ins here (`overhead` None).
Must not know: the engine's internals, scheduling.
"""

from __future__ import annotations

from typing import Any

from v2.bench.family import card_runtime as runtime  # noqa: F401 - the bench's `runtime` part

overhead = None


def request(family: Any, text: str, *, seed: int, max_frames: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "seed": seed, "max_frames": max_frames}
