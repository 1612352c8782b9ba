"""Engine overhead: the runtime's host time per step when the model's work is negligible.

Owns: executors that stand in for the AR and codec experts inside this benchmark only (they return
results of the right shape at once, so what is timed is scheduling, planning, bookkeeping, the host copy
and delivery), and the measurement at several numbers of running requests.
Must not know: model internals.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch

from v2.runtime import Runtime
from v2.runtime.executors import FRAME_FIELDS


class _InstantAR:
    """Answers every AR_FRAME with "continue" and zero codes; prefill does nothing."""

    def __init__(self, real: Any) -> None:
        self.kv, self.graphs = real.kv, real.graphs

    def admit(self, slot: int, settings: Any, seed: int) -> None:
        pass

    def prefill(self, plans: Sequence[Any]) -> None:
        pass

    def frame(self, plans: Sequence[Any], bucket: int) -> torch.Tensor:
        return torch.zeros(bucket, FRAME_FIELDS)


class _InstantCodec:
    """Answers every AUDIO_CHUNK with silence (a broadcast view: no allocation)."""

    def __init__(self, real: Any, channels: int, hop: int) -> None:
        self.graphs, self.channels, self.hop = real.graphs, channels, hop

    def admit(self, slot: int) -> None:
        pass

    def chunk(self, plans: Sequence[Any], bucket: int, frames: int) -> torch.Tensor:
        return torch.zeros(1, 1, 1).expand(bucket, self.channels, frames * self.hop)


def run_overhead(runtime: Runtime, rows: int, *, frames: int) -> dict[str, Any]:
    """`rows` requests decoding `frames` frames each with instant experts: host microseconds per step and per row."""
    real_ar, real_codec = runtime.ar_exec, runtime.codec_exec
    runtime.ar_exec = _InstantAR(real_ar)  # type: ignore[assignment]
    runtime.codec_exec = _InstantCodec(real_codec, runtime.codec.cfg.channels, runtime.codec.cfg.hop)  # type: ignore[assignment]
    row = [runtime.model.cfg.ids.audio_start] + [runtime.model.cfg.audio_pad_code] * 12  # a one-row prompt
    try:
        before = runtime.stats()
        start = time.perf_counter()
        handles = runtime.submit_many([{"prompt_rows": [row], "seed": i, "max_frames": frames, "min_frames": frames}
                                       for i in range(rows)])
        for h in handles:
            h.result()
        wall = time.perf_counter() - start
        after = runtime.stats()
    finally:
        runtime.ar_exec, runtime.codec_exec = real_ar, real_codec
    ran = after["steps"] - before["steps"]
    frame_rows = after["kinds"]["ar_frame"]["rows"] - before["kinds"]["ar_frame"]["rows"]
    return {"rows": rows, "steps": ran, "mean_rows_per_step": frame_rows / ran, "us_per_step": wall / ran * 1e6,
            "us_per_row": wall / frame_rows * 1e6}
