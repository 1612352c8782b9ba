"""Word timestamps on every HTTP surface, a real server on 127.0.0.1 over the tiny card with the seeded
`forced_aligner_tiny` aligner (its times are noise, but they are the runtime's): SSE `speech.timestamps` events,
each after the audio its words span and before `speech.audio.done`, equal to the JSON answer's words and to the
runtime's own `result.words`, one per word of the text in order; the captioned JSON and its Kokoro-FastAPI path
alike (the same audio file, base64); a batch item's words; the stream's `speech.timestamps` per sentence after
its `audio.done`, and vllm-omni's shape for its `word_timestamps` (the audio as `audio.chunk` events, then one
with the sentence's words in milliseconds from its start, before its `audio.done`); a barge-in acknowledgement with the words sent and, of them, those heard before `played_ms`;
every answer and event valid against /openapi.json."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

from serverkit import CARD, LiveServer
from v2.runtime import Runtime
from wskit import until, ws_url

SPEECH = "/v1/audio/speech"
TEXT = "The quiet river runs past old stone houses."
BODY = {"input": TEXT, "max_frames": 30, "seed": 7, "response_format": "pcm"}


@pytest.fixture(scope="module")
def rt():
    runtime = Runtime.from_card(CARD, aligner="forced_aligner_tiny")
    assert runtime.has_aligner
    yield runtime
    runtime.close()


@pytest.fixture(scope="module")
def live(rt):
    with LiveServer(rt) as server:
        server.spec = httpx.get(server.url + "/openapi.json").json()
        yield server


def _validator(spec: dict, schema: dict) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]})


def _answer_schema(spec: dict, path: str, media: str = "application/json") -> dict:
    return spec["paths"][path]["post"]["responses"]["200"]["content"][media]["schema"]


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text)


def _sse(live: Any, body: dict) -> list[dict]:
    r = httpx.post(live.url + SPEECH, json={**body, "timestamps": "word", "stream_format": "sse"}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks)
    return [json.loads(b[len("data: "):]) for b in blocks]


def test_sse_words_follow_their_audio_and_equal_the_json_answers_and_the_runtimes(rt, live):
    events = _sse(live, BODY)
    data = _validator(live.spec, _answer_schema(live.spec, SPEECH, "text/event-stream")["properties"]["data"][
        "contentSchema"])
    for e in events:
        data.validate(e)
    assert events[-1]["type"] == "speech.audio.done"
    stamps = [i for i, e in enumerate(events) if e["type"] == "speech.timestamps"]
    assert stamps, [e["type"] for e in events]
    sent_s, said = 0.0, []
    for e in events:  # pcm: s16 mono at 24 kHz
        if e["type"] == "speech.audio.delta":
            sent_s += len(base64.b64decode(e["audio"])) / 2 / 24000
        elif e["type"] == "speech.timestamps":
            assert all(w["end"] <= sent_s + 1e-3 for w in e["words"]), (e, sent_s)  # after the audio they span
            said += e["words"]
    assert [w["word"] for w in said] == _words(TEXT)
    whole = httpx.post(live.url + SPEECH, json={**BODY, "timestamps": "word"}, timeout=120)
    assert whole.status_code == 200 and whole.headers["content-type"] == "application/json"
    got = whole.json()
    _validator(live.spec, _answer_schema(live.spec, SPEECH)).validate(got)
    assert [(w["word"], w["start"], w["end"]) for w in said] == [
        (w["word"], w["start_time"], w["end_time"]) for w in got["timestamps"]]
    ref = rt.submit({"text": TEXT, "max_frames": 30, "seed": 7, "timestamps": "word"}).result(timeout=120)
    assert [(w.word, w.start, w.end) for w in ref.words] == [(w["word"], w["start"], w["end"]) for w in said]
    streamed = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert base64.b64decode(got["audio"]) == streamed  # the same pcm, streamed or whole


LONG = " ".join([  # 363 characters: two segments on the tiny card (max_segment_chars 300), whole sentences each
    "The quiet river runs past old stone houses.", "A small boat drifts under the bridge at noon.",
    "Children wave from the bank and call out names.", "The miller counts his sacks before the rain.",
    "Swallows dip low over the water near the mill.", "By evening the lamps glow in every window.",
    "A dog barks twice and then the lane is still.", "Far off a bell rings for the end of the day."])


def test_sse_sends_a_long_texts_words_segment_by_segment_not_at_the_end(live):
    # 20 frames a segment: the first segment's audio (3 + 6 + 12 frames of chunks) goes out before the second's;
    # its words are published while the second is made, so they come before the last audio event
    events = _sse(live, {"input": LONG, "max_frames": 20, "seed": 7, "response_format": "pcm"})
    kinds = [e["type"] for e in events]
    stamps = [i for i, k in enumerate(kinds) if k == "speech.timestamps"]
    assert len(stamps) >= 2, kinds  # one event per segment
    assert stamps[0] < max(i for i, k in enumerate(kinds) if k == "speech.audio.delta"), kinds
    assert [events[i]["sentence_index"] for i in stamps] == list(range(len(stamps)))
    assert [w["word"] for i in stamps for w in events[i]["words"]] == _words(LONG)


def test_the_captioned_path_answers_as_the_speech_route_with_timestamps(live):
    body = {**BODY, "response_format": "wav"}
    alias = httpx.post(live.url + "/dev/captioned_speech", json={**body, "stream": True}, timeout=120)
    assert alias.status_code == 200 and alias.headers["content-type"] == "application/json", alias.text
    assert alias.text.endswith("}\n")  # one JSON line: what a reader of Kokoro's streamed lines reads too
    _validator(live.spec, _answer_schema(live.spec, "/dev/captioned_speech")).validate(alias.json())
    speech = httpx.post(live.url + SPEECH, json={**body, "timestamps": "word", "stream": False}, timeout=120)
    assert alias.json() == speech.json()
    assert alias.json()["audio_format"] == "audio/wav" and base64.b64decode(alias.json()["audio"])[:4] == b"RIFF"
    assert [t["word"] for t in alias.json()["timestamps"]] == _words(TEXT)
    plain = httpx.post(live.url + "/dev/captioned_speech", json={**body, "return_timestamps": False}, timeout=120)
    assert plain.json()["timestamps"] is None and plain.json()["audio"] == alias.json()["audio"]


def test_a_raw_audio_stream_with_timestamps_is_refused_naming_it(live):
    r = httpx.post(live.url + SPEECH, json={**BODY, "timestamps": "word", "stream": True}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "timestamps"


def test_a_batch_item_carries_its_words(rt, live):
    r = httpx.post(live.url + SPEECH + "/batch", json={"max_frames": 30, "seed": 7, "items": [
        {"input": TEXT, "timestamps": "word"}, {"input": "Hello there."}]}, timeout=120)
    got = r.json()
    assert r.status_code == 200 and got["succeeded"] == 2, r.text
    _validator(live.spec, _answer_schema(live.spec, SPEECH + "/batch")).validate(got)
    ref = rt.submit({"text": TEXT, "max_frames": 30, "seed": 7, "timestamps": "word"}).result(timeout=120)
    assert got["results"][0]["words"] == [{"word": w.word, "start": w.start, "end": w.end} for w in ref.words]
    assert "words" not in got["results"][1]


SENTENCES = ("The quiet river runs past old stone houses.", "A small boat drifts under the bridge.")


async def _session(live: Any, config: dict) -> Any:
    from websockets.asyncio.client import connect
    ws = await connect(ws_url(live))
    await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                              "max_frames": 30, "seed": 3, **config}))
    events, _ = await until(ws, "session.ready")
    assert events[-1]["type"] == "session.ready", events
    return ws


def test_the_stream_sends_each_sentences_words_after_its_audio(live):
    check = _validator(live.spec, {"$ref": "#/components/schemas/StreamServerEvent"})

    async def run() -> list[dict]:
        ws = await _session(live, {"timestamps": "word"})
        async with ws:
            await ws.send(json.dumps({"type": "input.text", "text": " ".join(SENTENCES)}))
            await ws.send(json.dumps({"type": "input.done"}))
            events, _ = await until(ws, "session.done", timeout=120)
        return events

    events = asyncio.run(run())
    for e in events:
        check.validate(e)
    kinds = [(e["type"], e.get("sentence_index")) for e in events if e["type"] != "session.done"]
    for i, sentence in enumerate(SENTENCES):
        stamp = kinds.index(("speech.timestamps", i))
        assert stamp > kinds.index(("audio.done", i))  # after its audio
        words = events[stamp]["words"]
        assert [w["word"] for w in words] == _words(sentence)
        assert all(0 <= w["start"] <= w["end"] for w in words)
    assert events[-1]["type"] == "session.done" and "cancelled" not in events[-1]


def test_a_barge_in_acknowledges_the_words_sent_and_those_heard(live):
    """The utterance's text is left open after two sentences and a piece, so it cannot end on its own: the first
    sentence's audio is whole (the second has begun), its words come, then the cancel."""
    check = _validator(live.spec, {"$ref": "#/components/schemas/StreamServerEvent"})

    async def one(ws: Any, played_ms: float) -> tuple[list[dict], dict]:
        await ws.send(json.dumps({"type": "input.text", "text": " ".join(SENTENCES) + " And then"}))
        events, _ = await until(ws, "speech.timestamps", timeout=120)
        first = events[-1]
        assert first["sentence_index"] == 0, first
        await ws.send(json.dumps({"type": "input.cancel", "played_ms": played_ms}))
        more, _ = await until(ws, "input.cancelled", timeout=60)
        for e in events + more:
            check.validate(e)
        return first["words"], more[-1]

    async def run() -> list[tuple[list[dict], dict]]:
        ws = await _session(live, {"timestamps": "word"})
        async with ws:
            return [await one(ws, 1e9), await one(ws, 0)]

    (words, everything), (words2, nothing) = asyncio.run(run())
    assert everything["cancelled"] is True
    sent = everything["words_sent"]
    assert sent[:len(words)] == words  # the first sentence's words went out whole
    assert [w["word"] for w in sent] == _words(" ".join(SENTENCES))[:len(sent)]
    assert everything["words_heard"] == sent  # all played
    assert nothing["words_sent"][:len(words2)] == words2
    assert nothing["words_heard"] == [w for w in nothing["words_sent"] if w["end"] <= 0]  # none played


