"""Audio bytes for HTTP: float32 chunks from the runtime -> the response format, whole or chunk by chunk.

Owns: the formats a client can ask for (mp3, opus, aac, flac, wav, pcm), their content types and allowed
sample rates, the output shape (downmix, soxr resampling that streams, s16 rounding) and one incremental
encoder per format: wav with an open-length header when streamed, pcm raw s16le, flac and mp3 through
libsndfile (soundfile), opus (Ogg, 20 ms pages) and aac (ADTS) through PyAV. A streamed encoder hands out
bytes as soon as they exist; a whole-file encoder also keeps the header rewrites a writer makes on close.
Must not know: HTTP, the runtime, requests.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from v2.fields import FieldError

if TYPE_CHECKING:
    from av.audio.stream import AudioStream

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                 "wav": "audio/wav", "pcm": "audio/pcm"}
_MPEG_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
RATES: dict[str, tuple[int, ...]] = {"mp3": _MPEG_RATES, "opus": (8000, 12000, 16000, 24000, 48000),
                                     "aac": _MPEG_RATES + (64000, 88200, 96000)}
MIN_RATE, MAX_RATE = 8000, 192000
FLAC_HZ_MAX = 65535  # a FLAC frame header holds a rate in Hz up to this, above it in tens of Hz only
PCM_RATE = 24000  # OpenAI's pcm: 24 kHz mono s16le


@dataclass(frozen=True)
class OutputSpec:
    format: str
    sample_rate: int
    channels: int


def output_spec(fmt: str, requested_rate: int | None, native_rate: int, native_channels: int) -> OutputSpec:
    """The rate and channels a response carries; a `FieldError` of `sample_rate` for a rate the format cannot
    hold (of `response_format` for a format not served)."""
    if fmt not in FORMATS:
        raise FieldError(f"response_format: {fmt!r} is not one of {', '.join(FORMATS)}", field="response_format")
    channels = 1 if fmt == "pcm" else native_channels
    rate = requested_rate if requested_rate is not None else (PCM_RATE if fmt == "pcm" else native_rate)
    allowed = RATES.get(fmt)
    if allowed is not None and rate not in allowed:
        raise FieldError(f"sample_rate: {fmt} holds {', '.join(map(str, allowed))} Hz, not {rate}", field="sample_rate")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise FieldError(f"sample_rate: must lie in [{MIN_RATE}, {MAX_RATE}] Hz, got {rate}", field="sample_rate")
    if fmt == "flac" and rate > FLAC_HZ_MAX and rate % 10:
        raise FieldError(f"sample_rate: flac holds a rate over {FLAC_HZ_MAX} Hz only in tens of Hz, not {rate}",
                         field="sample_rate")
    return OutputSpec(fmt, rate, channels)


def to_s16(frames: np.ndarray) -> np.ndarray:
    """float samples -> int16: clip to [-1, 1], scale by 32767, round half to even (the rounding every test uses)."""
    return np.round(np.clip(frames, -1.0, 1.0) * 32767.0).astype("<i2")


class Shaper:
    """Runtime audio [channels, n] at `in_rate` -> frames [n, out_channels] float32 at the spec's rate.
    Downmix is the channel mean; resampling is one soxr stream, so chunk by chunk equals all at once."""

    def __init__(self, in_rate: int, in_channels: int, spec: OutputSpec) -> None:
        self.in_channels, self.out_channels = in_channels, spec.channels
        self._stream: Any = None
        if in_rate != spec.sample_rate:
            import soxr

            self._stream = soxr.ResampleStream(in_rate, spec.sample_rate, spec.channels, dtype="float32", quality="HQ")

    def feed(self, audio: np.ndarray, last: bool = False) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32)
        if audio.shape[0] != self.out_channels:
            audio = audio.mean(axis=0, keepdims=True) if self.out_channels == 1 else audio[: self.out_channels]
        frames = np.ascontiguousarray(audio.T)  # [n, channels]
        if self._stream is not None:
            out = self._stream.resample_chunk(frames, last=last)
            frames = np.asarray(out, dtype=np.float32).reshape(-1, self.out_channels)
        return frames

    def flush(self) -> np.ndarray:
        return self.feed(np.zeros((self.out_channels, 0), np.float32), last=True)


class _Sink:
    """A file object for writers: keeps every byte, hands out the bytes appended since the last `take()`."""

    def __init__(self, seekable: bool) -> None:
        self.data = bytearray()
        self.pos = 0
        self.sent = 0
        self._seekable = seekable

    def write(self, b: Any) -> int:
        b = bytes(b)
        end = self.pos + len(b)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[self.pos:end] = b
        self.pos = end
        return len(b)

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else len(self.data) + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        return b""

    def seekable(self) -> bool:
        return self._seekable

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        """Bytes past what was handed out (a rewrite of bytes already handed out is not sent again)."""
        out = bytes(self.data[self.sent:])
        self.sent = len(self.data)
        return out


class Encoder(ABC):
    """Feed runtime audio, get the next bytes of the file; `finish()` returns the rest (or, not streaming, all).
    Each format says how frames become bytes (`_encode`) and what closes the file (`_close`)."""

    def __init__(self, spec: OutputSpec, in_rate: int, in_channels: int, streaming: bool) -> None:
        self.spec, self.streaming = spec, streaming
        self.shaper = Shaper(in_rate, in_channels, spec)
        self.samples = 0  # output frames encoded so far

    def feed(self, audio: np.ndarray) -> bytes:
        frames = self.shaper.feed(audio)
        self.samples += len(frames)
        return self._encode(frames)

    def finish(self) -> bytes:
        frames = self.shaper.flush()
        self.samples += len(frames)
        return self._encode(frames) + self._close()

    @abstractmethod
    def _encode(self, frames: np.ndarray) -> bytes: ...

    @abstractmethod
    def _close(self) -> bytes: ...


class PcmEncoder(Encoder):
    def _encode(self, frames: np.ndarray) -> bytes:
        return to_s16(frames).tobytes()

    def _close(self) -> bytes:
        return b""


def wav_header(sample_rate: int, channels: int, data_bytes: int | None) -> bytes:
    """A 44-byte PCM s16 RIFF header; `data_bytes` None writes 0xFFFFFFFF sizes (length not known yet)."""
    riff, data = (0xFFFFFFFF, 0xFFFFFFFF) if data_bytes is None else (36 + data_bytes, data_bytes)
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, channels, sample_rate,
                       sample_rate * channels * 2, channels * 2, 16, b"data", data)


class WavEncoder(Encoder):
    """Streamed: the open-length header first, then samples. Whole: the header with the real sizes."""

    def __init__(self, spec: OutputSpec, in_rate: int, in_channels: int, streaming: bool) -> None:
        super().__init__(spec, in_rate, in_channels, streaming)
        self._header_sent = False
        self._parts: list[bytes] = []

    def _encode(self, frames: np.ndarray) -> bytes:
        data = to_s16(frames).tobytes()
        if not self.streaming:
            self._parts.append(data)
            return b""
        if not self._header_sent:
            self._header_sent = True
            return wav_header(self.spec.sample_rate, self.spec.channels, None) + data
        return data

    def _close(self) -> bytes:
        if self.streaming:
            return b"" if self._header_sent else wav_header(self.spec.sample_rate, self.spec.channels, None)
        data = b"".join(self._parts)
        return wav_header(self.spec.sample_rate, self.spec.channels, len(data)) + data


class SoundfileEncoder(Encoder):
    """flac (s16 samples, lossless: decodes to exactly the wav's samples) and mp3 (LAME) through libsndfile.
    Streamed flac carries "total samples unknown" in STREAMINFO, as the FLAC format allows."""

    _KIND = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III")}

    def __init__(self, spec: OutputSpec, in_rate: int, in_channels: int, streaming: bool) -> None:
        import soundfile as sf

        super().__init__(spec, in_rate, in_channels, streaming)
        container, subtype = self._KIND[spec.format]
        self._sink = _Sink(seekable=True)
        self._file = sf.SoundFile(self._sink, "w", samplerate=spec.sample_rate, channels=spec.channels,
                                  format=container, subtype=subtype)

    def _encode(self, frames: np.ndarray) -> bytes:
        if len(frames):
            self._file.write(to_s16(frames) if self.spec.format == "flac" else np.clip(frames, -1.0, 1.0))
        return self._sink.take() if self.streaming else b""

    def _close(self) -> bytes:
        self._file.close()
        return self._sink.take() if self.streaming else bytes(self._sink.data)


class AvEncoder(Encoder):
    """opus in Ogg (libopus, a page every 20 ms so bytes leave at once) and aac in ADTS, through PyAV."""

    _KIND = {"opus": ("ogg", "libopus", {"page_duration": "20000"}), "aac": ("adts", "aac", {})}

    def __init__(self, spec: OutputSpec, in_rate: int, in_channels: int, streaming: bool) -> None:
        import av

        super().__init__(spec, in_rate, in_channels, streaming)
        container, codec, options = self._KIND[spec.format]
        self._av = av
        self._sink = _Sink(seekable=False)
        self._container = av.open(self._sink, "w", format=container, options=options)
        self._layout = "mono" if spec.channels == 1 else "stereo"
        stream = self._container.add_stream(codec, rate=spec.sample_rate, layout=self._layout)
        self._stream = cast("AudioStream", stream)
        self._pts = 0

    def _encode(self, frames: np.ndarray) -> bytes:
        if len(frames):
            planar = np.ascontiguousarray(np.clip(frames, -1.0, 1.0).T)  # [channels, n]
            frame = self._av.AudioFrame.from_ndarray(planar, format="fltp", layout=self._layout)
            frame.sample_rate, frame.pts = self.spec.sample_rate, self._pts
            self._pts += len(frames)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take() if self.streaming else b""

    def _close(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.take() if self.streaming else bytes(self._sink.data)


_ENCODERS: dict[str, type[Encoder]] = {"pcm": PcmEncoder, "wav": WavEncoder, "flac": SoundfileEncoder,
                                       "mp3": SoundfileEncoder, "opus": AvEncoder, "aac": AvEncoder}
CHEAP = frozenset({"pcm", "wav"})  # encoded on the event loop; the others in a worker thread


def make_encoder(spec: OutputSpec, in_rate: int, in_channels: int, streaming: bool) -> Encoder:
    return _ENCODERS[spec.format](spec, in_rate, in_channels, streaming)


def encode_whole(audio: np.ndarray, spec: OutputSpec, in_rate: int) -> bytes:
    """A whole file from all of a request's audio [channels, n]."""
    encoder = make_encoder(spec, in_rate, audio.shape[0], streaming=False)
    return encoder.feed(audio) + encoder.finish()
