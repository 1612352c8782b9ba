"""Reference audio in for the MOSS codec's encoder: a recording -> stereo float32 at the codec's rate, level-set.

Owns: the reference's input rule: mono -> stereo (duplicated) and > 2 channels -> the first two, resampling
(`v2.models.audio_in.resample`), and its loudness normalisation (-20 dBFS mean power, gain clamped to
[-3, +3] dB). Reading, the layout rule for raw samples and the refusals (`AudioError`) are the shared ones
(`v2.models.audio_in`).
Must not know: torch, the codec's weights, requests, the runtime.
"""

from __future__ import annotations

import math

import numpy as np

from v2.models.audio_in import AudioError, AudioSource, read_audio, resample

__all__ = ["AudioError", "loudness_normalize", "prepare_reference", "to_stereo"]

TARGET_DBFS = -20.0
MAX_GAIN_DB = 3.0


def to_stereo(samples: np.ndarray) -> np.ndarray:
    """[channels, n] -> [2, n]: mono duplicated, more than two channels keep the first two."""
    if samples.shape[0] == 1:
        return np.concatenate([samples, samples])
    return samples[:2]


def loudness_normalize(wav: np.ndarray) -> tuple[np.ndarray, float]:
    """The reference's level setting: level = 10 log10(mean(wav^2) + 1e-9) over every sample of every channel
    (float64), gain_db = clamp(-20 - level, -3, +3); returns (wav * 10^(gain_db / 20) in float32, gain_db)."""
    level = 10.0 * math.log10(float(np.mean(np.square(wav, dtype=np.float64))) + 1e-9)
    gain_db = min(MAX_GAIN_DB, max(-MAX_GAIN_DB, TARGET_DBFS - level))
    factor = np.float32(10.0 ** (gain_db / 20.0))
    return (wav.astype(np.float32) * factor).astype(np.float32), gain_db


def prepare_reference(source: AudioSource, *, sample_rate: int, min_seconds: float = 0.0,
                      max_seconds: float | None = None) -> np.ndarray:
    """A reference recording ready for the codec encoder: [2, n] float32 at `sample_rate`, level-set.

    source: a path (str or os.PathLike), the bytes of an audio file, or (samples, sample_rate) with samples
    [n] (mono), [n, channels] or [channels, n] (the longer axis is time). min_seconds / max_seconds bound
    the duration (as given, before resampling); pass one codec frame as min_seconds to refuse audio that
    would encode to no frame. Raises AudioError (a ValueError) naming what is wrong."""
    samples, rate = read_audio(source, min_seconds=min_seconds, max_seconds=max_seconds)
    wav = resample(to_stereo(samples), rate, sample_rate)
    return loudness_normalize(wav)[0]