def test_vllm_omnis_word_timestamps_shape(live):
    """The same utterance under `timestamps: "word"` (binary pcm, `speech.timestamps`) and vllm-omni's
    `word_timestamps: true` (`audio.chunk` events): the same pcm per sentence, the same words, in milliseconds
    from each sentence's start, each sentence's events in vllm-omni's order."""
    check = _validator(live.spec, {"$ref": "#/components/schemas/StreamServerEvent"})

    async def utterance(config: dict) -> tuple[list[dict], list[bytes]]:
        """Its events, and each sentence's binary frames joined (in the order they came)."""
        ws = await _session(live, config)
        events: list[dict] = []
        pcm: list[bytes] = []
        async with ws:
            await ws.send(json.dumps({"type": "input.text", "text": " ".join(SENTENCES)}))
            await ws.send(json.dumps({"type": "input.done"}))
            while not events or events[-1]["type"] != "session.done":
                msg = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(msg, bytes):
                    pcm[-1] += msg
                else:
                    events.append(json.loads(msg))
                    pcm += [b""] if events[-1]["type"] == "audio.start" else []
        return events, pcm

    async def run() -> tuple[Any, Any]:
        return await utterance({"timestamps": "word"}), await utterance({"word_timestamps": True})

    (ours, frames), (theirs, none) = asyncio.run(run())
    assert not any(none)  # vllm-omni's shape sends no binary frame
    for e in theirs:
        check.validate(e)
    start_s = 0.0
    for i, sentence in enumerate(SENTENCES):
        mine = [e for e in theirs if e.get("sentence_index") == i]
        kinds = [e["type"] for e in mine]
        assert kinds[0] == "audio.start" and mine[0]["word_timestamps"] is True
        assert kinds[-2:] == ["audio.chunk", "audio.done"] and set(kinds[1:-1]) == {"audio.chunk"}, kinds
        last = mine[-2]
        assert last["audio_b64"] == "" and last["chunk_id"] == len(mine) - 3
        pcm = b"".join(base64.b64decode(e["audio_b64"]) for e in mine[1:-2])
        assert all(e["timestamps"] is None for e in mine[1:-2])
        begin = [j for j, e in enumerate(ours) if e["type"] == "audio.start" and e["sentence_index"] == i][0]
        done = [j for j, e in enumerate(ours) if e["type"] == "audio.done" and e["sentence_index"] == i][0]
        assert pcm == frames[i] and mine[-1]["total_bytes"] == len(pcm) == ours[done]["total_bytes"]
        words = [e for e in ours if e["type"] == "speech.timestamps" and e["sentence_index"] == i][0]["words"]
        assert last["timestamps"] == [{"word": w["word"], "start_ms": round((w["start"] - start_s) * 1000),
                                       "end_ms": round((w["end"] - start_s) * 1000)} for w in words]
        assert [w["word"] for w in words] == _words(sentence) and begin < done
        start_s += len(pcm) / 2 / 24000


