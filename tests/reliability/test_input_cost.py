"""What a request costs is bounded before the work is done: reference audio is judged from its header or its
array's shape (rate, duration, frames x channels, path length) before it is decoded, converted or copied, and
every integer field of a request has an upper bound that its error states. Memory is measured with
tracemalloc (numpy's buffers are traced), never with a clock."""

from __future__ import annotations

import tracemalloc
from typing import Any, Callable

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.fields import MAX_REFERENCE_SAMPLES, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from v2.models.audio_in import MAX_PATH_CHARS, AudioError
from v2.models.moss_codec.audio_in import prepare_reference
from v2.errors import RequestError
from v2.families.moss_tts_local.request import HeadParams, SamplingParams, SpeechRequest
from v2.runtime import Runtime

MIB = 2**20


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    yield rt
    rt.close()


def write_silence(path, rate: int, channels: int, seconds: float, fmt: str = "FLAC", subtype: str = "PCM_16") -> None:
    """A real file of silence (it compresses to almost nothing), written a block at a time."""
    block = np.zeros((1 << 16, channels), np.int16 if subtype == "PCM_16" else np.float32)
    total = int(rate * seconds)
    with sf.SoundFile(path, "w", samplerate=rate, channels=channels, format=fmt, subtype=subtype) as f:
        for start in range(0, total, len(block)):
            f.write(block[: min(len(block), total - start)])


def peak_bytes(call: Callable[[], Any], error: type[Exception] = RequestError) -> tuple[int, str]:
    """(the traced peak while `call` runs, its error's message); `call` must raise `error`."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as e:
            call()
        return tracemalloc.get_traced_memory()[1], str(e.value)
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """~165 KB of FLAC that declares 8 channels at 655,350 Hz for 29 s: 152 M samples, 608 MB as float32."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.flac"
    write_silence(path, 655_350, 8, 29)
    return path


@pytest.mark.parametrize("as_bytes", [False, True], ids=["path", "bytes"])
def test_a_flac_that_declares_a_huge_rate_is_refused_from_its_header(runtime, bomb, as_bytes):
    source = bomb.read_bytes() if as_bytes else str(bomb)
    decoded = 29 * 655_350 * 8 * 4
    peak, message = peak_bytes(lambda: runtime.submit({"text": "x", "reference_audio": source}))
    assert message.startswith("reference_audio: sample rate must lie in [8000, 192000] Hz, got 655350"), message
    assert peak < 8 * MIB and peak < decoded / 50, peak


@pytest.mark.parametrize("as_bytes", [False, True], ids=["path", "bytes"])
def test_a_header_over_the_decoded_size_is_refused_before_decoding(runtime, tmp_path, as_bytes):
    path = tmp_path / "wide.flac"
    write_silence(path, 96_000, 8, 25)  # in the rate range, under 30 s: 19.2 M samples x channels
    assert 25 * 96_000 * 8 > MAX_REFERENCE_SAMPLES
    source = path.read_bytes() if as_bytes else str(path)
    peak, message = peak_bytes(lambda: runtime.submit({"text": "x", "reference_audio": source}))
    assert message.startswith("reference_audio: holds 2,400,000 frames x 8 channels = 19,200,000 samples; "
                              f"at most {MAX_REFERENCE_SAMPLES:,} samples x channels"), message
    assert peak < 8 * MIB, peak


@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS"),
                                         ("MP3", "MPEG_LAYER_III")])
def test_a_40_s_file_is_refused_naming_the_duration_limit(runtime, tmp_path, fmt, subtype):
    if fmt not in sf.available_formats() or subtype not in sf.available_subtypes(fmt):
        pytest.skip(f"this libsndfile has no {fmt} {subtype}")
    path = tmp_path / f"long.{fmt.lower()}"
    write_silence(path, 48_000, 2, 40, fmt, subtype)
    limit = runtime.card.loops.encode.max_reference_seconds
    for source in (str(path), path.read_bytes()):
        peak, message = peak_bytes(lambda: runtime.submit({"text": "x", "reference_audio": source}))
        assert message.startswith(f"reference_audio: is 40.00 s long; at most {limit:g} s is allowed"), message
        assert "not decodable" not in message
        assert peak < 40 * 48_000 * 2 * 4 / 4, peak  # a quarter of the float32 decode: the header only


def test_a_10_minute_int16_stereo_array_is_refused_without_a_copy(runtime):
    samples = np.zeros((600 * 48_000, 2), np.int16)  # 115 MB
    peak, message = peak_bytes(lambda: runtime.submit({"text": "x", "reference_audio": (samples, 48_000)}))
    assert message.startswith("reference_audio: holds 28,800,000 frames x 2 channels"), message
    assert peak < samples.nbytes / 20, peak
    # stored voices read through the same reader: refused before a conversion too
    peak, message = peak_bytes(lambda: runtime.voices.add("long", (samples, 48_000)))
    assert message.startswith("reference_audio: is 600.00 s long; at most"), message
    assert peak < samples.nbytes / 20, peak
    assert "long" not in runtime.voices


