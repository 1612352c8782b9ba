"""`/v1/audio/speech/stream` over a real port with a real websocket client (`websockets`): vllm-omni's protocol
(session.config, input.text, input.done as a flush that keeps the connection, session.close; audio.start,
binary frames, audio.done, session.done, error), sentences spoken before input.done, the audio equal to the
runtime's own for the same text and seed, flush-only on request, bad messages answered with an error naming
the field without ending the session, and the API key and Origin rule at the handshake."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
import soxr
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from serverkit import LiveServer, s16, shared_runtime, wait_idle
from v2.server.audio import to_s16

TEXT = "The quiet river runs past old stone houses. A second sentence follows it! And a last one"
CONFIG = {"type": "session.config", "seed": 7, "max_new_tokens": 6, "min_new_tokens": 1}


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def ws_url(live) -> str:
    return live.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


async def recv_json(ws) -> dict:
    while True:
        msg = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(msg, str):
            return json.loads(msg)


async def utterance(ws, started: bool = False) -> tuple[list[dict], list[bytes], list[list[bytes]]]:
    """Every message up to session.done: the JSON ones, every binary frame, and the frames per sentence
    (`started`: the first audio.start was read already)."""
    events, frames, sentences = [], [], [[]] if started else []
    while True:
        msg = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(msg, bytes):
            frames.append(msg)
            sentences[-1].append(msg)
            continue
        event = json.loads(msg)
        events.append(event)
        if event["type"] == "audio.start":
            sentences.append([])
        if event["type"] == "session.done":
            return events, frames, sentences


def reference(text: str, **request) -> object:
    h = shared_runtime().open({"seed": 7, "max_frames": 6, "min_frames": 1, **request})
    h.feed(text)
    h.end_text()
    return h.result(120)


def test_sentences_come_as_the_text_arrives_and_equal_the_runtime_s_audio(live):
    ref = reference(TEXT)
    hop = shared_runtime().sample_rate // 12.5

    async def go():
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({**CONFIG, "response_format": "wav"}))
            ready = await recv_json(ws)
            assert ready["type"] == "session.ready" and ready["incremental"] is True
            rng = random.Random(3)
            pos = 0
            while pos < len(TEXT):
                n = rng.randint(1, 9)
                await ws.send(json.dumps({"type": "input.text", "text": TEXT[pos:pos + n]}))
                pos += n
            first = await recv_json(ws)  # before input.done: the first sentence is spoken already
            assert first == {"type": "audio.start", "utterance_index": 0, "sentence_index": 0,
                             "sentence_text": "The quiet river runs past old stone houses.", "format": "wav",
                             "sample_rate": ref.sample_rate}
            await ws.send(json.dumps({"type": "input.done"}))
            events, _, sentences = await utterance(ws, started=True)
            events = [first, *events]
            # the connection stays open: a second utterance over it
            await ws.send(json.dumps({"type": "input.text", "text": "One more time."}))
            await ws.send(json.dumps({"type": "input.done"}))
            again, _, _ = await utterance(ws)
            await ws.send(json.dumps({"type": "session.close"}))
            await asyncio.wait_for(ws.wait_closed(), 30)
            return events, sentences, again

    events, sentences, again = asyncio.run(go())
    kinds = [e["type"] for e in events]
    assert kinds == ["audio.start", "audio.done"] * 3 + ["session.done"]
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
    assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == [
        "The quiet river runs past old stone houses.", "A second sentence follows it!", "And a last one"]
    for i, (seg, frames) in enumerate(zip(ref.segments, sentences)):
        assert len(frames) == 1  # not streamed: the sentence's whole wav file in one frame
        data = frames[0]
        samples = np.frombuffer(data[44:], "<i2").reshape(-1, ref.audio.shape[0])
        want = ref.audio[:, int(seg.frame_start * hop):int(seg.frame_end * hop)]
        assert np.array_equal(samples, s16(want)), i
        done = events[2 * i + 1]
        assert done == {"type": "audio.done", "utterance_index": 0, "sentence_index": i, "total_bytes": len(data),
                        "error": False}
    assert again[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    wait_idle(shared_runtime())


def test_stream_audio_sends_pcm_as_it_is_made(live):
    ref = reference(TEXT)
    hop = shared_runtime().sample_rate // 12.5

    async def go():
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm", "stream_audio": True}))
            assert (await recv_json(ws))["stream_audio"] is True
            await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
            await ws.send(json.dumps({"type": "input.done"}))
            return await utterance(ws)

    events, _, sentences = asyncio.run(go())
    assert events[-1]["total_sentences"] == 3
    for seg, frames in zip(ref.segments, sentences):
        want = ref.audio[:, int(seg.frame_start * hop):int(seg.frame_end * hop)].mean(axis=0)
        pcm = np.frombuffer(b"".join(frames), "<i2")
        assert np.array_equal(pcm, to_s16(soxr.resample(want, ref.sample_rate, 24000, "HQ")))
    wait_idle(shared_runtime())


def test_flush_only_waits_for_input_done(live):
    async def go():
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm", "split_granularity": "none"}))
            assert (await recv_json(ws))["incremental"] is False
            await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
            with pytest.raises(asyncio.TimeoutError):  # nothing is spoken before the flush
                await asyncio.wait_for(ws.recv(), 1.0)
            await ws.send(json.dumps({"type": "input.done"}))
            return await utterance(ws)

    events, _, _ = asyncio.run(go())
    assert events[0]["type"] == "audio.start" and events[-1]["total_sentences"] == 3
    wait_idle(shared_runtime())


def test_bad_messages_get_an_error_naming_the_field_and_the_session_goes_on(live):
    async def go():
        async with connect(ws_url(live)) as ws:
            answers = []
            for bad in ("not json", json.dumps([1]), json.dumps({"type": "input.text", "text": "early"}),
                        json.dumps({**CONFIG, "temperature": "hot"}), json.dumps({**CONFIG, "response_format": "ogg"}),
                        json.dumps({**CONFIG, "stream_audio": True, "response_format": "wav"}),
                        json.dumps({**CONFIG, "input": "hi"}), json.dumps({**CONFIG, "split_granularity": "word"}),
                        json.dumps({**CONFIG, "speed": 2.0}), json.dumps({**CONFIG, "model": "nope"}),
                        json.dumps({"type": "dance"})):
                await ws.send(bad)
                answers.append(await recv_json(ws))
            await ws.send(b"\x00\x01")
            answers.append(await recv_json(ws))
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm"}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "input.text", "text": 5}))
            answers.append(await recv_json(ws))
            await ws.send(json.dumps({"type": "input.text", "text": "x" * 5000}))
            answers.append(await recv_json(ws))
            await ws.send(json.dumps({"type": "input.text", "text": "Still here."}))
            await ws.send(json.dumps({"type": "input.done"}))
            events, frames, _ = await utterance(ws)
            return answers, events, frames

    answers, events, frames = asyncio.run(go())
    assert all(a["type"] == "error" for a in answers), answers
    assert [a["param"] for a in answers] == ["message", "message", "type", "temperature", "response_format",
                                            "stream_audio", "input", "split_granularity", "speed", "model", "type",
                                            "message", "text", "text"]
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1} and frames
    wait_idle(shared_runtime())


def test_the_api_key_and_the_origin_rule_apply_at_the_handshake():
    with LiveServer(shared_runtime(), api_key="sekrit") as server:
        url = ws_url(server)

        async def status(**headers) -> int:
            try:
                async with connect(url, additional_headers=headers) as ws:
                    await ws.send(json.dumps({**CONFIG, "response_format": "pcm"}))
                    return 101 if (await recv_json(ws))["type"] == "session.ready" else 0
            except InvalidStatus as e:
                return e.response.status_code

        assert asyncio.run(status()) == 401
        assert asyncio.run(status(Authorization="Bearer wrong")) == 401
        assert asyncio.run(status(Authorization="Bearer sekrit", Origin="https://evil.example")) == 403
        assert asyncio.run(status(Authorization="Bearer sekrit")) == 101
        host = url.split("//")[1].split("/")[0]
        assert asyncio.run(status(Authorization="Bearer sekrit", Origin=f"http://{host}")) == 101


def test_a_client_that_leaves_mid_sentence_frees_everything(live):
    async def go():
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm", "stream_audio": True, "max_new_tokens": 40}))
            await recv_json(ws)
            await ws.send(json.dumps({"type": "input.text", "text": "A sentence to cut short. And"}))
            assert (await recv_json(ws))["type"] == "audio.start"

    asyncio.run(go())
    wait_idle(shared_runtime(), timeout=30)


def test_a_family_without_a_conversation_refuses_context_and_behaves_as_before(live):
    """MOSS-TTS-Local takes no `context`: a config with it and `context.append` are refused naming them; after
    an utterance, the next one speaks exactly as alone (nothing of the first becomes context)."""
    async def go():
        async with connect(ws_url(live)) as ws:
            answers = []
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm", "context": [{"text": "Hi."}]}))
            answers.append(await recv_json(ws))
            await ws.send(json.dumps({**CONFIG, "response_format": "pcm", "stream_audio": True}))
            assert (await recv_json(ws))["type"] == "session.ready"
            await ws.send(json.dumps({"type": "context.append", "text": "Hi."}))
            answers.append(await recv_json(ws))
            spoken = []
            for text in ("First one.", "Second one."):
                await ws.send(json.dumps({"type": "input.text", "text": text}))
                await ws.send(json.dumps({"type": "input.done"}))
                spoken.append(b"".join((await utterance(ws))[1]))
            return answers, spoken

    answers, spoken = asyncio.run(go())
    assert [(a["type"], a["param"], a["code"]) for a in answers] == [("error", "context", "unsupported"),
                                                                      ("error", "type", "unsupported")], answers
    ref = reference("Second one.")
    want = soxr.resample(ref.audio.mean(axis=0), ref.sample_rate, 24000, "HQ")
    assert np.array_equal(np.frombuffer(spoken[1], "<i2"), to_s16(want))
    wait_idle(shared_runtime())
