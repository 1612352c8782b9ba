"""Encoders, request mapping and error mapping on their own (no server): streamed bytes decode like the whole
file, resampling in pieces equals resampling at once, and runtime field names map to the client's."""

from __future__ import annotations

import base64
import struct

import numpy as np
import pytest

from serverkit import decode
from v2.server.audio import FORMATS, Shaper, encode_whole, make_encoder, output_spec, to_s16, wav_header
from v2.errors import RequestError
from v2.families.moss_tts_local.params import FIELDS, SPEECH_PARAMS
from v2.server.errors import ApiError, runtime_field_error
from v2.server.schema import Limits, SpeechBody, parse_body, plan, read_reference, resolved

RATE = 48000
AUDIO = (np.random.default_rng(0).standard_normal((2, 3 * 3840 + 1234)) * 0.2).astype(np.float32)


def test_s16_rounding_clips_scales_and_rounds_half_to_even():
    x = np.array([-2.0, -1.0, 1.0, 3.0, 0.5 / 32767, 1.5 / 32767, -0.5 / 32767], np.float32)
    assert to_s16(x).tolist() == [-32767, -32767, 32767, 32767, 0, 2, 0]


def test_wav_header_real_and_open_length():
    real = wav_header(48000, 2, 1000)
    assert real[:4] == b"RIFF" and struct.unpack("<I", real[4:8])[0] == 1036 and real[36:40] == b"data"
    assert struct.unpack("<HIIHH", real[22:36]) == (2, 48000, 48000 * 4, 4, 16)
    assert struct.unpack("<I", real[40:44])[0] == 1000
    assert wav_header(48000, 2, None)[4:8] == b"\xff\xff\xff\xff" == wav_header(48000, 2, None)[40:44]


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "pcm"])
def test_streamed_bytes_come_at_once_and_decode_like_the_whole_file(fmt):
    spec = output_spec(fmt, None, RATE, 2)
    whole, _ = decode(encode_whole(AUDIO, spec, RATE))
    encoder = make_encoder(spec, RATE, 2, streaming=True)
    pieces = [encoder.feed(AUDIO[:, i:i + 3840]) for i in range(0, AUDIO.shape[1], 3840)]
    assert all(pieces[:-1]), "every chunk of 80 ms gives bytes at once"
    streamed, rate = decode(b"".join(pieces) + encoder.finish())
    assert rate == RATE and streamed.shape[0] == 2
    if fmt in ("wav", "flac"):  # lossless: the same s16 samples
        assert np.array_equal(streamed, whole) and np.array_equal(np.round(streamed.T * 32768), to_s16(AUDIO.T))
    else:  # lossy: the same length, give or take what a streamed container cannot say (encoder delay)
        assert 0 <= streamed.shape[1] - whole.shape[1] <= (3 * 1152 if fmt == "mp3" else 0)  # mp3: whole frames
        assert 0 <= whole.shape[1] - AUDIO.shape[1] <= (2 * 1024 if fmt == "aac" else 0)  # ADTS: priming + padding


def test_resampling_and_downmix_in_pieces_equal_all_at_once():
    spec = output_spec("pcm", None, RATE, 2)
    assert (spec.sample_rate, spec.channels) == (24000, 1)
    shaper = Shaper(RATE, 2, spec)
    pieces = [shaper.feed(AUDIO[:, i:i + 1000]) for i in range(0, AUDIO.shape[1], 1000)] + [shaper.flush()]
    once = Shaper(RATE, 2, spec)
    whole = np.concatenate([once.feed(AUDIO), once.flush()])
    assert np.array_equal(np.concatenate(pieces), whole) and len(whole) == AUDIO.shape[1] // 2
    assert np.array_equal(Shaper(RATE, 2, output_spec("pcm", 48000, RATE, 2)).feed(AUDIO)[:, 0], AUDIO.mean(0))


@pytest.mark.parametrize("fmt,rate", [("opus", 44100), ("mp3", 96000), ("wav", 4000), ("flac", 500000)])
def test_rates_a_format_cannot_hold_are_refused(fmt, rate):
    with pytest.raises(ValueError, match="^sample_rate:"):
        output_spec(fmt, rate, RATE, 2)


