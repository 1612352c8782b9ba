"""Open requests on the tiny card (`Runtime.open`): text fed in pieces is spoken as consecutive segments of
one request (one handle, one stream, one result) as it arrives. The same pieces at any pace give the same
codes and audio as the text fed whole (same seed); streamed == final; the first segment speaks before the
text ends; a request waiting for text holds no batch row and the engine stops stepping; the idle timeout,
cancel and refusals end or refuse cleanly; nothing leaks."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from v2.card import load_card
from v2.errors import RequestError
from v2.runtime import Runtime

from conftest import wait_idle
from holds import expiry_after_first_frame

TEXT = ("Hello there, how are you today? I am fine. This is a test of open text; it goes on. "
        "\u4f60\u597d\u3002 Short one! The end")
BASE = {"seed": 5, "max_frames": 6, "min_frames": 1, "stream": True}


def tiny(**runtime: object) -> Runtime:
    card = load_card("moss_tts_local_tiny")
    if runtime:
        card = card.model_copy(update={"runtime": card.runtime.model_copy(update=runtime)})
    return Runtime.from_card(card, device="cpu")


@pytest.fixture(scope="module")
def rt():
    runtime = tiny()
    yield runtime
    runtime.close()


def leak_free(rt: Runtime) -> None:
    s = wait_idle(rt)
    rt.engine.kv.pager.blocks.check()
    assert not rt.engine.kv.pager.tables and s["kv_blocks_free"] == s["kv_blocks"] and s["encoding"] == 0
    assert not rt.engine.requests.idle and not rt.engine.requests.inputs


def split(text: str, rng: random.Random) -> list[str]:
    """Pieces of 1-5 words (an LLM's tokens), cut anywhere."""
    out, pos = [], 0
    while pos < len(text):
        n = rng.randint(1, 12)
        out.append(text[pos:pos + n])
        pos += n
    return out


def speak(rt: Runtime, pieces: list[str], *, delays: list[float] | None = None, request: dict | None = None):
    h = rt.open({**BASE, **(request or {})})
    chunks: list = []
    reader = threading.Thread(target=lambda: chunks.extend(h))
    reader.start()
    for i, p in enumerate(pieces):
        h.feed(p)
        if delays:
            time.sleep(delays[i % len(delays)])
    h.end_text()
    r = h.result(120)
    reader.join(30)
    streamed = np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((2, 0), np.float32)
    return r, streamed, chunks


def test_pieces_at_any_pace_equal_the_text_fed_whole_and_streamed_equals_final(rt):
    whole, streamed, _ = speak(rt, [TEXT])
    assert whole.finish_reason in ("stop", "length") and whole.error is None
    assert np.array_equal(whole.audio, streamed)
    said = [TEXT[s.text_start:s.text_end].strip() for s in whole.segments]
    assert said == ["Hello there, how are you today?", "I am fine.", "This is a test of open text;", "it goes on.",
                    "\u4f60\u597d\u3002", "Short one!", "The end"]
    assert whole.segments[0].frame_start == 0 and whole.segments[-1].frame_end == len(whole.codes)
    rng = random.Random(4)
    for delays in ([0.0], [0.001, 0.03, 0.0, 0.08]):
        r, streamed, _ = speak(rt, split(TEXT, rng), delays=delays)
        assert np.array_equal(r.codes, whole.codes) and np.array_equal(r.audio, whole.audio)
        assert np.array_equal(streamed, r.audio)
        assert [(s.text_start, s.text_end, s.frame_end) for s in r.segments] == \
            [(s.text_start, s.text_end, s.frame_end) for s in whole.segments]
    leak_free(rt)


def test_an_open_request_speaks_like_long_text_when_they_split_the_same_way():
    """Sentences of 16-29 characters under a 30-character long-text cap are one segment each, as open text cuts them."""
    card = load_card("moss_tts_local_tiny")
    ar = card.loops.ar_decode.model_copy(update={"max_segment_chars": 30})
    runtime = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                                device="cpu")
    try:
        text = "The first one is here. A second sentence now. And the third one! Last of them?"
        plain = runtime.submit({**BASE, "text": text}).result(120)
        assert len(plain.segments) == 4
        opened, _, _ = speak(runtime, split(text, random.Random(1)))
        assert np.array_equal(opened.codes, plain.codes) and np.array_equal(opened.audio, plain.audio)
        assert [s.frame_end for s in opened.segments] == [s.frame_end for s in plain.segments]
    finally:
        runtime.close()


def waits_for_text(rt: Runtime) -> bool:
    """A running request's segment has ended and it waits for the next sentence's prompt."""
    records = list(rt.engine.requests.running.values())
    return any(getattr(state, "wants_input", False) for r in records for state in list(r.states.values()))


def test_the_first_sentence_speaks_before_the_text_ends_and_a_waiting_request_costs_no_steps(rt):
    h = rt.open({**BASE, "max_frames": 8})
    h.feed("A first sentence is here. And then")
    first = next(iter(h))  # audio of the first segment, with the text still open
    assert first.audio.shape[1] > 0 and not h.done
    deadline = time.time() + 120  # a hang check
    while not waits_for_text(rt):  # the first segment has ended (a state, not a quiet spell a load can fake)
        assert time.time() < deadline, rt.stats()
        time.sleep(0.01)
    # it waits for the second sentence: no frame rows, and the engine is not spinning
    before = rt.stats()
    time.sleep(0.5)
    after = rt.stats()
    assert after["kinds"]["ar_frame"]["rows"] == before["kinds"]["ar_frame"]["rows"]
    assert after["steps"] - before["steps"] < 40
    assert after["running"] == 1 and not h.done
    h.feed(" some more.")
    h.end_text()
    r = h.result(60)
    assert r.finish_reason in ("stop", "length") and len(r.segments) == 2
    leak_free(rt)