@pytest.mark.parametrize("config", [{"word_timestamps": True}, {"word_timestamps": True, "response_format": "wav"},
                                    {"word_timestamps": "yes", "stream_audio": True}])
def test_vllm_omnis_word_timestamps_needs_streamed_pcm(live, config):
    from websockets.asyncio.client import connect

    async def run() -> dict:
        async with connect(ws_url(live)) as ws:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", **config}))
            return json.loads(await asyncio.wait_for(ws.recv(), 60))
    e = asyncio.run(run())
    assert e["type"] == "error" and e["param"] == "word_timestamps", e


def test_a_barge_in_under_vllm_omnis_shape_closes_every_sentence_begun(live):
    """Under `word_timestamps` a sentence's audio.done waits for its words: a cancel closes every sentence whose
    audio.start went out (each once), and its acknowledgement lists the first sentence's words (in seconds)."""
    check = _validator(live.spec, {"$ref": "#/components/schemas/StreamServerEvent"})

    async def run() -> list[dict]:
        ws = await _session(live, {"word_timestamps": True})
        async with ws:
            await ws.send(json.dumps({"type": "input.text", "text": " ".join(SENTENCES) + " And then"}))
            events: list[dict] = []
            while not (events and events[-1]["type"] == "audio.chunk" and events[-1]["timestamps"]):
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            await ws.send(json.dumps({"type": "input.cancel", "played_ms": 1e9}))
            more, _ = await until(ws, "input.cancelled", timeout=60)
        return events + more

    events = asyncio.run(run())
    for e in events:
        check.validate(e)
    started = [e["sentence_index"] for e in events if e["type"] == "audio.start"]
    done = [e["sentence_index"] for e in events if e["type"] == "audio.done"]
    assert sorted(done) == started and len(set(done)) == len(done)  # each sentence begun closed once
    ack = events[-1]
    assert ack["type"] == "input.cancelled" and ack["cancelled"] is True
    first = next(e for e in events if e["type"] == "audio.chunk" and e["timestamps"])
    assert [w["word"] for w in ack["words_sent"]][:len(first["timestamps"])] == [
        w["word"] for w in first["timestamps"]] == _words(SENTENCES[0])
    assert ack["words_heard"] == ack["words_sent"]
