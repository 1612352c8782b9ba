"""MOSS-TTS-Local's stand-ins for the engine-overhead benches (`v2.bench.overhead`, `python -m v2.bench.engine`).

Owns: device halves that stand in for its AR and codec experts inside benchmarks only (they return results
of the right shape at once, so what is timed is scheduling, planning, bookkeeping, the host copy and
delivery), `instant_experts(runtime)` (swaps them into the registered executors for a block), and `one_row_requests` (requests with a
one-row prompt that decode an exact number of frames).
Must not know: model internals, what is measured.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from v2.families.moss_tts_local.ar_executor import FRAME_FIELDS
from v2.bench.overhead import settle
from v2.contracts import WorkUnitKind
from v2.runtime import Runtime


_OUTPUTS: dict[tuple[int, ...], torch.Tensor] = {}  # static outputs of the instant experts, made once a shape


def _instant_frames(batch: Any) -> torch.Tensor:
    """AR_FRAME's device half: every row "continue" with zero codes, at once (a graph's static output: one
    buffer per bucket)."""
    key = (batch.key[0],)  # bucket
    if key not in _OUTPUTS:
        _OUTPUTS[key] = torch.zeros(key[0], FRAME_FIELDS)
    return _OUTPUTS[key]


def _instant_prefill(plans: Sequence[Any]) -> None:
    """PREFILL's device half: nothing."""


def _instant_chunks(channels: int, hop: int) -> Callable[[Any], torch.Tensor]:
    """AUDIO_CHUNK's device half: silence at once (one static output buffer per bucket and chunk length)."""
    def launch(batch: Any) -> torch.Tensor:
        key = (batch[1].shape[0], batch[1].shape[2], channels, hop)  # (bucket, frames, ...)
        if key not in _OUTPUTS:
            _OUTPUTS[key] = torch.zeros(key[0], channels, key[1] * hop)
        return _OUTPUTS[key]
    return launch


@contextmanager
def instant_experts(runtime: Runtime) -> Iterator[None]:
    """Inside: the device halves of the executors the family registered under PREFILL, AR_FRAME and AUDIO_CHUNK
    (the engine holds the same objects) answer at once; their host halves and read-backs are the real ones.
    The real device halves are back on exit. Swap only while the runtime is idle."""
    family = runtime.family
    cfg = family.codec.cfg
    instant = {WorkUnitKind.PREFILL: _instant_prefill, WorkUnitKind.AR_FRAME: _instant_frames,
               WorkUnitKind.AUDIO_CHUNK: _instant_chunks(cfg.channels, cfg.hop)}
    halves = {kind: family.executors[kind] for kind in instant if kind in family.executors}
    real = {kind: h.launch for kind, h in halves.items()}
    for kind, h in halves.items():
        h.launch = instant[kind]
    try:
        yield
    finally:
        settle(runtime)  # nothing launched with the instant experts still to run
        for kind, h in halves.items():
            h.launch = real[kind]


def one_row_requests(runtime: Runtime, rows: int, *, frames: int) -> list[dict[str, Any]]:
    """`rows` requests with a one-row prompt, each decoding exactly `frames` frames (request i seeded i)."""
    row = [runtime.model.cfg.ids.audio_start] + [runtime.model.cfg.audio_pad_code] * 12  # a one-row prompt
    return [{"prompt_rows": [row], "seed": i, "max_frames": frames, "min_frames": frames} for i in range(rows)]
