"""OpenAI's streaming contract through the official `openai` client against a real server: every format
streams by default (its first bytes arrive while the runtime is still making the request) and decodes to the
runtime's audio; `stream: false` is the whole file with a Content-Length; SSE events are data-first blocks
that a parser splitting on blank lines finds."""

from __future__ import annotations

import base64
import io
import json
import struct
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import soxr

from serverkit import CARD, TEXT, LiveServer, decode, in_process, s16, shared_runtime, wait_idle
from holds import Hold, slow_frames
from v2.server.audio import FORMATS, to_s16

SEED, FRAMES = 21, 30  # 30 frames: the first chunk (3 frames) leaves long before the request ends


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference():
    return in_process(shared_runtime(), text=TEXT, seed=SEED, max_frames=FRAMES, min_frames=FRAMES)


def _finished(url: str) -> dict[str, float]:
    """`v2_requests_total` by finish reason, from the server's /metrics."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("v2_requests_total{"):
            reason = line.split('finish_reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def _same_audio(fmt: str, data: bytes, reference) -> None:
    """The bytes decode to the runtime's audio: sample for sample where the format is lossless (s16), else
    to its duration give or take what a streamed lossy container cannot say (encoder delay, padding)."""
    if fmt == "pcm":  # OpenAI's pcm: 24 kHz mono s16le
        mono = soxr.resample(reference.audio.mean(axis=0), reference.sample_rate, 24000, "HQ")
        assert np.array_equal(np.frombuffer(data, "<i2"), to_s16(mono))
        return
    audio, rate = decode(data)
    want = reference.audio.shape[1] / reference.sample_rate
    slack = 0.08 if fmt in ("mp3", "aac") else 0.0
    assert rate == reference.sample_rate and abs(audio.shape[1] / rate - want) <= slack + 1e-9, (fmt, audio.shape)
    if fmt in ("wav", "flac"):
        assert np.array_equal(np.round(audio.T * 32768).astype(np.int16), s16(reference.audio))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_streams_by_default(live, client, reference, fmt, monkeypatch):
    """No `stream` field: the first bytes reach the client while the runtime still runs the request (a
    whole file cannot exist before the request ends), and the streamed file is the runtime's audio."""
    rt = shared_runtime()
    wait_idle(rt)  # so the one request running below is this one
    # its frames are held at the 20th (two chunks, 9 frames of audio, made) until the first bytes are here: it
    # cannot end first however fast the host is; a file held back to the end never comes while it waits
    hold = Hold(rt.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 20, timeout=30)
    pieces, running_at_first = [], None
    try:
        with client.audio.speech.with_streaming_response.create(
                model=CARD, voice="alloy", input=TEXT, response_format=fmt,
                extra_body={"seed": SEED, "max_frames": FRAMES, "min_frames": FRAMES}) as response:
            assert "content-length" not in response.headers and response.headers["transfer-encoding"] == "chunked"
            for piece in response.iter_bytes():
                if running_at_first is None and piece:
                    running_at_first = rt.stats()["running"]
                    hold.release()
                pieces.append(piece)
    finally:
        hold.release()
    assert running_at_first == 1, fmt
    _same_audio(fmt, b"".join(pieces), reference)