@pytest.mark.parametrize("message,field,param,text", [
    ("sampling.audio.temperature: too hot", "sampling.audio.temperature", "temperature", "temperature: too hot"),
    ("sampling.audio.top_p: bad", "sampling.audio.top_p", "top_p", "top_p: bad"),
    ("sampling.repetition_penalty: bad", "sampling.repetition_penalty", "repetition_penalty", "repetition_penalty: bad"),
    ("text: must not be empty", "text", "input", "input: must not be empty"),
    ("instruction: too long", "instruction", "instructions", "instructions: too long"),
    ("max_frames: 9 exceeds the cap", "max_frames", "max_new_tokens", "max_new_tokens: 9 exceeds the cap"),
    ("reference_audio[1]: not audio", "reference_audio", "ref_audio", "ref_audio[1]: not audio"),
    ("the prompt is too long", "text", "input", "input: the prompt is too long"),  # a message not led by its field
    ("sampling.temperature: 9", "sampling.temperature", None, "sampling.temperature: 9"),  # no HTTP field sets it
    ("give exactly one of 'text' and 'prompt_rows'", None, None, "give exactly one of 'text' and 'prompt_rows'"),
])
def test_runtime_field_errors_name_the_openai_param_by_field(message, field, param, text):
    err = runtime_field_error(RequestError(message, field=field), FIELDS)  # a family's table (MOSS-TTS-Local's)
    assert (err.status, err.param, err.message) == (400, param, text)
    aliased = runtime_field_error(RequestError("max_frames: x", field="max_frames"), FIELDS,
                                  aliases={"max_frames": "max_frames"})
    assert (aliased.param, aliased.message) == ("max_frames", "max_frames: x")
    assert runtime_field_error(RequestError("seed: a message naming no field"), FIELDS).param is None  # no field


def test_the_param_follows_the_field_not_the_message():
    """The message is for people: a field named in it is not what the parameter is taken from."""
    err = runtime_field_error(RequestError("seed: looks like the seed, but blames the text", field="text"), FIELDS)
    assert (err.param, err.message) == ("input", "input: seed: looks like the seed, but blames the text")


def test_the_plan_maps_openai_fields_onto_the_runtime_request():
    body = parse_body({"model": "tts-1", "input": "Hi.", "voice": {"id": "alloy"}, "instructions": "calm",
                       "response_format": "wav", "seed": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                       "repetition_penalty": 1.1, "max_new_tokens": 40, "min_new_tokens": 5, "language": "en"})
    p = plan(body, Limits(("card", "tts-1")), native_rate=RATE, native_channels=2)
    request = SPEECH_PARAMS.request(p.params, resolved(p, {}))  # a family's mapping (MOSS-TTS-Local's)
    assert request == {"text": "Hi.", "stream": True, "instruction": "calm", "language": "en", "seed": 3,
                       "max_frames": 40, "min_frames": 5,
                       "sampling": {"audio": {"temperature": 0.7, "top_p": 0.9, "top_k": 20},
                                    "repetition_penalty": 1.1}}
    assert p.voice == "alloy" and p.streaming and (p.spec.sample_rate, p.spec.channels) == (RATE, 2)
    for fmt in ("mp3", "opus", "aac", "flac", "wav", "pcm"):  # every format streams unless told not to
        assert plan(SpeechBody(input="x", response_format=fmt), Limits(("c",)), native_rate=RATE,
                    native_channels=2).streaming
        whole = plan(SpeechBody(input="x", response_format=fmt, stream=False, stream_format="audio"), Limits(("c",)),
                     native_rate=RATE, native_channels=2)
        assert not whole.streaming and SPEECH_PARAMS.request(whole.params, resolved(whole, {}))["stream"] is False


def test_reference_audio_sources(tmp_path):
    data = b"RIFF-and-some-bytes"
    assert read_reference(base64.b64encode(data).decode(), None) == data
    assert read_reference("data:audio/wav;base64," + base64.b64encode(data).decode(), None) == data
    (tmp_path / "voice.wav").write_bytes(data)
    assert read_reference(f"file://{tmp_path}/voice.wav", tmp_path) == data
    for value, allowed in [("not base64!", None), ("data:audio/wav,plain", None), ("https://example.com/a.wav", None),
                           (f"file://{tmp_path}/voice.wav", None), ("file:///etc/hostname", tmp_path),
                           (f"file://{tmp_path}/../x.wav", tmp_path)]:
        with pytest.raises(ApiError) as info:
            read_reference(value, allowed)
        assert info.value.param == "ref_audio"
