"""Context audio in: a turn's recording (a path, file bytes or (samples, sample_rate)) -> mono float32 at the
codec's rate, as the reference's processor takes it.

Owns: the codec's input rule for this family (channels averaged to mono, another rate resampled to the
codec's with soxr "HQ" to ceil(n * rate / source rate) samples, no level change: Mimi has none) and
refusing unusable audio with a `RequestError` naming the request field it came from. Reading, the layout
rule for raw samples and the cost bounds are the shared reader's (`v2.models.audio_in`).
Must not know: torch, the codec's weights, the runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from v2.errors import RequestError


def read_context(source: Any, *, sample_rate: int, hop: int, max_seconds: float, field: str) -> np.ndarray:
    """[n] float32 mono at `sample_rate`, at least one frame (`hop` samples) long."""
    from v2.models.audio_in import AudioError, read_audio, resample

    try:
        samples, rate = read_audio(source, min_seconds=hop / sample_rate, max_seconds=max_seconds)  # [ch, n]
    except AudioError as e:
        raise RequestError(f"{field}: {e}", field=field) from None
    mono = samples.mean(axis=0, dtype=np.float32)[None] if samples.shape[0] > 1 else samples  # [1, n]
    return resample(np.ascontiguousarray(mono, dtype=np.float32), rate, sample_rate)[0]
