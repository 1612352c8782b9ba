"""Audio in: a file, its bytes or (samples, sample_rate) -> float32 samples as decoded, and resampling.

Owns: reading with soundfile (wav, flac, ogg, mp3 where libsndfile has it), telling a file's container from its
header (`file_format`, or checked on the one open that reads it: `read_audio(container=...)`), the media types
a data URL may name for each container (`MEDIA_TYPES`), the layout rule for raw samples, resampling with soxr (quality "HQ") to the output
length `ceil(n * rate / source_rate)` that the references' resamplers give, and refusing unusable audio with an
`AudioError` whose message reads after the field's name ("reference_audio: is 31.0 s long; ..."). What a
recording may cost is decided before it is decoded, converted or copied: from a file's header (frames, rate,
channels) or an array's shape, the rate range, the duration and frames x channels (bounds in `v2/fields.py`),
and a path's length (MAX_PATH_CHARS).
Each codec's own input rule (channels, level) is in its package (`audio_in.py` there).
Must not know: torch, any codec, requests, the runtime.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Union

import numpy as np
import soundfile as sf
import soxr

from v2.fields import check_reference_size, check_sample_rate  # the bounds: MIN/MAX_SAMPLE_RATE, MAX_REFERENCE_SAMPLES

RESAMPLE_QUALITY = "HQ"  # soxr's 20-bit preset: flat passband to ~0.91 of the lower Nyquist, fast
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: a longer path is refused before the file system is asked

AudioSource = Union[str, os.PathLike, bytes, bytearray, memoryview, tuple[Any, Any]]


class AudioError(ValueError):
    """Reference audio that cannot be used; the message says what is wrong, written to follow a field name."""


class WrongContainer(AudioError):
    """A file whose header says another container than the one the caller expected (`read_audio(container=)`)."""

    def __init__(self, found: str, expected: str) -> None:
        super().__init__(f"holds {found} audio, not {expected}")
        self.found = found


def _seconds(n: int, rate: int) -> str:
    return f"{n / rate:.2f} s"


def _check_duration(n: int, rate: int, min_seconds: float, max_seconds: float | None) -> None:
    if n == 0:
        raise AudioError("has no samples")
    if max_seconds is not None and n > max_seconds * rate:
        raise AudioError(f"is {_seconds(n, rate)} long; at most {max_seconds:g} s is allowed")
    if n < min_seconds * rate:
        raise AudioError(f"is {_seconds(n, rate)} long; at least {min_seconds:g} s is needed")


def _check_cost(frames: int, channels: int, rate: int, max_seconds: float | None) -> None:
    """What decoding or converting would hold, refused from the header or the shape alone: the duration,
    then frames x channels (MAX_REFERENCE_SAMPLES)."""
    _check_duration(frames, rate, 0.0, max_seconds)
    try:
        check_reference_size(frames, channels)
    except ValueError as e:
        raise AudioError(str(e)) from None


def _sample_rate(value: Any) -> int:
    try:
        return check_sample_rate(value)
    except ValueError as e:
        raise AudioError(str(e)) from None


def _layout(samples: Any) -> tuple[np.ndarray, int, int]:
    """Raw samples -> (a [channels, n] view of them, channels, n), read from the shape only: nothing is
    converted or copied (a list becomes an array; an array is taken as it is). Layout: [n] is mono; a 2-D
    array's longer axis is time ([n, channels] or [channels, n])."""
    try:
        array = np.asarray(samples)
    except (TypeError, ValueError, RuntimeError) as e:
        raise AudioError(f"samples are not an array of numbers ({e})") from None
    if array.size == 0:
        raise AudioError("has no samples")
    if array.dtype != np.int16 and array.dtype != np.int32 and array.dtype.kind != "f":
        raise AudioError(f"samples must be float, int16 or int32 PCM, got {array.dtype}")
    if array.ndim == 1:
        array = array[None]  # [1, n]
    elif array.ndim == 2:
        rows, cols = array.shape
        if rows == cols and rows > 0:
            raise AudioError(f"cannot tell channels from time in a {rows} x {cols} array; pass [n, channels]")
        if rows > cols:
            array = array.T  # [n, channels] -> [channels, n], a view
    else:
        raise AudioError(f"samples must be shaped [n], [n, channels] or [channels, n], got {list(array.shape)}")
    return array, array.shape[0], array.shape[1]


def _to_float32(array: np.ndarray) -> np.ndarray:
    """[channels, n] -> [channels, n] float32, one new array. Floats are taken as they are, int16 / int32 PCM
    scaled to [-1, 1) (int -> float32, then an exact power-of-two scale: the same values as through float64)."""
    with np.errstate(over="ignore"):  # values beyond float32 become inf, refused as such
        out = array.astype(np.float32)
    if array.dtype.kind == "i":
        out *= np.float32(2.0 ** -(8 * array.dtype.itemsize - 1))
    return out


def _shown_path(path: str) -> str:
    return path if len(path) <= 120 else f"{path[:60]}...{path[-40:]}"


