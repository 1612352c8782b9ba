"""An `input_audio` part of a chat message -> the 16 kHz mono clip the audio encoder reads, and its token count.

Owns: the part's checks (`data`: base64 of a whole audio file, a `data:audio/...;base64,` prefix allowed
when its media type is one `format` goes by (audio_in.py `MEDIA_TYPES`: audio/wav, audio/x-wav, audio/wave for
wav; audio/mpeg for mp3; ...): a data URL of another type is refused;
`format`: one of FORMATS, the containers libsndfile decodes, in lower case as OpenAI's enum spells them: the
one list of them, the family's `input_audio_formats`, which a server's schema publishes; the data's header must
say the same container, so a wav sent as mp3 or bytes that are no audio file are refused before anything runs),
decoding (v2/models/audio_in.py `read_audio`: the header read once, its container, rate, duration and size
checked before a sample is decoded), the release processor's input rule (its `librosa.load(sr=16000)`:
channels averaged, resampled with soxr "HQ" to ceil(n * 16000 / rate) samples) and the `<|audio_pad|>` count
of the clip (`audio_token_count` of samples // hop mel frames: the encoder's output rows). Every refusal is a FieldError whose message starts with
the part's path (`messages[1].content[0].input_audio.data: ...`).
Must not know: the chat template, tokens other than the count, requests, the runtime.
"""

from __future__ import annotations

import base64
import binascii
import re

import numpy as np

from v2.errors import FieldError
from v2.models.audio_in import MEDIA_CONTAINER, MEDIA_TYPES, AudioError, WrongContainer, read_audio, resample
from v2.models.aut.features import audio_token_count
from v2.models.aut.config import AudioEncoderConfig

FORMATS = ("wav", "mp3", "flac", "ogg")  # OpenAI's input_audio formats that libsndfile decodes
FIELD = "messages.content.input_audio"
# data:audio/<type>[;<name>=<value>...];base64, (a recorder's `;codecs=opus` included)
_DATA_URI = re.compile(r"data:(audio/[\w.+-]+)(?:;[\w.+-]+=[^;,]*)*;base64,", re.IGNORECASE)


def _b64(text: str, fmt: str, at: str) -> bytes:
    m = _DATA_URI.match(text)
    named = MEDIA_CONTAINER.get(m.group(1).lower()) if m is not None else None
    if m is not None and named not in (None, fmt):  # a type of no known container: the file's header decides
        raise FieldError(f"{at}.data: its data URL says {m.group(1)}, not {fmt} as its format says ({m.group(1)} "
                         f"is {named} audio; a {fmt} data URL says one of {', '.join(MEDIA_TYPES[fmt])})",
                         field=f"{FIELD}.data")
    body = "".join(text[m.end():].split()) if m else "".join(text.split())
    if not body:
        raise FieldError(f"{at}.data: is empty; expected the base64 of an audio file", field=f"{FIELD}.data")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FieldError(f"{at}.data: is not base64 ({e})", field=f"{FIELD}.data") from None


def decode_input_audio(data: object, fmt: object, at: str, cfg: AudioEncoderConfig,
                       max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """(`data`, `format`) of the part at `at` -> (samples [n] float32 mono at the encoder's rate, the clip's
    `<|audio_pad|>` count)."""
    if not isinstance(fmt, str):
        raise FieldError(f"{at}.format: expected one of {', '.join(FORMATS)}, got {type(fmt).__name__}",
                         field=f"{FIELD}.format")
    if fmt not in FORMATS:
        raise FieldError(f"{at}.format: expected one of {', '.join(FORMATS)}, got {fmt!r}", field=f"{FIELD}.format")
    if not isinstance(data, str):
        raise FieldError(f"{at}.data: expected a base64 string, got {type(data).__name__}", field=f"{FIELD}.data")
    raw = _b64(data, fmt, at)
    try:  # the header read once: its container (the part's format), then its rate and size, before a sample
        samples, rate = read_audio(raw, max_seconds=max_seconds, container=fmt)  # [channels, n]
    except WrongContainer as e:
        raise FieldError(f"{at}.data: holds {e.found} audio, not {fmt} as its format says",
                         field=f"{FIELD}.data") from None
    except AudioError as e:
        raise FieldError(f"{at}.data: {e}", field=f"{FIELD}.data") from None
    mono = samples.mean(axis=0, dtype=np.float32)[None] if samples.shape[0] > 1 else samples  # [1, n]
    wave = resample(np.ascontiguousarray(mono, dtype=np.float32), rate, cfg.sampling_rate)[0]  # [m]
    frames = wave.shape[0] // cfg.hop_length
    if frames == 0:
        raise FieldError(f"{at}.data: is {wave.shape[0] / cfg.sampling_rate * 1000:.1f} ms long; at least "
                         f"{cfg.hop_length / cfg.sampling_rate * 1000:g} ms is needed", field=f"{FIELD}.data")
    return wave, audio_token_count(frames, cfg)
