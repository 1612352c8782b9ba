"""A conversation over the server on the seeded `csm_tiny` card, with real clients on a free loopback port:
over HTTP, `context` turns (audio as base64 or a data URL, a stored voice) speak exactly what the in-process
runtime speaks with the same turns; bad turns are refused naming `context`. Over the WebSocket, one socket
holds a conversation: each utterance is opened with the turns before it (earlier utterances as their text
and codes, a turn the client appended with `context.append`), so turn k's audio equals an in-process request
whose context is turns 1..k-1 (same seed); a new config's `voice` changes who speaks next and keeps the
conversation; the oldest turns are dropped at the server's cap and where the family refuses the context as
too long."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any, Iterator

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect

from v2.server import ServerConfig, create_app
from v2.server.audio import to_s16
from v2.server.serve import ThreadedServer

SPEECH = "/v1/audio/speech"
STREAM = "/v1/audio/speech/stream"


def tiny_card(**backbone: Any) -> Any:
    from v2.card import load_card

    card = load_card("csm_tiny")
    data = card.model_dump(by_alias=True)
    data["loops"]["backbone"] = card.loops.backbone.model_copy(update=backbone).model_dump(by_alias=True)
    return type(card).model_validate(data)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Iterator[Any]:
    from v2.runtime import Runtime

    rt = Runtime.from_card("csm_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def wav() -> bytes:
    """0.7 s of a tone at 16 kHz as a WAV file (resampled to 24 kHz on the way in)."""
    t = np.arange(int(0.7 * 16000)) / 16000
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV")
    return buffer.getvalue()


def serve(rt: Any, **options: Any) -> ThreadedServer:
    return ThreadedServer(create_app(rt, ServerConfig.for_card("csm_tiny", **options)))


def pcm(audio: np.ndarray) -> np.ndarray:
    """The runtime's audio (24 kHz mono) as the server's pcm: s16, no resampling."""
    return to_s16(audio.T)[:, 0]


# ----- HTTP ---------------------------------------------------------------------------------------------
def test_http_context_turns_speak_as_the_runtime(tiny, wav):
    voice = tiny.voices.add("host", wav, text="Welcome back.", replace=True)
    b64 = base64.b64encode(wav).decode()
    turns = [{"speaker": 0, "text": "Hi, how are you?", "audio": b64}, {"speaker": 1, "voice": "host"}]
    body = {"input": "Fine, thanks.", "voice": "1", "seed": 4, "max_new_tokens": 5, "response_format": "pcm"}
    with serve(tiny) as server:
        whole = httpx.post(server.url + SPEECH, json={**body, "context": turns, "stream": False}, timeout=300)
        turns[0] = {**turns[0], "audio": "data:audio/wav;base64," + b64}
        streamed = httpx.post(server.url + SPEECH, json={**body, "context": turns}, timeout=300)
    assert whole.status_code == 200, whole.text[:500]
    assert streamed.status_code == 200, streamed.text[:500]
    expected = tiny.submit({"text": "Fine, thanks.", "speaker": 1, "seed": 4, "max_frames": 5, "context": [
        {"speaker": 0, "text": "Hi, how are you?", "audio": wav},
        {"speaker": 1, "text": "Welcome back.", "codes": voice.codes}]}).result()
    alone = tiny.submit({"text": "Fine, thanks.", "speaker": 1, "seed": 4, "max_frames": 5}).result()
    assert len(expected.audio[0]) and not np.array_equal(expected.codes, alone.codes)  # the context counts
    assert np.array_equal(np.frombuffer(whole.content, "<i2"), pcm(expected.audio))
    assert np.array_equal(np.frombuffer(streamed.content, "<i2"), pcm(expected.audio))


BAD_TURNS = [  # (context, how the message starts)
    ("one turn", "context: Input should be a valid list"),
    ([{"speaker": True, "text": "Hi."}], "context[0].speaker: "),
    ([{"text": "Hi.", "extra": 1}], "context[0]: Extra inputs"),
    ([{"text": "Hi.", "audio": "!!"}], "context[0].audio: not valid base64"),
    ([{"text": "Hi."}, {"text": "Yes.", "audio": "http://127.0.0.1/a.wav"}], "context[1].audio: URLs are not fetched"),
    ([{"text": "Hi.", "audio": "file:///etc/passwd"}], "context[0].audio: file:// is off"),
    ([{"voice": "nobody"}], "context[0].voice: no stored voice named 'nobody'"),
    ([{"voice": "host", "text": "Hi."}], "context[0].voice: a stored voice is the turn's text and audio"),
    ([{"voice": "mute"}], "context[0].voice: the stored voice 'mute' has no transcript"),
    ([{"speaker": 0}], "context.text: give text or text_ids"),
    ([{"text": "Hi.", "audio": base64.b64encode(b"not audio at all").decode()}], "context.audio: "),
    ([{"text": "Hi.", "text_ids": [72]}], "context.text: give text or text_ids, not both"),
    ([{"text": "Hi.", "speaker": -1}], "context.0.speaker: "),
    ([{"text": "x" * 30_000}], "context.text: 30000 characters"),
    ([{"text": "Hi."}] * 17, "context: 17 turns, over the card's max_context_turns (16)"),
]


@pytest.mark.parametrize("context, message", BAD_TURNS)
def test_a_bad_context_is_refused_naming_it(tiny, wav, context, message):
    tiny.voices.add("host", wav, text="Welcome back.", replace=True)
    tiny.voices.add("mute", wav, replace=True)
    with serve(tiny) as server:
        r = httpx.post(server.url + SPEECH, json={"input": "Fine.", "context": context, "response_format": "pcm"},
                       timeout=120)
    assert r.status_code == 400, r.text[:500]
    err = r.json()["error"]
    assert err["param"] == "context" and err["message"].startswith(message), err


# ----- the WebSocket ------------------------------------------------------------------------------------
async def said(ws: Any, text: str) -> tuple[list[dict], bytes]:
    """One utterance (in two pieces): its events up to session.done and its pcm."""
    half = len(text) // 2
    await ws.send(json.dumps({"type": "input.text", "text": text[:half]}))
    await ws.send(json.dumps({"type": "input.text", "text": text[half:]}))
    await ws.send(json.dumps({"type": "input.done"}))
    events, data = [], b""
    while True:
        msg = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(msg, bytes):
            data += msg
            continue
        events.append(json.loads(msg))
        assert events[-1]["type"] != "error", events[-1]
        if events[-1]["type"] == "session.done":
            return events, data


async def answer(ws: Any) -> dict:
    while True:
        msg = await asyncio.wait_for(ws.recv(), 120)
        if isinstance(msg, str):
            return json.loads(msg)


CONFIG = {"type": "session.config", "voice": "1", "seed": 7, "max_new_tokens": 4, "response_format": "pcm",
          "stream_audio": True}
SAID = ("Hello there.", "I am fine, thanks.", "Shall we go?")
HEARD = "Hi! How are you?"


def test_a_websocket_conversation_speaks_each_turn_in_the_context_of_the_earlier_ones(tiny, wav):
    async def go(url: str) -> list[tuple[list[dict], bytes]]:
        async with connect(url) as ws:
            await ws.send(json.dumps(CONFIG))
            assert (await answer(ws))["type"] == "session.ready"
            out = [await said(ws, SAID[0])]
            await ws.send(json.dumps({"type": "context.append", "speaker": 0, "text": HEARD,
                                      "audio": base64.b64encode(wav).decode()}))
            assert await answer(ws) == {"type": "context.appended", "context_turns": 2}
            out.append(await said(ws, SAID[1]))
            await ws.send(json.dumps({**CONFIG, "voice": "0"}))  # who speaks next; the conversation is kept
            assert (await answer(ws))["type"] == "session.ready"
            out.append(await said(ws, SAID[2]))
            await ws.send(json.dumps({"type": "session.close"}))
            return out

    with serve(tiny) as server:
        spoken = asyncio.run(go(server.url.replace("http://", "ws://") + STREAM))

    def alone(text: str, speaker: int, context: list[dict]) -> Any:
        return tiny.submit({"text": text, "speaker": speaker, "seed": 7, "max_frames": 4,
                            "context": context or None}).result()

    r1 = alone(SAID[0], 1, [])
    heard = {"speaker": 0, "text": HEARD, "audio": wav}
    r2 = alone(SAID[1], 1, [{"speaker": 1, "text": SAID[0], "codes": r1.codes}, heard])
    r3 = alone(SAID[2], 0, [{"speaker": 1, "text": SAID[0], "codes": r1.codes}, heard,
                            {"speaker": 1, "text": SAID[1], "codes": r2.codes}])
    for k, ((events, data), ref) in enumerate(zip(spoken, (r1, r2, r3))):
        assert np.array_equal(np.frombuffer(data, "<i2"), pcm(ref.audio)), k
        start = events[0]
        assert start["type"] == "audio.start" and start["sentence_text"] == SAID[k]
        assert events[-1] == {"type": "session.done", "utterance_index": k, "total_sentences": 1}
    without = alone(SAID[2], 0, [])
    assert not np.array_equal(without.codes, r3.codes)  # the context made a difference


def test_the_oldest_turns_are_dropped_at_the_cap_and_where_the_family_refuses_them(wav):
    from v2.runtime import Runtime

    rt = Runtime.from_card(tiny_card(max_prompt_rows=48), device="cpu")
    texts = ("One.", "Two.", "Three.", "Four.")

    async def go(url: str, n: int) -> list[bytes]:
        async with connect(url) as ws:
            await ws.send(json.dumps({**CONFIG, "voice": "0"}))
            await answer(ws)
            return [(await said(ws, t))[1] for t in texts[:n]]

    try:
        with serve(rt, conversation_turns=1) as server:  # one earlier turn kept
            capped = asyncio.run(go(server.url.replace("http://", "ws://") + STREAM, 3))
        with serve(rt) as server:  # three earlier turns (14-16 rows each) pass the card's 48 rows
            refused = asyncio.run(go(server.url.replace("http://", "ws://") + STREAM, 4))
        runs: list[Any] = []
        for t in texts:
            context = [{"speaker": 0, "text": x, "codes": r.codes} for x, r in zip(texts, runs)]
            runs.append(rt.submit({"text": t, "speaker": 0, "seed": 7, "max_frames": 4,
                                   "context": context[-2:] or None}).result())
        with pytest.raises(Exception, match="context: the prompt is"):
            rt.submit({"text": texts[3], "speaker": 0, "seed": 7, "max_frames": 4,
                       "context": [{"speaker": 0, "text": x, "codes": r.codes} for x, r in zip(texts, runs)]})
        last = rt.submit({"text": texts[2], "speaker": 0, "seed": 7, "max_frames": 4,
                          "context": [{"speaker": 0, "text": texts[1], "codes": runs[1].codes}]}).result()
    finally:
        rt.close()
    assert np.array_equal(np.frombuffer(capped[2], "<i2"), pcm(last.audio))  # context: turn 2 alone
    for k in range(4):  # the fourth: turns 2 and 3 (turn 1 dropped where the family refused three)
        assert np.array_equal(np.frombuffer(refused[k], "<i2"), pcm(runs[k].audio)), k


def test_bad_websocket_turns_are_refused_naming_the_field_and_the_session_goes_on(tiny, wav):
    tiny.voices.add("mute", wav, replace=True)

    async def go(url: str) -> tuple[list[dict], bytes]:
        async with connect(url) as ws:
            answers = []
            await ws.send(json.dumps({"type": "context.append", "text": "Early."}))
            answers.append(await answer(ws))
            await ws.send(json.dumps({**CONFIG, "context": [{"text": "Hi.", "audio": "!!"}]}))
            answers.append(await answer(ws))
            await ws.send(json.dumps(CONFIG))
            assert (await answer(ws))["type"] == "session.ready"
            for bad in ({"text": "Hi.", "audio": "!!"}, {"text": "Hi.", "speaker": "x"}, {"voice": "mute"},
                        {"speaker": 0}, {"text": 5}):
                await ws.send(json.dumps({"type": "context.append", **bad}))
                answers.append(await answer(ws))
            await ws.send(json.dumps({**CONFIG, "context": [{"speaker": 0}]}))
            answers.append(await answer(ws))  # refused before any session.ready: the previous config stays
            return answers, (await said(ws, SAID[0]))[1]

    with serve(tiny) as server:
        answers, data = asyncio.run(go(server.url.replace("http://", "ws://") + STREAM))
    assert all(a["type"] == "error" for a in answers), answers
    assert [a["param"] for a in answers] == ["type", "context", "audio", "context", "voice", "context", "text",
                                            "context"], answers
    assert answers[1]["message"].startswith("context[0].audio: not valid base64")
    assert answers[3]["message"].startswith("context.0.speaker: expected an integer")
    alone = tiny.submit({"text": SAID[0], "speaker": 1, "seed": 7, "max_frames": 4}).result()
    assert np.array_equal(np.frombuffer(data, "<i2"), pcm(alone.audio))  # no refused turn became context