def _open(source: Any) -> tuple[Any, str]:
    """A file name or file object soundfile can open, and its subject for a message ("'a.wav' is")."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise AudioError("is empty (0 bytes)")
        return io.BytesIO(bytes(source)), "the bytes are"
    try:
        name = os.fspath(source)
    except TypeError as e:
        raise AudioError(f"the path is not usable ({e})") from None
    if not isinstance(name, str):
        raise AudioError("the path must be text (str or os.PathLike of str)")
    if len(name) > MAX_PATH_CHARS:
        raise AudioError(f"the path is {len(name):,} characters; at most {MAX_PATH_CHARS} are accepted")
    shown = _shown_path(name)
    try:
        path = Path(name)
        if not path.exists():
            raise AudioError(f"no such file: '{shown}'")
        if not path.is_file():
            raise AudioError(f"'{shown}' is not a file")
    except (OSError, ValueError) as e:
        if isinstance(e, AudioError):
            raise
        raise AudioError(f"cannot open '{shown}' ({getattr(e, 'strerror', None) or e})") from None
    return name, f"'{shown}' is"


def _undecodable(subject: str, e: Exception) -> AudioError:
    detail = getattr(e, "error_string", None) or str(e)
    return AudioError(f"{subject} not decodable as audio ({detail.strip()})")


_SOUNDFILE_ERRORS = (sf.SoundFileError, RuntimeError, TypeError, ValueError, OSError)
# libsndfile's major formats -> the names OpenAI's and the CLI's format lists use (WAVEX: a wav whose header is
# WAVE_FORMAT_EXTENSIBLE); any other is its libsndfile name in lower case
_CONTAINERS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}
# a container -> the media types that name it (lower case; the usual aliases): a `data:<type>;base64,` URL whose
# type names another container than its part's format is refused; a type not here is left to the file's header
MEDIA_TYPES: dict[str, tuple[str, ...]] = {
    "wav": ("audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "audio/x-pn-wav"),
    "mp3": ("audio/mpeg", "audio/mp3", "audio/mpeg3", "audio/x-mpeg", "audio/x-mpeg-3", "audio/x-mp3"),
    "flac": ("audio/flac", "audio/x-flac"),
    "ogg": ("audio/ogg", "audio/x-ogg", "audio/vorbis", "audio/opus", "audio/x-vorbis+ogg", "audio/x-opus+ogg",
            "audio/x-flac+ogg"),
}
MEDIA_CONTAINER = {media: container for container, types in MEDIA_TYPES.items() for media in types}  # the reverse


def _container(handle: sf.SoundFile) -> str:
    major = str(handle.format)
    return _CONTAINERS.get(major, major.lower())


def file_format(data: bytes | bytearray | memoryview) -> str:
    """The container of an audio file's bytes as its header says ("wav", "flac", "ogg", "mp3", or another of
    libsndfile's formats in lower case, e.g. "aiff"); only the header is read. AudioError when libsndfile
    recognises none."""
    file, subject = _open(data)
    try:
        with sf.SoundFile(file) as handle:
            return _container(handle)
    except _SOUNDFILE_ERRORS as e:
        raise _undecodable(subject, e) from None


def _read_file(source: Any, max_seconds: float | None, container: str | None) -> tuple[np.ndarray, int]:
    """A path or file bytes -> [channels, n] float32 and its rate. The header's container (`container`: the one
    it must say), rate, duration and frames x channels are checked before a sample is decoded, so a file that
    declares too much costs its header only; the read is bounded by the header's frame count."""
    file, subject = _open(source)
    try:
        handle = sf.SoundFile(file)
    except _SOUNDFILE_ERRORS as e:
        raise _undecodable(subject, e) from None
    with handle:
        if container is not None and (found := _container(handle)) != container:
            raise WrongContainer(found, container)
        rate = _sample_rate(handle.samplerate)
        _check_cost(handle.frames, handle.channels, rate, max_seconds)
        try:
            data = handle.read(handle.frames, dtype="float32", always_2d=True)  # [n, channels]
        except _SOUNDFILE_ERRORS as e:
            raise _undecodable(subject, e) from None
    return np.ascontiguousarray(data.T), rate


def read_audio(source: AudioSource, *, min_seconds: float = 0.0, max_seconds: float | None = None,
               container: str | None = None) -> tuple[np.ndarray, int]:
    """source -> (samples [channels, n] float32, sample_rate), as decoded (no resampling, no level change).
    Raises AudioError for a missing or undecodable file, no samples, NaN / infinite samples, a sample rate
    outside [MIN_SAMPLE_RATE, MAX_SAMPLE_RATE], a duration outside [min_seconds, max_seconds], or more than
    MAX_REFERENCE_SAMPLES frames x channels; the last three are decided from the header or the shape, before
    anything is decoded or converted. `container` (a file's): the container its header must say (`file_format`'s
    names), checked first on the same open (one header read): `WrongContainer` when it says another."""
    if isinstance(source, tuple):
        if len(source) != 2:
            raise AudioError(f"expected (samples, sample_rate), got a tuple of {len(source)}")
        rate = _sample_rate(source[1])
        array, channels, n = _layout(source[0])
        _check_cost(n, channels, rate, max_seconds)
        samples = _to_float32(array)
    elif isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        samples, rate = _read_file(source, max_seconds, container)
    else:
        raise AudioError(f"expected a path, the bytes of an audio file, or (samples, sample_rate); got "
                         f"{type(source).__name__}")
    _check_duration(samples.shape[1], rate, 0.0, max_seconds)
    if not np.isfinite(samples).all():
        raise AudioError("contains NaN or infinite samples")
    _check_duration(samples.shape[1], rate, min_seconds, max_seconds)
    return samples, rate


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
