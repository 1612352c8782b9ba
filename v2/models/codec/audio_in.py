"""Reference audio in: a file, its bytes or (samples, sample_rate) -> stereo float32 at the codec's rate, level-set.

Owns: reading with soundfile (wav, flac, ogg, mp3 where libsndfile has it), the layout rule for raw
samples, mono -> stereo (duplicated) and > 2 channels -> the first two, resampling with soxr (quality "HQ"),
the output length `ceil(n * rate / source_rate)` that the reference's resampler gives, the reference's
loudness normalisation (-20 dBFS mean power, gain clamped to [-3, +3] dB), and refusing unusable audio with
an `AudioError` whose message reads after the field's name ("reference_audio: is 31.0 s long; ...").
Must not know: torch, the codec's weights, requests, the runtime.
"""

from __future__ import annotations

import io
import math
import os
from numbers import Integral, Real
from pathlib import Path
from typing import Any, Union

import numpy as np
import soundfile as sf
import soxr

TARGET_DBFS = -20.0
MAX_GAIN_DB = 3.0
RESAMPLE_QUALITY = "HQ"  # soxr's 20-bit preset: flat passband to ~0.91 of the lower Nyquist, fast

AudioSource = Union[str, os.PathLike, bytes, bytearray, memoryview, tuple[Any, Any]]


class AudioError(ValueError):
    """Reference audio that cannot be used; the message says what is wrong, written to follow a field name."""


def _seconds(n: int, rate: int) -> str:
    return f"{n / rate:.2f} s"


def _check_duration(n: int, rate: int, min_seconds: float, max_seconds: float | None) -> None:
    if n == 0:
        raise AudioError("has no samples")
    if max_seconds is not None and n > max_seconds * rate:
        raise AudioError(f"is {_seconds(n, rate)} long; at most {max_seconds:g} s is allowed")
    if n < min_seconds * rate:
        raise AudioError(f"is {_seconds(n, rate)} long; at least {min_seconds:g} s is needed")


def _sample_rate(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, Real) or not float(value).is_integer() or value <= 0:
        raise AudioError(f"sample rate must be a positive whole number of Hz, got {value!r}")
    return int(value)


def _from_samples(samples: Any) -> np.ndarray:
    """Raw samples -> [channels, n] float32. Layout: [n] is mono; a 2-D array's longer axis is time
    ([n, channels] or [channels, n]). Floats are taken as they are, int16 / int32 PCM scaled to [-1, 1)."""
    try:
        array = np.asarray(samples)
    except (TypeError, ValueError, RuntimeError) as e:
        raise AudioError(f"samples are not an array of numbers ({e})") from None
    if array.size == 0:
        raise AudioError("has no samples")
    if array.dtype == np.int16 or array.dtype == np.int32:
        array = array.astype(np.float64) / float(2 ** (8 * array.dtype.itemsize - 1))
    elif array.dtype.kind != "f":
        raise AudioError(f"samples must be float, int16 or int32 PCM, got {array.dtype}")
    if array.ndim == 1:
        array = array[None]  # [1, n]
    elif array.ndim == 2:
        rows, cols = array.shape
        if rows == cols and rows > 0:
            raise AudioError(f"cannot tell channels from time in a {rows} x {cols} array; pass [n, channels]")
        if rows > cols:
            array = array.T  # [n, channels] -> [channels, n]
    else:
        raise AudioError(f"samples must be shaped [n], [n, channels] or [channels, n], got {list(array.shape)}")
    with np.errstate(over="ignore"):  # values beyond float32 become inf, refused as such
        return array.astype(np.float32)


def _open(source: Any) -> tuple[Any, str]:
    """A file name or file object soundfile can open, and its subject for a message ("'a.wav' is")."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise AudioError("is empty (0 bytes)")
        return io.BytesIO(bytes(source)), "the bytes are"
    path = Path(source)
    if not path.exists():
        raise AudioError(f"no such file: '{path}'")
    if not path.is_file():
        raise AudioError(f"'{path}' is not a file")
    return str(path), f"'{path}' is"


def _undecodable(subject: str, e: Exception) -> AudioError:
    detail = getattr(e, "error_string", None) or str(e)
    return AudioError(f"{subject} not decodable as audio ({detail.strip()})")


def _read_file(source: Any, min_seconds: float, max_seconds: float | None) -> tuple[np.ndarray, int]:
    """A path or file bytes -> [channels, n] float32 and its rate; the length is checked from the header
    first, so an over-long file is refused before it is decoded."""
    file, subject = _open(source)
    try:
        info = sf.info(file)
        if isinstance(file, io.BytesIO):
            file.seek(0)
        if info.frames > 0 and info.samplerate > 0:
            _check_duration(info.frames, info.samplerate, 0.0, max_seconds)
        data, rate = sf.read(file, dtype="float32", always_2d=True)  # [n, channels]
    except (sf.SoundFileError, RuntimeError, TypeError, ValueError) as e:
        raise _undecodable(subject, e) from None
    return np.ascontiguousarray(data.T), int(rate)


def read_audio(source: AudioSource, *, min_seconds: float = 0.0,
               max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """source -> (samples [channels, n] float32, sample_rate), as decoded (no resampling, no level change).
    Raises AudioError for a missing or undecodable file, no samples, NaN / infinite samples, a sample rate
    <= 0, or a duration outside [min_seconds, max_seconds]."""
    if isinstance(source, tuple):
        if len(source) != 2:
            raise AudioError(f"expected (samples, sample_rate), got a tuple of {len(source)}")
        rate = _sample_rate(source[1])
        samples = _from_samples(source[0])
    elif isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        samples, rate = _read_file(source, min_seconds, max_seconds)
        rate = _sample_rate(rate)
    else:
        raise AudioError(f"expected a path, the bytes of an audio file, or (samples, sample_rate); got "
                         f"{type(source).__name__}")
    _check_duration(samples.shape[1], rate, 0.0, max_seconds)
    if not np.isfinite(samples).all():
        raise AudioError("contains NaN or infinite samples")
    _check_duration(samples.shape[1], rate, min_seconds, max_seconds)
    return samples, rate


def to_stereo(samples: np.ndarray) -> np.ndarray:
    """[channels, n] -> [2, n]: mono duplicated, more than two channels keep the first two."""
    if samples.shape[0] == 1:
        return np.concatenate([samples, samples])
    return samples[:2]


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """[channels, n] float32 at `rate` -> [channels, ceil(n * target_rate / rate)] float32 (soxr "HQ").

    soxr rounds the length to the nearest sample; the reference's resampler rounds up, so a missing last
    sample is added as zero, keeping frame counts equal to the reference's."""
    if rate == target_rate:
        return samples
    out = soxr.resample(np.ascontiguousarray(samples.T), rate, target_rate, quality=RESAMPLE_QUALITY).T  # [ch, m]
    want = math.ceil(samples.shape[1] * target_rate / rate)
    if out.shape[1] < want:
        out = np.pad(out, ((0, 0), (0, want - out.shape[1])))
    return np.ascontiguousarray(out[:, :want], dtype=np.float32)


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