def test_an_overlong_array_within_the_size_bound_costs_only_the_private_copy(runtime):
    samples = np.zeros(60 * 16_000, np.int16)  # 60 s mono: under the size bound, over the duration
    peak, message = peak_bytes(lambda: runtime.submit({"text": "x", "reference_audio": (samples, 16_000)}))
    assert message.startswith("reference_audio: is 60.00 s long; at most"), message
    assert peak < 2 * samples.nbytes, peak  # the request's one copy, no float conversion


out_of_range_rates = st.one_of(
    st.integers(max_value=MIN_SAMPLE_RATE - 1),
    st.integers(min_value=MAX_SAMPLE_RATE + 1),
    st.integers(1, 6000).map(lambda d: 10**d).filter(lambda r: r > MAX_SAMPLE_RATE),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda r: not MIN_SAMPLE_RATE <= r <= MAX_SAMPLE_RATE),
    st.sampled_from([10**400, -(10**400), 2**64, 1e308, 8000.5, 7999.0, 192_001]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rate=out_of_range_rates)
def test_a_sample_rate_outside_the_range_is_a_request_error(runtime, rate):
    source = (np.zeros(4800, np.float32), rate)
    with pytest.raises(RequestError) as e:
        runtime.submit({"text": "x", "reference_audio": source})
    assert str(e.value).startswith("reference_audio: sample rate must"), str(e.value)
    assert len(str(e.value)) < 200
    with pytest.raises(AudioError, match="^sample rate must"):  # the reader alone (the voice store's path)
        prepare_reference(source, sample_rate=48_000)


@pytest.mark.parametrize("rate", [MIN_SAMPLE_RATE, 44_100, MAX_SAMPLE_RATE])
def test_rates_at_and_inside_the_bounds_are_read(rate):
    wav = prepare_reference((np.zeros(rate // 10, np.float32), rate), sample_rate=48_000)
    assert wav.shape == (2, 4800)


@pytest.mark.parametrize("path,message", [
    ("/tmp/" + "x" * 4995, f"reference_audio: the path is 5,000 characters; at most {MAX_PATH_CHARS} are accepted"),
    ("/tmp/" + "y" * 300 + ".wav", "reference_audio: cannot open '/tmp/yyy"),  # one name over NAME_MAX (255)
])
def test_a_path_too_long_is_a_request_error_with_a_short_message(runtime, path, message):
    with pytest.raises(RequestError) as e:
        runtime.submit({"text": "x", "reference_audio": path})
    assert str(e.value).startswith(message), str(e.value)
    assert len(str(e.value)) < 250


def integer_fields() -> list[tuple[str, int]]:
    """(dotted path, upper bound) of every integer field of a request and its nested settings."""
    found = []
    for prefix, model in (("", SpeechRequest), ("sampling.", SamplingParams), ("sampling.audio.", HeadParams),
                          ("sampling.stop.", HeadParams)):
        for name, info in model.model_fields.items():
            if info.annotation is int or "Annotated[int," in str(info.annotation):
                bounds = [m.le for m in info.metadata if hasattr(m, "le")]
                found.append((prefix + name, bounds[0] if bounds else None))
    return found


INTEGER_FIELDS = integer_fields()


def test_every_integer_field_has_an_upper_bound():
    names = {name for name, _ in INTEGER_FIELDS}
    assert {"duration_frames", "seed", "max_frames", "min_frames", "sampling.top_k", "sampling.audio.top_k"} <= names
    assert all(bound is not None for _, bound in INTEGER_FIELDS), INTEGER_FIELDS


def nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: nested(rest, value) if rest else value}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(INTEGER_FIELDS), excess=st.one_of(st.integers(1, 2**70),
                                                               st.integers(19, 6000).map(lambda d: 10**d)))
def test_a_huge_integer_is_a_request_error_naming_the_field_and_its_bound(runtime, field, excess):
    name, bound = field
    assert bound is not None
    with pytest.raises(RequestError) as e:
        runtime.submit({"text": "x", **nested(name, bound + excess)})
    message = str(e.value)
    assert message.startswith(f"{name}: ") and str(bound) in message, message
    assert len(message) < 200


float_fields = ["timeout", "sampling.temperature", "sampling.top_p", "sampling.repetition_penalty",
                "sampling.audio.temperature", "sampling.stop.top_p"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(float_fields), digits=st.integers(309, 6000), sign=st.sampled_from([1, -1]))
def test_an_integer_beyond_float_range_in_a_float_field_is_a_request_error(runtime, field, digits, sign):
    with pytest.raises(RequestError) as e:
        runtime.submit({"text": "x", **nested(field, sign * 10**digits)})
    assert str(e.value).startswith(f"{field}: "), str(e.value)
    assert len(str(e.value)) < 200
