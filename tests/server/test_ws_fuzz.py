"""Any sequence of speech-stream messages, drawn by hypothesis from every kind (configs good and bad, text
pieces of any code points, input.done, input.cancel, context.append, unknown kinds, broken and deep JSON,
binary frames), sent as fast as the socket takes them, on both tiny cards: the server answers without a
traceback in its log, never drops the connection, and afterwards the same session speaks a new utterance
with a new config; the runtime holds nothing once the client has gone."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from serverkit import LiveServer, shared_runtime, wait_idle
from v2.server import ServerConfig
from wskit import server_log, sync_until, ws_url

VOICE = {"qwen3_tts_tiny": {"voice": "Vivian"}}


@pytest.fixture(scope="module", params=["moss_tts_local_tiny", "qwen3_tts_tiny"])
def live(request) -> Iterator[tuple[Any, str, dict]]:
    from v2.runtime import Runtime

    card = request.param
    rt = shared_runtime() if card == "moss_tts_local_tiny" else Runtime.from_card(card)
    try:
        with LiveServer(rt, ServerConfig.for_card(card)) as server:
            yield rt, ws_url(server), VOICE.get(card, {})
    finally:
        if rt is not shared_runtime():
            rt.close()


TEXT = st.text(st.characters(codec=None), max_size=12)
MESSAGES = st.one_of(
    st.builds(lambda seed, fmt, stream, split, frames: {"type": "session.config", "seed": seed, "response_format": fmt,
                                                       "stream_audio": stream, "split_granularity": split,
                                                       "max_new_tokens": frames},
              st.integers(-1, 5), st.sampled_from(["pcm", "wav", "mp3", "flac"]), st.booleans(),
              st.sampled_from(["none", "sentence", "clause", "word"]), st.integers(-1, 6)),
    st.builds(lambda t: {"type": "input.text", "text": t}, TEXT),
    st.just({"type": "input.text", "text": "Short one. "}),
    st.just({"type": "input.done"}), st.just({"type": "input.cancel"}),
    st.builds(lambda t: {"type": "context.append", "text": t}, TEXT),
    st.builds(lambda k: {"type": k}, TEXT), st.just({"type": "session.config", "temperature": float("nan")}),
    st.just("[" * 300 + "]" * 300), st.just("{not json"), st.just(b"\x00binary"),
)


def encoded(msg: Any) -> str | bytes:
    return msg if isinstance(msg, (str, bytes)) else json.dumps(msg, allow_nan=True)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(messages=st.lists(MESSAGES, min_size=1, max_size=14))
def test_any_message_sequence_leaves_a_usable_session_and_no_traceback(live, messages):
    rt, url, voice = live
    with server_log() as log:
        with connect(url, max_size=None) as ws:
            for msg in messages:
                if isinstance(msg, dict) and msg.get("type") == "session.config" and "response_format" in msg:
                    msg = {**msg, **voice}
                ws.send(encoded(msg))
            quiet = time.monotonic() + 0.5  # read what it answers until it has been quiet a while
            while time.monotonic() < quiet:
                try:
                    ws.recv(0.3)
                    quiet = max(quiet, time.monotonic() + 0.3)
                except TimeoutError:
                    pass
            try:  # still open, and usable: whatever is under way ended, a new config speaks
                for kind in ("input.cancel", "input.done", "input.cancel"):
                    ws.send(json.dumps({"type": kind}))
                ws.send(json.dumps({"type": "session.config", "seed": 1, "max_new_tokens": 3,
                                    "response_format": "pcm", **voice}))
                sync_until(ws, "session.ready", timeout=60)
                ws.send(json.dumps({"type": "input.text", "text": "Still here."}))
                ws.send(json.dumps({"type": "input.done"}))
                events, _ = sync_until(ws, "session.done", timeout=60)
            except ConnectionClosed as e:
                pytest.fail(f"the server closed the connection: {e}")
        wait_idle(rt, timeout=rt.card.runtime.input_idle_timeout_s / 2)  # nothing left to its idle timeout
        time.sleep(0.05)
    assert events[-1]["type"] == "session.done"
    assert log.tracebacks() == []
