"""Reference audio in: refusals that name what is wrong, channel layouts, resampled lengths, the level
setting, and files through soundfile."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from v2.models.audio_in import AudioError, read_audio, resample
from v2.models.moss_codec.audio_in import loudness_normalize, prepare_reference

RATE = 48000


def tone(n: int, rate: int, hz: float = 440.0, amp: float = 0.1) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * hz * np.arange(n) / rate)).astype(np.float32)


def level_db(wav: np.ndarray) -> float:
    return 10 * math.log10(float(np.mean(np.square(wav, dtype=np.float64))))


@pytest.mark.parametrize("source,message", [
    (b"", "is empty (0 bytes)"),
    (b"RIFF not really a wave file at all", "the bytes are not decodable as audio"),
    ("/no/such/reference.wav", "no such file: '/no/such/reference.wav'"),
    (Path("/"), "'/' is not a file"),
    ((np.zeros(0, np.float32), 16000), "has no samples"),
    ((np.zeros((2, 0), np.float32), 16000), "has no samples"),
    ((np.array([0.1, np.nan, 0.2]), 16000), "contains NaN or infinite samples"),
    ((np.array([0.1, np.inf, 0.2]), 16000), "contains NaN or infinite samples"),
    ((np.array([1e39, 0.0]), 16000), "contains NaN or infinite samples"),  # overflows float32
    ((tone(100, 16000), 0), "sample rate must be a positive whole number of Hz, got 0"),
    ((tone(100, 16000), -8000), "got -8000"),
    ((tone(100, 16000), 16000.5), "got 16000.5"),
    ((tone(100, 16000), True), "got True"),
    ((tone(16000 * 31, 16000), 16000), "is 31.00 s long; at most 30 s is allowed"),
    ((tone(100, 16000), 16000), "is 0.01 s long; at least 0.08 s is needed"),
    ((np.ones((3, 3), np.float32), 16000), "cannot tell channels from time"),
    ((np.ones((2, 2, 5), np.float32), 16000), "shaped [n], [n, channels] or [channels, n]"),
    ((np.ones(10, np.uint8), 16000), "samples must be float, int16 or int32 PCM, got uint8"),
    ((["a", "b"], 16000), "samples must be float"),
    ((tone(10, 16000),), "expected (samples, sample_rate)"),
    (12345, "expected a path, the bytes of an audio file, or (samples, sample_rate); got int"),
])
def test_bad_audio_is_refused_saying_what_is_wrong(source, message):
    with pytest.raises(AudioError) as e:
        prepare_reference(source, sample_rate=RATE, min_seconds=0.08, max_seconds=30)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_an_overlong_file_is_refused_from_its_header(tmp_path):
    path = tmp_path / "long.wav"
    sf.write(path, np.zeros(8000 * 40, np.int16), 8000, subtype="PCM_16")
    with pytest.raises(AudioError, match=r"is 40.00 s long; at most 30 s"):
        prepare_reference(path, sample_rate=RATE, max_seconds=30)


@pytest.mark.parametrize("layout", ["[n]", "[n, 1]", "[1, n]"])
def test_mono_is_duplicated(layout):
    x = tone(4800, RATE)
    samples = {"[n]": x, "[n, 1]": x[:, None], "[1, n]": x[None]}[layout]
    wav = prepare_reference((samples, RATE), sample_rate=RATE)
    assert wav.shape == (2, 4800) and np.array_equal(wav[0], wav[1])


@pytest.mark.parametrize("channels_first", [False, True])
def test_more_than_two_channels_keep_the_first_two(channels_first):
    x = np.stack([tone(4800, RATE, hz) for hz in (300, 500, 700)])  # [3, n]
    samples, rate = read_audio((x if channels_first else x.T, RATE))
    assert samples.shape == (3, 4800)
    wav = prepare_reference((x if channels_first else x.T, RATE), sample_rate=RATE)
    expected, _ = loudness_normalize(x[:2])
    assert np.array_equal(wav, expected)


def test_int16_pcm_is_scaled_like_soundfile():
    pcm = np.array([0, 16384, -32768, 32767], np.int16)
    samples, _ = read_audio((pcm, RATE))
    assert np.array_equal(samples[0], np.array([0, 0.5, -1, 32767 / 32768], np.float32))


@pytest.mark.parametrize("rate", [16000, 44100, 22050, 8000])
@pytest.mark.parametrize("n", [1, 1234, 44101])
def test_resampled_length_is_the_references(rate, n):
    out = resample(np.zeros((2, n), np.float32), rate, RATE)
    assert out.shape == (2, math.ceil(n * RATE / rate)) and out.dtype == np.float32


@pytest.mark.parametrize("rate", [16000, 44100])
def test_resampling_keeps_a_tone(rate):
    n = rate  # one second
    out = resample(np.stack([tone(n, rate, 1000.0)] * 2), rate, RATE)
    want = tone(out.shape[1], RATE, 1000.0)
    middle = slice(RATE // 10, -RATE // 10)  # away from the edges' filter transients
    assert np.abs(out[0, middle] - want[middle]).max() < 1e-3


def test_loudness_is_set_to_minus_20_dbfs_within_3_db():
    mid = tone(RATE, RATE, amp=math.sqrt(2 * 10 ** (-21.5 / 10)))  # a sine's power is amp^2 / 2: -21.5 dBFS
    wav, gain = loudness_normalize(np.stack([mid, mid]))
    assert -3 < gain < 3 and abs(level_db(wav) + 20) < 1e-3
    quiet = np.stack([tone(RATE, RATE, amp=0.001)] * 2)  # -63 dBFS: raised by the most, +3 dB
    wav, gain = loudness_normalize(quiet)
    assert gain == 3.0 and np.array_equal(wav, quiet * np.float32(10 ** (3 / 20)))
    silent, gain = loudness_normalize(np.zeros((2, 100), np.float32))
    assert gain == 3.0 and not silent.any()


@pytest.mark.parametrize("fmt,subtype,exact", [("WAV", "FLOAT", True), ("WAV", "PCM_16", True),
                                                ("FLAC", "PCM_16", True), ("OGG", "VORBIS", False)])
def test_files_round_trip_through_soundfile(tmp_path, fmt, subtype, exact):
    if fmt not in sf.available_formats():
        pytest.skip(f"this libsndfile has no {fmt}")
    x = np.stack([tone(24000, 24000, 300.0, 0.3), tone(24000, 24000, 450.0, 0.2)], axis=1)  # [n, 2]
    if subtype == "PCM_16":
        x = np.round(x * 32768).astype(np.int16)  # stored exactly
    path = tmp_path / f"ref.{fmt.lower()}"
    sf.write(path, x, 24000, format=fmt, subtype=subtype)
    from_path = prepare_reference(path, sample_rate=RATE)
    from_str = prepare_reference(str(path), sample_rate=RATE)
    from_bytes = prepare_reference(path.read_bytes(), sample_rate=RATE)
    assert from_path.shape == (2, 48000)
    assert np.array_equal(from_path, from_str) and np.array_equal(from_path, from_bytes)
    if exact:  # lossless: the file gives what the samples give
        assert np.array_equal(from_path, prepare_reference((x, 24000), sample_rate=RATE))


def test_bytes_from_an_in_memory_file():
    buf = io.BytesIO()
    sf.write(buf, tone(16000, 16000), 16000, format="WAV", subtype="PCM_16")
    wav = prepare_reference(buf.getvalue(), sample_rate=RATE, max_seconds=2)
    assert wav.shape == (2, 48000) and np.array_equal(wav[0], wav[1])
