"""MOSS-TTS-Local's stand-ins for the engine-overhead benches (`v2.bench.overhead`, `python -m v2.bench.engine`).

Owns: executors that stand in for its AR and codec experts inside benchmarks only (they return results of
the right shape at once, so what is timed is scheduling, planning, bookkeeping, the host copy and
delivery), `instant_experts(runtime)` (swaps them in for a block), and `one_row_requests` (requests with a
one-row prompt that decode an exact number of frames).
Must not know: model internals, what is measured.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch

from v2.families.moss_tts_local.ar_executor import FRAME_FIELDS
from v2.bench.overhead import settle
from v2.runtime import Runtime


_OUTPUTS: dict[tuple[int, ...], torch.Tensor] = {}  # static outputs of the instant experts, made once a shape


class _InstantAR:
    """The real executor's host half; a device half that answers every AR_FRAME at once with "continue" and
    zero codes (a graph's static output: one buffer per bucket), and a prefill that does nothing."""

    def __init__(self, real: Any) -> None:
        self.real, self.kv, self.graphs = real, real.kv, real.graphs
        self.outputs = _OUTPUTS

    def prepare(self, plans: Sequence[Any], bucket: int) -> Any:
        return self.real.prepare(plans, bucket)

    def launch(self, batch: Any) -> torch.Tensor:
        key = (batch.key[0],)  # bucket
        if key not in self.outputs:
            self.outputs[key] = torch.zeros(key[0], FRAME_FIELDS)
        return self.outputs[key]

    def prefill(self, plans: Sequence[Any]) -> None:
        pass


class _InstantCodec:
    """The real executor's host half and read-back; a device half that answers every AUDIO_CHUNK with
    silence at once (one static output buffer per bucket and chunk length)."""

    def __init__(self, real: Any, channels: int, hop: int) -> None:
        self.real, self.graphs, self.channels, self.hop = real, real.graphs, channels, hop
        self.outputs = _OUTPUTS

    def prepare(self, plans: Sequence[Any], bucket: int, frames: int) -> Any:
        return self.real.prepare(plans, bucket, frames)

    def launch(self, batch: Any) -> torch.Tensor:
        key = (batch[1].shape[0], batch[1].shape[2], self.channels, self.hop)  # (bucket, frames, ...)
        if key not in self.outputs:
            self.outputs[key] = torch.zeros(key[0], self.channels, key[1] * self.hop)
        return self.outputs[key]

    def read(self, host: Any, plans: Sequence[Any]) -> Any:
        return self.real.read(host, plans)

    def admit(self, slot: int) -> None:
        pass


@contextmanager
def instant_experts(runtime: Runtime) -> Iterator[None]:
    """Inside: the runtime's AR and codec executors keep their host halves and answer at once on the device
    side (static zero outputs). The real executors are back on exit. Swap only while the runtime is idle."""
    real_ar, real_codec = runtime.family.ar_exec, runtime.family.codec_exec
    runtime.family.ar_exec = _InstantAR(real_ar)  # type: ignore[assignment]
    runtime.family.codec_exec = _InstantCodec(real_codec, runtime.family.codec.cfg.channels, runtime.family.codec.cfg.hop)  # type: ignore[assignment]
    try:
        yield
    finally:
        settle(runtime)  # nothing launched with the instant experts still to run
        runtime.family.ar_exec, runtime.family.codec_exec = real_ar, real_codec


def one_row_requests(runtime: Runtime, rows: int, *, frames: int) -> list[dict[str, Any]]:
    """`rows` requests with a one-row prompt, each decoding exactly `frames` frames (request i seeded i)."""
    row = [runtime.model.cfg.ids.audio_start] + [runtime.model.cfg.audio_pad_code] * 12  # a one-row prompt
    return [{"prompt_rows": [row], "seed": i, "max_frames": frames, "min_frames": frames} for i in range(rows)]