def test_a_default_mp3_stream_is_cut_short_when_the_client_leaves_after_its_first_bytes(live, client, monkeypatch):
    """The structural form of "the first byte comes before the file is done": a client that leaves after
    the first bytes of a long default (mp3) request cancels it, so it never finishes whole."""
    rt = shared_runtime()
    wait_idle(rt)
    slow_frames(rt.family.ar_loop, monkeypatch, 0.01)  # its 600 frames take >= 6 s however fast the host is
    before = _finished(live.url)
    with client.audio.speech.with_streaming_response.create(
            model=CARD, voice="alloy", input=TEXT, extra_body={"seed": 3, "max_frames": 600, "min_frames": 600}
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        first = next(piece for piece in response.iter_bytes() if piece)
    assert first[:3] == b"ID3" or first[0] == 0xFF  # an mp3 starts: a tag or a frame sync
    wait_idle(rt)
    deadline = time.monotonic() + 120  # a hang check
    while sum((after := _finished(live.url)).values()) == sum(before.values()):  # counted once it has ended
        assert time.monotonic() < deadline, "the request was never counted"
        time.sleep(0.01)
    assert after.get("abort", 0) == before.get("abort", 0) + 1  # cancelled: it never finished whole
    assert sum(after.values()) == sum(before.values()) + 1


@pytest.mark.parametrize("fmt", ["mp3", "wav", "pcm", "opus"])
def test_stream_false_is_the_whole_file_with_a_content_length(live, client, reference, fmt):
    response = client.audio.speech.with_raw_response.create(
        model=CARD, voice="alloy", input=TEXT, response_format=fmt,
        extra_body={"seed": SEED, "max_frames": FRAMES, "min_frames": FRAMES, "stream": False})
    data = response.content
    assert int(response.headers["content-length"]) == len(data) > 0
    assert "transfer-encoding" not in response.headers
    assert response.headers["x-finish-reason"] == "length" and int(response.headers["x-frames"]) == FRAMES
    _same_audio(fmt, data, reference)
    if fmt == "wav":  # the real sizes in the header, not the open-length ones a stream carries
        assert sf.info(io.BytesIO(data)).frames == reference.audio.shape[1]


def _wav_sizes(data: bytes) -> tuple[int, int]:
    """A 44-byte wav header's RIFF size and data size."""
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data", data[:44]
    return struct.unpack("<I", data[4:8])[0], struct.unpack("<I", data[40:44])[0]


def test_stream_to_file_gets_a_wav_with_its_real_sizes_when_not_streamed(client, reference, tmp_path):
    """`stream_to_file` with `stream: false` (`extra_body`; the SDK has no `stream` argument): the whole file
    is made before the response starts, so its header holds the real RIFF and data sizes and every reader
    (soxi included) gets its length. A streamed wav (the default) cannot know its length when the header
    leaves: both sizes are 0xFFFFFFFF, the "unknown" convention OpenAI and FFmpeg use, and readers that
    go by the header (soxi: 0xFFFFFFFF / 192,000 B/s = 6 h 12 min) are wrong about it; libsndfile reads to the
    end of the file."""
    body = {"seed": SEED, "max_frames": FRAMES, "min_frames": FRAMES}
    frames = reference.audio.shape[1]
    whole, streamed = tmp_path / "hello.wav", tmp_path / "streamed.wav"
    with client.audio.speech.with_streaming_response.create(
            model=CARD, voice="alloy", input=TEXT, response_format="wav",
            extra_body={**body, "stream": False}) as response:
        assert int(response.headers["content-length"]) > 44
        response.stream_to_file(whole)
    data = whole.read_bytes()
    riff, size = _wav_sizes(data)
    assert riff == len(data) - 8 and size == len(data) - 44 == frames * reference.audio.shape[0] * 2
    assert sf.info(whole).frames == frames and sf.info(whole).samplerate == reference.sample_rate
    _same_audio("wav", data, reference)

    with client.audio.speech.with_streaming_response.create(
            model=CARD, voice="alloy", input=TEXT, response_format="wav", extra_body=body) as response:
        assert "content-length" not in response.headers
        response.stream_to_file(streamed)
    data = streamed.read_bytes()
    assert _wav_sizes(data) == (0xFFFFFFFF, 0xFFFFFFFF) and len(data) == len(whole.read_bytes())
    assert sf.info(streamed).frames == frames


def _speaches_events(body: str) -> list[dict]:
    """SSE parsed as speaches' tests parse it: split on blank lines, keep the blocks that start with `data:`,
    the rest of the block is the JSON."""
    return [json.loads(block.removeprefix("data:").strip()) for block in body.split("\n\n")
            if block.startswith("data:")]


def test_sse_events_are_data_first_blocks(client, reference):
    with client.audio.speech.with_streaming_response.create(
            model=CARD, voice="alloy", input=TEXT, response_format="pcm", stream_format="sse",
            extra_body={"seed": SEED, "max_frames": FRAMES, "min_frames": FRAMES}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = b"".join(response.iter_bytes()).decode()
    blocks = [b for b in body.split("\n\n") if b]
    events = _speaches_events(body)
    assert len(events) == len(blocks) >= 3  # every block is an event
    kinds = [e["type"] for e in events]
    assert set(kinds[:-1]) == {"speech.audio.delta"} and kinds[-1] == "speech.audio.done"
    joined = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    _same_audio("pcm", joined, reference)
    assert events[-1]["usage"]["output_tokens"] == FRAMES


def test_the_ttfb_sweep_times_every_format_and_the_whole_file(live):
    from v2.bench.serving import workload
    from v2.bench.ttfb import FORMATS as SWEPT, WHOLE, ttfb_sweep

    sweep = ttfb_sweep(live.url, workload(2, seed=1, max_frames=6))
    assert list(sweep["formats"]) == [*SWEPT, WHOLE] and sweep["requests_per_format"] == 2
    for case, row in sweep["formats"].items():
        assert row["requests"] == 2 and row["pieces_p50"] >= 1, case
        assert 0 < row["headers_p50_s"] <= row["ttfb_p50_s"] <= row["done_p50_s"], case
    assert sweep["formats"]["pcm"]["ttfb_p50_minus_pcm_ms"] == 0.0
