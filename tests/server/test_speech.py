"""The speech endpoint through the official `openai` client and httpx against a real uvicorn server: the
audio is the runtime's own, sample for sample (s16), in every format, whole, streamed and as SSE events."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import soxr

from serverkit import CARD, TEXT, LiveServer, decode, in_process, s16, shared_runtime, wait_idle
from holds import Hold
from v2.server.audio import FORMATS, to_s16

SEED, FRAMES = 5, 20


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference():
    """The in-process result of the request most tests send."""
    return in_process(shared_runtime(), text=TEXT, seed=SEED, max_frames=FRAMES)


def test_openai_create_returns_the_runtimes_samples(client, reference):
    data = client.audio.speech.create(model=CARD, voice="alloy", input=TEXT, response_format="wav",
                                      extra_body={"seed": SEED, "max_frames": FRAMES}).content
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == reference.sample_rate and samples.shape == (reference.audio.shape[1], 2)
    assert len(samples) > 0 and np.array_equal(samples, s16(reference.audio))


def test_a_request_is_parsed_once_on_its_way_to_the_runtime(live, monkeypatch):
    """The fields the family maps the body onto become its typed request once (in the runtime's submit), not
    once in the server and again in the runtime."""
    family = live.state.runtime.family
    parse, seen = family.parse, []
    monkeypatch.setattr(family, "parse", lambda request: seen.append(type(request).__name__) or parse(request))
    body = {"input": TEXT, "seed": SEED, "max_frames": FRAMES, "response_format": "wav", "stream": False}
    r = httpx.post(live.url + "/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert seen == ["dict"]


def test_tts_1_with_alloy_speaks_with_the_default_voice(client, reference):
    data = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="flac",
                                      extra_body={"seed": SEED, "max_new_tokens": FRAMES}).content
    audio, _ = decode(data)  # a streamed flac (length unknown in STREAMINFO): FFmpeg reads it, libsndfile does not
    assert np.array_equal(np.round(audio.T * 32768).astype(np.int16), s16(reference.audio))
    whole = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="flac",
                                       extra_body={"seed": SEED, "max_new_tokens": FRAMES, "stream": False}).content
    samples, _ = sf.read(io.BytesIO(whole), dtype="int16")  # the whole file: any reader
    assert np.array_equal(samples, s16(reference.audio))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("streamed", [False, True])
def test_every_format_decodes_to_the_same_duration(live, reference, fmt, streamed):
    body = {"input": TEXT, "seed": SEED, "max_frames": FRAMES, "response_format": fmt, "stream": streamed}
    r = httpx.post(live.url + "/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == 200, r.text
    want = reference.audio.shape[1] / reference.sample_rate
    if fmt == "pcm":  # OpenAI's pcm: 24 kHz mono s16le, rate and channels in the headers
        assert r.headers["content-type"] == "audio/pcm"
        assert (r.headers["x-sample-rate"], r.headers["x-channels"]) == ("24000", "1")
        got = np.frombuffer(r.content, "<i2")
        mono = soxr.resample(reference.audio.mean(axis=0), reference.sample_rate, 24000, "HQ")
        assert np.array_equal(got, to_s16(mono))
        return
    audio, rate = decode(r.content)
    # lossy codecs add their encoder delay and padding where the container cannot say it (ADTS, a streamed mp3)
    slack = 0.08 if fmt in ("mp3", "aac") else 0.0
    assert abs(audio.shape[1] / rate - want) <= slack + 1e-9, (fmt, audio.shape, rate, want)
    if fmt in ("wav", "flac"):
        assert np.array_equal(np.round(audio.T * 32768).astype(np.int16), s16(reference.audio))


def test_streamed_pcm_arrives_before_the_request_ends(client, monkeypatch):
    rt = shared_runtime()
    seed, frames = 11, 24  # at least 24 frames: the first chunk (3 frames) leaves long before the end
    ref = in_process(rt, text=TEXT, seed=seed, max_frames=frames, min_frames=frames)
    wait_idle(rt)  # so the one request running below is this one
    # its frames are held at the 10th until the first bytes are here: it cannot end first however fast the host
    # is; bytes held back to the end never come while it waits, and the check below fails
    hold = Hold(rt.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10, timeout=30)
    received, running_at_first = [], None
    try:
        with client.audio.speech.with_streaming_response.create(
                model=CARD, voice="alloy", input=TEXT, response_format="pcm",
                extra_body={"seed": seed, "max_frames": frames, "min_frames": frames,
                            "sample_rate": 48000}) as response:
            assert response.headers["content-type"] == "audio/pcm"
            for piece in response.iter_bytes():
                if running_at_first is None and piece:
                    running_at_first = rt.stats()["running"]
                    hold.release()
                received.append(piece)
    finally:
        hold.release()
    assert running_at_first == 1  # the first bytes were here while the request was still running
    got = np.frombuffer(b"".join(received), "<i2")
    assert np.array_equal(got, to_s16(ref.audio.mean(axis=0)))


def _sse_events(text: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


def test_sse_events_join_into_the_same_samples(live, reference):
    body = {"input": TEXT, "seed": SEED, "max_frames": FRAMES, "response_format": "wav", "stream_format": "sse"}
    with httpx.stream("POST", live.url + "/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(r.read().decode())
    kinds = [e["type"] for e in events]
    assert kinds.count("speech.audio.done") == 1 and kinds[-1] == "speech.audio.done"
    assert set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) >= 3  # several chunks, then done
    joined = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert joined[:4] == b"RIFF" and joined[40:44] == b"\xff\xff\xff\xff"  # open-length header
    samples = np.frombuffer(joined[44:], "<i2").reshape(-1, 2)
    assert np.array_equal(samples, s16(reference.audio))
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == reference.metrics.frames
    assert usage["input_tokens"] == reference.metrics.prompt_rows
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_sixteen_concurrent_streams_each_get_their_own_audio(live):
    rt = shared_runtime()
    texts = [f"Client number {i} says {'hello ' * (i % 4 + 1)}" for i in range(16)]
    handles = [rt.submit({"text": t, "seed": 100 + i, "max_frames": FRAMES}) for i, t in enumerate(texts)]
    want = [s16(h.result(timeout=120).audio) for h in handles]

    async def one(client: httpx.AsyncClient, i: int) -> tuple[bytes, int]:
        body = {"input": texts[i], "seed": 100 + i, "max_frames": FRAMES, "response_format": "wav",
                "stream_format": "audio"}
        parts, reads = [], 0
        async with client.stream("POST", "/v1/audio/speech", json=body) as r:
            assert r.status_code == 200
            async for piece in r.aiter_bytes():
                parts.append(piece)
                reads += 1
        return b"".join(parts), reads

    async def run_all() -> list[tuple[bytes, int]]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=live.url, timeout=120, limits=limits) as client:
            return await asyncio.gather(*(one(client, i) for i in range(16)))

    results = asyncio.run(run_all())
    assert len({w.tobytes() for w in want}) == 16  # sixteen different utterances
    for (data, _), expected in zip(results, want):
        assert np.array_equal(np.frombuffer(data[44:], "<i2").reshape(-1, 2), expected)