@pytest.mark.exact
@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**16))
def test_an_open_request_among_others_equals_itself_alone(rt, seed):
    alone, _, _ = speak(rt, [TEXT], request={"seed": seed})
    others = [rt.submit({"text": "Some other words.", "seed": seed + i, "max_frames": 9}) for i in range(3)]
    mixed, _, _ = speak(rt, split(TEXT, random.Random(seed)), request={"seed": seed})
    for o in others:
        assert o.result(60).finish_reason in ("stop", "length")
    assert np.array_equal(mixed.codes, alone.codes) and np.array_equal(mixed.audio, alone.audio)
    leak_free(rt)


def test_a_voice_goes_with_the_first_segment_only_and_pieces_still_equal_whole(rt):
    voice = {"reference_codes": np.random.default_rng(3).integers(0, 1024, (12, 12))}
    whole, _, _ = speak(rt, [TEXT], request=voice)
    pieces, _, _ = speak(rt, split(TEXT, random.Random(9)), request=voice)
    plain, _, _ = speak(rt, [TEXT])
    assert np.array_equal(whole.codes, pieces.codes)
    assert whole.segments[0].prompt_rows > plain.segments[0].prompt_rows
    leak_free(rt)


def test_no_text_for_the_idle_timeout_ends_the_request_with_the_reason(monkeypatch):
    runtime = tiny(input_idle_timeout_s=0.4)
    try:
        h = runtime.open(BASE)
        h.feed("Half a sen")
        r = h.result(30)
        assert r.finish_reason == "abort" and "no text arrived for 0.4 s" in r.error
        with pytest.raises(RuntimeError, match="has ended"):
            h.feed("tence.")
        # the idle timeout below is not checked until the first frame is made: a slow host's admission and
        # prefill cannot use it up before the first sentence is spoken
        expiry_after_first_frame(runtime.engine.requests, runtime.family.ar_loop, monkeypatch)
        h = runtime.open(BASE)
        h.feed("One sentence. And")
        r = h.result(30)  # ends while it waits for the second sentence, with the first spoken
        assert r.finish_reason == "abort" and len(r.codes) > 0
        leak_free(runtime)
    finally:
        runtime.close()


def test_cancel_while_waiting_for_text_or_for_admission_frees_everything(rt):
    h = rt.open(BASE)  # no text yet: waits in the queue, not admissible
    h.cancel()
    assert h.result(30).finish_reason == "abort"
    h = rt.open(BASE)
    h.feed("A whole sentence here. Then")
    next(iter(h))
    h.cancel()
    assert h.result(30).finish_reason == "abort"
    leak_free(rt)


def test_an_empty_text_ends_with_no_audio(rt):
    h = rt.open(BASE)
    h.feed("   ")
    h.end_text()
    r = h.result(30)
    assert r.finish_reason == "stop" and r.audio.shape[1] == 0 and r.segments == ()
    leak_free(rt)


def test_refusals_name_the_field_and_a_refused_piece_harms_nothing(rt):
    with pytest.raises(RequestError, match="^prompt_rows"):
        rt.open({**BASE, "prompt_rows": [[1] * 13]})
    with pytest.raises(RequestError, match="^profile"):
        rt.open({**BASE, "profile": "rollout"})
    with pytest.raises(RequestError, match="^duration_frames"):
        rt.open({**BASE, "duration_frames": 20})
    with pytest.raises(RequestError, match="^split"):
        rt.open(BASE, split="word")
    with pytest.raises(RequestError, match="^temperature"):
        rt.open({**BASE, "temperature": -1.0})
    whole, _, _ = speak(rt, [TEXT])
    h = rt.open(BASE)
    h.feed(TEXT[:40])
    with pytest.raises(RequestError, match="^text: .*max_text_chars"):
        h.feed("x" * 20_001)
    with pytest.raises(TypeError, match="^text"):
        h.feed(3)  # type: ignore[arg-type]
    h.feed(TEXT[40:])
    h.end_text()
    with pytest.raises(RequestError, match="^text: the text has already ended"):
        h.feed("more.")
    r = h.result(60)
    assert np.array_equal(r.codes, whole.codes)  # the refused pieces took nothing
    leak_free(rt)


def test_the_handle_marks_each_segment_as_it_begins_and_ends(rt):
    h = rt.open(BASE)
    h.feed(TEXT)
    h.end_text()
    frames = 0
    for chunk in h:  # by the time a chunk is read, the segments it reaches into are marked (the engine may be
        frames += chunk.frames  # ahead of the reader: later segments may be marked too)
        marks = h.marks()
        last = frames - 1  # the chunk's last frame lies in a marked segment
        assert any(m.frame_start <= last and (m.frame_end is None or last < m.frame_end) for m in marks), marks
        assert all(m.frame_end is not None for m in marks[:-1])
    r = h.result(60)
    marks = h.marks()
    assert [(m.text_start, m.text_end, m.frame_start, m.frame_end, m.finish_reason) for m in marks] == \
        [(s.text_start, s.text_end, s.frame_start, s.frame_end, s.finish_reason) for s in r.segments]
    leak_free(rt)
