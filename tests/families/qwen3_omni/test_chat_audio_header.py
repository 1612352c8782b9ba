"""An `input_audio` part's file (v2/families/qwen3_omni/chat_audio.py): its header opened once (the container
checked on the same read as the rate and size, v2/models/audio_in.py `read_audio(container=)`), and a
`data:audio/<type>;base64,` prefix refused naming the data where its media type names another container than
the part's `format` (the usual aliases: audio/wav, audio/x-wav, audio/wave; audio/mpeg for mp3; ...); a type
that names no known container is left to the file's header."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from v2.errors import FieldError
from v2.families.qwen3_omni.chat_audio import decode_input_audio
from v2.models import audio_in
from v2.models.aut.config import AudioEncoderConfig
from v2.models.qwen3_omni.config import Qwen3OmniConfig

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "qwen3_omni_tiny"
AT = "messages[0].content[0].input_audio"


@pytest.fixture(scope="module")
def cfg() -> AudioEncoderConfig:
    config = Qwen3OmniConfig.from_dict(json.loads((FIXTURE / "checkpoint" / "config.json").read_text()))
    return config.thinker.audio  # type: ignore[no-any-return]


def recording(container: str, subtype: str | None = None) -> str:
    if container not in sf.available_formats():
        pytest.skip(f"this libsndfile ({sf.__libsndfile_version__}) has no {container}")
    buf = io.BytesIO()
    t = np.arange(4800) / 16000
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format=container, subtype=subtype)
    return base64.b64encode(buf.getvalue()).decode()


def test_the_header_is_opened_once(cfg, monkeypatch) -> None:
    wav, flac = recording("WAV"), recording("FLAC")
    opened: list[Any] = []
    real = audio_in.sf.SoundFile

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(audio_in.sf, "SoundFile", counting)
    wave, tokens = decode_input_audio(wav, "wav", AT, cfg)
    assert len(opened) == 1 and wave.shape[0] == 4800 and tokens > 0
    opened.clear()
    with pytest.raises(FieldError, match="holds flac audio, not wav as its format says"):
        decode_input_audio(flac, "wav", AT, cfg)  # the container refused on that same open
    assert len(opened) == 1


@pytest.mark.parametrize("media, container, subtype, fmt", [
    ("audio/wav", "WAV", None, "wav"), ("audio/x-wav", "WAV", None, "wav"), ("audio/wave", "WAV", None, "wav"),
    ("Audio/X-WAV", "WAV", None, "wav"), ("audio/vnd.wave", "WAVEX", None, "wav"),
    ("audio/mpeg", "MP3", "MPEG_LAYER_III", "mp3"), ("audio/mp3", "MP3", "MPEG_LAYER_III", "mp3"),
    ("audio/flac", "FLAC", None, "flac"), ("audio/x-flac", "FLAC", None, "flac"),
    ("audio/ogg", "OGG", "VORBIS", "ogg"), ("audio/x-vorbis+ogg", "OGG", "VORBIS", "ogg"),
    ("audio/ogg;codecs=vorbis", "OGG", "VORBIS", "ogg"),  # a recorder's parameters before ;base64
    ("audio/aiff", "WAV", None, "wav"), ("audio/x-unknown", "FLAC", None, "flac")])  # no known container: the header's
def test_a_data_url_of_a_type_the_format_goes_by_is_taken(cfg, media, container, subtype, fmt) -> None:
    data = recording(container, subtype)
    plain = decode_input_audio(data, fmt, AT, cfg)
    prefixed = decode_input_audio(f"data:{media};base64,{data}", fmt, AT, cfg)
    assert np.array_equal(plain[0], prefixed[0]) and plain[1] == prefixed[1]


@pytest.mark.parametrize("media, container, fmt", [
    ("audio/mpeg", "WAV", "wav"), ("audio/wav", "WAV", "mp3"), ("audio/flac", "OGG", "ogg"),
    ("audio/ogg", "FLAC", "flac"), ("audio/x-wav", "FLAC", "flac"), ("audio/x-vorbis+ogg", "WAV", "wav")])
def test_a_data_url_of_another_type_is_refused_naming_the_data(cfg, media, container, fmt) -> None:
    """Refused before its bytes are read, whatever they hold (here always a file of the stated format, or not)."""
    with pytest.raises(FieldError) as e:
        decode_input_audio(f"data:{media};base64,{recording(container)}", fmt, AT, cfg)
    assert str(e.value).startswith(f"{AT}.data: its data URL says {media}, not {fmt} as its format says ("), e.value
    assert e.value.field == "messages.content.input_audio.data"


def test_a_data_url_of_no_known_container_is_left_to_the_header(cfg) -> None:
    """A type that names no container the table knows is not refused for its name: the file's header decides."""
    with pytest.raises(FieldError, match="holds wav audio, not flac as its format says"):
        decode_input_audio(f"data:audio/aiff;base64,{recording('WAV')}", "flac", AT, cfg)
