"""Reference audio in for the Qwen3 codec's encoder: a file, its bytes or (samples, rate) -> mono float32 at the codec's rate.

Owns: the reference's input rule (its tokenizer's `load_audio` / `_normalize_audio_inputs`): channels are
averaged to mono, a rate other than the codec's is resampled with soxr "HQ" to ceil(n * rate / source rate)
samples (what `librosa.resample`'s default `soxr_hq` with `fix=True` gives), and nothing else (no loudness
change: the 12 Hz tokenizer has none). Reading, the layout rule for raw samples and the refusals
(`AudioError`) are the shared ones (`v2.models.audio_in`).
Must not know: torch, the codec's weights, requests, the runtime.
"""

from __future__ import annotations

import numpy as np

from v2.models.audio_in import AudioError, AudioSource, read_audio, resample

__all__ = ["AudioError", "prepare_mono"]


def prepare_mono(source: AudioSource, *, sample_rate: int, min_seconds: float = 0.0,
                 max_seconds: float | None = None) -> np.ndarray:
    """A recording ready for `Qwen3CodecEncoder.encode`: [n] float32 mono at `sample_rate`.
    min_seconds / max_seconds bound the duration as given (before resampling). Raises AudioError."""
    samples, rate = read_audio(source, min_seconds=min_seconds, max_seconds=max_seconds)  # [channels, n]
    mono = samples.mean(axis=0, dtype=np.float32)[None] if samples.shape[0] > 1 else samples  # [1, n]
    return resample(np.ascontiguousarray(mono, dtype=np.float32), rate, sample_rate)[0]
