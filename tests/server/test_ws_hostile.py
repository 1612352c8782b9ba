"""`/v1/audio/speech/stream` under a hostile or careless client, with a real websocket client, on every
speaking family's tiny card (the registry's families that speak a given text: tests/tiny_cards.py): a config is checked whole before `session.ready` (a refused one gets an
`error` naming the parameter and the session keeps its previous config, or none); messages are bounded as
REST bodies are (depth, members) and refused naming the problem, the connection kept; text UTF-8 cannot
encode (a lone surrogate) is refused naming its field wherever it is, and an utterance ends at once, not at
the idle timeout; clients that leave abruptly leave no traceback in the server's log; a connection that never
sends a config is closed after the pre-config timeout. Hypothesis draws config values across their types and
text pieces of any code points: every message gets an answer and the session stays usable."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as sync_connect

from serverkit import CARD, LiveServer, shared_runtime, wait_idle
from tiny_cards import speech_cards
from v2.server import ServerConfig
from wskit import recv_json, server_log, sync_until, until, ws_url

CARDS = list(speech_cards().values())
BOUND = 120.0  # seconds: a hang check


def idle_s(rt: Any) -> float:
    """An open request's input idle timeout: what "ended at once" is told apart from (a loaded machine may be
    slow, never that slow), so a duration is bounded by it and by nothing tighter."""
    return float(rt.card.runtime.input_idle_timeout_s)


class Live:
    def __init__(self, card: str, rt: Any, server: LiveServer) -> None:
        self.card, self.rt, self.server, self.url = card, rt, server, ws_url(server)
        speaker = rt.speakers[0] if rt.speakers else None  # the checkpoint's first built-in voice, where it has any
        self.speaker: dict[str, Any] = {} if speaker is None else {"speaker": speaker}  # as a Python request names it
        self.config = {"type": "session.config", "seed": 3, "max_new_tokens": 4, "response_format": "pcm",
                       **({} if speaker is None else {"voice": speaker})}


@pytest.fixture(scope="module", params=CARDS)
def live(request) -> Iterator[Live]:
    from v2.runtime import Runtime

    card = request.param
    rt = shared_runtime() if card == CARD else Runtime.from_card(card)
    try:
        with LiveServer(rt, ServerConfig.for_card(card)) as server:
            yield Live(card, rt, server)
    finally:
        if rt is not shared_runtime():
            rt.close()


def spoken(ws: Any, text: str = "Still here.") -> list[dict]:
    """Speak one short utterance over the sync client: its events up to session.done."""
    ws.send(json.dumps({"type": "input.text", "text": text}))
    ws.send(json.dumps({"type": "input.done"}))
    events, _ = sync_until(ws, "session.done")
    return events


# ----- 1. the config, checked whole before session.ready ---------------------------------------------
BAD_CONFIGS = [  # (raw JSON of the fields, the parameter an error must name)
    ('"temperature": NaN', "temperature"), ('"temperature": Infinity', "temperature"),
    ('"top_p": -Infinity', "top_p"), ('"top_p": NaN', "top_p"), ('"top_k": -1', "top_k"),
    ('"repetition_penalty": NaN', "repetition_penalty"), ('"seed": 1180591620717411303424', "seed"),
    ('"seed": -1', "seed"), ('"max_new_tokens": 0', "max_new_tokens"),
    ('"max_new_tokens": 100000000000000000000000', "max_new_tokens"), ('"min_frames": -3', "min_frames"),
    ('"max_frames": 5, "max_new_tokens": 6', "max_frames"), ('"sample_rate": 1', "sample_rate"),
    ('"speed": NaN', "speed"), ('"voice": "nobody-by-this-name"', "voice"), ('"instructions": 5', "instructions"),
    ('"ref_text": "Hi.", "ref_audio": "%s"' % base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunkjunk" * 8).decode(),
     "ref_audio"), ('"ref_text": "Hi.", "ref_audio": "not base64!"', "ref_audio"),
    ('"language": "\\ud800"', "language"),
]


@pytest.mark.parametrize("fields,param", BAD_CONFIGS, ids=[p for _, p in BAD_CONFIGS])
def test_a_refused_config_gets_an_error_before_any_ready_and_the_previous_config_stays(live, fields, param):
    with sync_connect(live.url) as ws:
        ws.send(f'{{"type": "session.config", {fields}}}')  # before any config: refused, none taken
        first = json.loads(ws.recv(60))
        assert first["type"] == "error" and first["param"] == param, first
        ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
        assert json.loads(ws.recv(60))["param"] == "type"  # still no config
        ws.send(json.dumps({**live.config, "response_format": "wav"}))
        assert json.loads(ws.recv(60))["format"] == "wav"
        ws.send(f'{{"type": "session.config", "response_format": "pcm", {fields}}}')  # refused: wav stays
        again = json.loads(ws.recv(60))
        assert again["type"] == "error" and again["param"] == param, again
        events = spoken(ws)
    assert [e["type"] for e in events] == ["audio.start", "audio.done", "session.done"], events
    assert events[0]["format"] == "wav"
    wait_idle(live.rt)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**80, max_value=2**80),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(st.characters(codec=None), max_size=8))
TURNS = st.lists(st.dictionaries(st.sampled_from(["speaker", "text", "text_ids", "audio", "voice", "other"]),
                                 st.one_of(SCALARS, st.lists(st.integers(), max_size=3)), max_size=4), max_size=3)
VALUES = st.one_of(SCALARS, st.lists(st.integers(), max_size=3), TURNS,
                   st.dictionaries(st.text(max_size=3), SCALARS, max_size=2))
KEYS = ["temperature", "top_p", "top_k", "repetition_penalty", "seed", "max_new_tokens", "min_new_tokens",
        "max_frames", "min_frames", "voice", "instructions", "language", "response_format", "speed", "sample_rate",
        "stream_audio", "split_granularity", "ref_audio", "ref_text", "x_vector_only_mode", "context", "model",
        "stream", "stream_format", "input", "a_field_nobody_knows"]


NEEDED = {"ref_text": "ref_audio"}  # a refusal may name a field absent from the config: what the given one needs


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_config_value_gets_ready_or_an_error_naming_it_and_the_session_stays_usable(live, data):
    values = data.draw(st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=3))
    raw = json.dumps({"type": "session.config", **values}, allow_nan=True)
    with server_log() as log, sync_connect(live.url) as ws:
        ws.send(json.dumps({**live.config, "response_format": "wav"}))
        assert json.loads(ws.recv(60))["type"] == "session.ready"
        ws.send(raw)
        answer = json.loads(ws.recv(60))
        assert answer["type"] in ("session.ready", "error"), answer
        if answer["type"] == "error":
            # the field given, or the one a given field needs with it (a clone's transcript, for Qwen3-TTS)
            assert answer["param"] in values or NEEDED.get(answer["param"]) in values, (values, answer)
            ws.send(json.dumps({"type": "input.text", "text": "Hi."}))  # the previous config speaks
            ws.send(json.dumps({"type": "input.done"}))
            events, _ = sync_until(ws, "session.done")
            assert events[0]["format"] == "wav", events
    assert log.tracebacks() == []
    wait_idle(live.rt)


# ----- 2. bounds on a message --------------------------------------------------------------------------
HUGE = [("[" * 100_000 + "]" * 100_000, "message", "too_complex"),
        ('{"type": "session.config", "context": ' + "[" * 5000 + "]" * 5000 + "}", "context", "too_complex"),
        ('{"type": "input.text", "text": "a", ' + ", ".join(f'"k{i}": {i}' for i in range(2000)) + "}", None,
         "too_complex"),
        ('{"type": "input.text", "text": ' + "[1," * 300 + "1" + "]" * 300 + "}", "text", "too_complex"),
        ('{"type": "input.text", "text": 1' + "0" * 5000 + "}", "message", "invalid_json"),
        ('{"type": "input.text", "text": "\\ud800"}', "text", "invalid_value"),
        ('{"type": "input.text", "\\udfff": 1}', "\udfff", "invalid_value"),
        ('{"type": "input.text", "text": "x"', "message", "invalid_json"), ("null", "message", "invalid_json")]


def test_oversized_deep_and_broken_messages_get_an_error_naming_the_problem_and_keep_the_connection(live):
    with server_log() as log, sync_connect(live.url, max_size=None) as ws:
        answers = []
        for raw, _, _ in HUGE:
            ws.send(raw)
            answers.append(json.loads(ws.recv(60)))
        ws.send(json.dumps(live.config))
        assert json.loads(ws.recv(60))["type"] == "session.ready"
        events = spoken(ws)
    for (raw, param, code), a in zip(HUGE, answers):
        assert a["type"] == "error" and a["code"] == code, (raw[:60], a)
        if param is not None:
            assert a["param"] == param, (raw[:60], a)
        else:
            assert a["param"] and a["param"].startswith("k"), a
    assert events[-1]["type"] == "session.done"
    assert log.tracebacks() == []


# ----- 3. text that cannot be encoded ------------------------------------------------------------------
PIECES = st.lists(st.text(st.characters(codec=None), min_size=1, max_size=6), min_size=1, max_size=5)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(pieces=PIECES)
def test_pieces_of_any_code_points_are_taken_or_refused_naming_text_and_the_utterance_ends_at_once(live, pieces):
    """A piece holding a lone surrogate is refused naming `text` (and not taken); the others are taken; the
    utterance ends at once at input.done (not at the 30 s idle timeout), with the audio of the text taken."""
    with server_log() as log, sync_connect(live.url) as ws:
        ws.send(json.dumps(live.config))
        assert json.loads(ws.recv(60))["type"] == "session.ready"
        taken = ""
        for piece in pieces:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
            bad = any(0xD800 <= ord(c) <= 0xDFFF for c in piece)
            if bad:
                err = json.loads(ws.recv(30))
                assert err["type"] == "error" and err["param"] == "text", err
            else:
                taken += piece
        start = time.monotonic()
        ws.send(json.dumps({"type": "input.done"}))
        events, frames = sync_until(ws, "session.done", timeout=BOUND)
        assert time.monotonic() - start < idle_s(live.rt)
    assert [e for e in events if e["type"] == "error"] == [] and log.tracebacks() == []
    h = live.rt.open({"seed": 3, "max_frames": 4, **live.speaker})
    for piece in pieces:
        if not any(0xD800 <= ord(c) <= 0xDFFF for c in piece):
            h.feed(piece)
    h.end_text()
    ref = h.result(60)  # the runtime's own sentences for the text taken
    want = [taken[s.text_start:s.text_end].strip() for s in ref.segments if s.frame_end > s.frame_start]
    said = [e["sentence_text"] for e in events if e["type"] == "audio.start"]
    # a sentence's text as known when its audio starts (a Qwen3-TTS utterance is one segment that grows)
    assert len(said) == len(want) and all(w.startswith(x) for x, w in zip(said, want)), (said, want)
    wait_idle(live.rt)


def test_a_lone_surrogate_in_the_last_sentence_is_refused_and_the_next_utterance_does_not_stall(live):
    with sync_connect(live.url) as ws:
        ws.send(json.dumps(live.config))
        assert json.loads(ws.recv(60))["type"] == "session.ready"
        ws.send(json.dumps({"type": "input.text", "text": "Fine. Then \ud800 this."}))
        err = json.loads(ws.recv(30))
        ws.send(json.dumps({"type": "input.text", "text": "Fine. Then this."}))
        start = time.monotonic()
        first = spoken(ws, "")
        second = spoken(ws, "And the next one.")
        took = time.monotonic() - start
    assert err["type"] == "error" and err["param"] == "text" and "surrogate" in err["message"], err
    assert first[-1]["type"] == "session.done" and second[-1] == {"type": "session.done", "utterance_index": 1,
                                                                 "total_sentences": 1}
    assert took < idle_s(live.rt), took  # not the idle timeout
    wait_idle(live.rt)


@given(piece=st.builds(lambda a, lone, b: a + lone + b, st.text(st.characters(codec=None), max_size=4),
                      st.integers(0xD800, 0xDFFF).map(chr), st.text(st.characters(codec=None), max_size=4)))
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_python_refuses_such_text_naming_text_in_feed_open_and_submit(live, piece):
    """The runtime's own boundary, on every family: `TextHandle.feed` and `Runtime.open`'s first piece refuse
    it naming `text` (the open request withdrawn at once, not left to its idle timeout), as `submit` does; the
    request fed goes on and speaks what it took."""
    from v2.errors import RequestError

    rt = live.rt
    h = rt.open({"max_frames": 2, "seed": 1, **live.speaker})
    with pytest.raises(RequestError) as fed:
        h.feed(piece)
    h.feed("Fine.")
    h.end_text()
    assert fed.value.field == "text" and "surrogate" in str(fed.value)
    assert h.result(60).finish_reason in ("stop", "length")
    for call in (lambda: rt.open({"text": "Hi " + piece}), lambda: rt.submit({"text": piece, "max_frames": 2})):
        with pytest.raises(RequestError) as refused:
            call()
        assert refused.value.field == "text"
    wait_idle(rt, timeout=idle_s(rt) / 2)  # withdrawn at once, not at its idle timeout


def test_csm_refuses_surrogates_and_says_it_speaks_at_input_done():
    """CSM reads a turn's text whole: session.ready says `incremental: false`; a lone surrogate is refused
    naming `text`; the rest is spoken at input.done."""
    from v2.runtime import Runtime

    with Runtime.from_card("csm_tiny") as rt, LiveServer(rt, ServerConfig.for_card("csm_tiny")) as server:
        with sync_connect(ws_url(server)) as ws:
            ws.send(json.dumps({"type": "session.config", "seed": 1, "max_new_tokens": 3, "response_format": "pcm",
                                "voice": "0"}))
            ready = json.loads(ws.recv(60))
            ws.send(json.dumps({"type": "input.text", "text": "Hello \udc80 there."}))
            err = json.loads(ws.recv(30))
            events = spoken(ws, "Hello there. And more.")
        wait_idle(rt)
    assert ready["type"] == "session.ready" and ready["incremental"] is False, ready
    assert err["param"] == "text", err
    assert events[-1]["type"] == "session.done", events


# ----- 4. clients that leave ---------------------------------------------------------------------------
def test_clients_that_leave_abruptly_leave_no_traceback(live):
    async def leave(i: int) -> None:
        """Gone without a close frame: at once, while its config is checked, after input.done, mid-audio,
        and mid-audio while cancelling."""
        ws = await connect(live.url)
        if i % 5 == 0:
            ws.transport.abort()
            return
        await ws.send(json.dumps({**live.config, "stream_audio": True, "max_new_tokens": 30}))
        if i % 5 == 1:
            ws.transport.abort()
            return
        await recv_json(ws)
        await ws.send(json.dumps({"type": "input.text", "text": "A sentence to cut short. And another."}))
        await ws.send(json.dumps({"type": "input.done"}))
        if i % 5 >= 3:
            await until(ws, "audio.start")
        if i % 5 == 4:
            await ws.send(json.dumps({"type": "input.cancel"}))
        ws.transport.abort()  # no close frame

    async def go() -> None:
        await asyncio.gather(*(leave(i) for i in range(20)))

    with server_log() as log:
        asyncio.run(go())
        time.sleep(0.5)  # configs sent before a leave are still being checked: each opens a request
        wait_idle(live.rt, timeout=idle_s(live.rt) / 2)  # well inside an open request's idle timeout
        time.sleep(0.5)
    assert log.tracebacks() == []
    assert sum("left" in r.getMessage() for r in log.records) <= 20


# ----- 5. the pre-config timeout -----------------------------------------------------------------------
DEFAULT_CONFIG_S = ServerConfig.for_card(CARD).ws_config_timeout_s  # 30 s


def test_a_connection_that_sends_no_config_is_closed_after_the_timeout(live):
    config = ServerConfig.for_card(live.card, ws_config_timeout_s=0.5)
    with LiveServer(live.rt, config) as server:
        async def go() -> tuple[list[dict], float, tuple[int | None, int | None], dict]:
            start = time.monotonic()
            async with connect(ws_url(server)) as ws:
                await ws.send(json.dumps({"type": "session.config", "temperature": "hot"}))  # refused: no config
                answers = [await recv_json(ws)]
                try:
                    answers.append(await recv_json(ws, BOUND))
                    await recv_json(ws, BOUND)
                except ConnectionClosed:
                    pass
                code = ws.close_code
            took = time.monotonic() - start
            async with connect(ws_url(server)) as ws:  # busy with refused configs: closed all the same
                try:
                    end = time.monotonic() + DEFAULT_CONFIG_S / 2
                    while time.monotonic() < end:
                        await ws.send(json.dumps({"type": "session.config", "seed": -1}))
                        await recv_json(ws, BOUND)
                except ConnectionClosed:
                    pass
                busy_code = ws.close_code
            async with connect(ws_url(server)) as ws:  # configured in time: not closed
                await ws.send(json.dumps(live.config))
                await recv_json(ws)
                await asyncio.sleep(1.0)
                await ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
                await ws.send(json.dumps({"type": "input.done"}))
                events, _ = await until(ws, "session.done")
            return answers, took, (code, busy_code), events[-1]

        answers, took, code, done = asyncio.run(go())
    assert answers[0]["param"] == "temperature"
    assert answers[1]["type"] == "error" and answers[1]["code"] == "config_timeout", answers
    assert code == (1008, 1008) and took < DEFAULT_CONFIG_S / 2, (code, took)  # its own 0.5 s, not the default
    assert done["type"] == "session.done"


def test_a_text_refused_at_its_end_ends_the_utterance_at_once():
    """CSM checks a held text (split_granularity none) when input.done hands it over: past the card's prompt
    rows it is refused naming `text`, and the utterance ends at once (its session.done), not at the idle
    timeout; the next utterance speaks."""
    from v2.runtime import Runtime

    with Runtime.from_card("csm_tiny") as rt, LiveServer(rt, ServerConfig.for_card("csm_tiny")) as server:
        with sync_connect(ws_url(server)) as ws:
            ws.send(json.dumps({"type": "session.config", "voice": "0", "max_new_tokens": 3, "response_format": "pcm",
                                "split_granularity": "none"}))
            assert json.loads(ws.recv(60))["type"] == "session.ready"
            ws.send(json.dumps({"type": "input.text", "text": "word " * 300}))  # over the 1024 prompt rows
            start = time.monotonic()
            refused = spoken(ws, "")
            took = time.monotonic() - start
            events = spoken(ws, "Hello.")
        wait_idle(rt)
    assert [(e["type"], e.get("param")) for e in refused] == [("error", "text"), ("session.done", None)], refused
    assert took < idle_s(rt) and events[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}


def test_a_recording_without_its_transcript_is_refused_naming_either_and_the_session_stays_usable(live):
    """What the fuzz above once drew: `ref_audio` alone; Qwen3-TTS's in-context clone names the transcript."""
    with server_log() as log, sync_connect(live.url) as ws:
        ws.send(json.dumps({**live.config, "response_format": "wav"}))
        assert json.loads(ws.recv(60))["type"] == "session.ready"
        ws.send(json.dumps({"type": "session.config", "ref_audio": "0000"}))
        answer = json.loads(ws.recv(60))
        assert answer["type"] == "error" and answer["param"] in ("ref_audio", "ref_text"), answer
        ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
        ws.send(json.dumps({"type": "input.done"}))
        events, _ = sync_until(ws, "session.done")
        assert events[0]["format"] == "wav", events
    assert log.tracebacks() == []
    wait_idle(live.rt)
