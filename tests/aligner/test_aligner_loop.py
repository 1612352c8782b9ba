"""The aligner as a loop any card adds (`Runtime.from_card(card, aligner=...)`): on the MOSS, Qwen3-TTS and CSM
tiny cards a request with `timestamps: "word"` gets one timestamp per word of its text, in order, monotonic,
within its audio; its streamed events are its result; batched equals alone; the family's audio is the same as
without the aligner; a request without timestamps costs no alignment; a cancel at any step frees the aligner's
slots; open text gets one `SentenceWords` per segment the family marks, each as soon as its audio is complete,
times absolute from the start of the request's audio."""

from __future__ import annotations

from typing import Any

import pytest

from v2.events import SentenceWords
from v2.models.forced_aligner.words import split_words
from v2.runtime import Runtime

pytestmark = pytest.mark.exact

CARDS = ["moss_tts_local_tiny", "qwen3_tts_tiny", "csm_tiny"]
REQUESTS: list[dict[str, Any]] = [{"text": "Hello there.", "max_frames": 10, "seed": 1},
                                   {"text": "A second, longer line; it's 13 words... or so!", "max_frames": 10,
                                    "seed": 2},
                                   {"text": "This one says boom.", "max_frames": 10, "seed": 3}]


def words_ok(result: Any, text: str) -> tuple[Any, ...]:
    """One timestamp per word of `text`, in order, monotonic, within the audio; the events equal the result."""
    assert result.error is None, result.error
    words = result.words
    assert [w.word for w in words] == split_words(text)
    duration = result.audio.shape[1] / result.sample_rate
    times = [t for w in words for t in (w.start, w.end)]
    assert all(0 <= a <= b for a, b in zip(times, times[1:])) and times[-1] <= duration
    spans = result.added["aligner"]
    assert all(isinstance(s, SentenceWords) for s in spans) and [s.index for s in spans] == list(range(len(spans)))
    return tuple(spans)


def slots_free(rt: Runtime) -> None:
    s = rt.stats()
    assert s["running"] == s["waiting"] == 0
    assert s["aligner_streams_slots_in_use"] == 0
    assert all(v == 0 for k, v in s.items() if k.endswith("_slots_in_use")), s


@pytest.mark.parametrize("name", CARDS)
def test_every_family_word_times_batched_equals_alone_events_equal_result(name: str) -> None:
    with Runtime.from_card(name, device="cpu") as rt:
        plain = [rt.submit(r).result(300).audio.tobytes() for r in REQUESTS[:2]]
    with Runtime.from_card(name, device="cpu", aligner="forced_aligner_tiny") as rt:
        alone = []
        for i, request in enumerate(REQUESTS[:2]):
            h = rt.submit(dict(request, timestamps="word", stream=bool(i)))
            r = h.result(300)
            assert r.audio.tobytes() == plain[i]  # the family's audio as without the aligner
            spans = words_ok(r, request["text"])
            assert [e.item for e in h.events() if e.loop == "aligner"] == list(spans)
            alone.append(spans)
        kinds = rt.stats()["kinds"]["aligner_align"]
        calls, rows = kinds["calls"], kinds["rows"]
        assert rt.submit(dict(REQUESTS[0])).result(300).words == ()  # no timestamps asked: no alignment
        assert rt.stats()["kinds"]["aligner_align"]["rows"] == rows
        handles = rt.submit_many([dict(r, timestamps="word", stream=True) for r in REQUESTS])
        results = [h.result(300) for h in handles]
        for i, (h, r) in enumerate(zip(handles, results)):
            spans = words_ok(r, REQUESTS[i]["text"])
            assert [e.item for e in h.events() if e.loop == "aligner"] == list(spans)
            if i < 2:
                assert spans == alone[i] and r.audio.tobytes() == plain[i]
        kinds = rt.stats()["kinds"]["aligner_align"]
        assert kinds["calls"] - calls < kinds["rows"] - rows  # spans of several requests in one forward
        slots_free(rt)


@pytest.mark.parametrize("name", ["qwen3_tts_tiny"])
def test_a_cancel_at_any_step_frees_the_aligners_slots(name: str) -> None:
    with Runtime.from_card(name, device="cpu", aligner="forced_aligner_tiny") as rt:
        alone = words_ok(rt.submit(dict(REQUESTS[0], timestamps="word")).result(300), REQUESTS[0]["text"])
        engine, step = rt.engine, rt.engine.step
        target: dict[str, Any] = {}

        def counted() -> bool:
            target["steps"] = target.get("steps", 0) + 1
            if target["steps"] == target.get("at") and target.get("handle") is not None:
                target["handle"].cancel()
            return step()

        engine.step = counted  # type: ignore[method-assign]
        reasons = []
        for at in (1, 2, 4, 7, 11, 16):
            with rt._cond:  # the engine takes them (and counts their steps) once the target is set
                handles = rt.submit_many([dict(r, timestamps="word", stream=True) for r in REQUESTS[:2]])
                target.update(steps=0, at=at, handle=handles[1])
            r0, r1 = handles[0].result(300), handles[1].result(300)
            assert words_ok(r0, REQUESTS[0]["text"]) == alone
            reasons.append(r1.finish_reason)
            slots_free(rt)
        assert "abort" in reasons


@pytest.mark.parametrize("name", ["moss_tts_local_tiny", "qwen3_tts_tiny", "csm_tiny"])
def test_open_text_one_span_per_marked_segment_times_absolute(name: str) -> None:
    pieces = ("Hello there. ", "A second one, ", "and more. ", "The end.")
    with Runtime.from_card(name, device="cpu", aligner="forced_aligner_tiny") as rt:
        loop = rt.engine.family.built["aligner"].loop  # type: ignore[attr-defined]
        advance, early = loop.advance, []

        def watched(state: Any, plan: Any, row: Any) -> bool:
            early.append(state.upstream is None)  # aligned while the request's audio was still being made
            return bool(advance(state, plan, row))

        loop.advance = watched
        h = rt.open({"seed": 1, "stream": True, "max_frames": 10, "timestamps": "word"})
        for piece in pieces:
            h.feed(piece)
        h.end_text()
        r = h.result(300)
        text = "".join(pieces)
        spans = words_ok(r, text)
        marks = h.marks()
        assert len(spans) == len(marks) >= 1
        for s, m in zip(spans, marks):
            assert (s.text_start, s.text_end) == (m.text_start, m.text_end)
            assert [w.word for w in s.words] == split_words(text[m.text_start:m.text_end])
        assert [e.item for e in h.events() if e.loop == "aligner"] == list(spans)
        assert len(spans) == 1 or early[0]  # the first segment's words before the request's audio ended
        slots_free(rt)


@pytest.mark.parametrize("name, loop", [("moss_tts_local_tiny", "ar_decode"), ("qwen3_tts_tiny", "talker")])
def test_submitted_long_text_one_span_per_segment_as_each_ends(name: str, loop: str) -> None:
    from v2.card import load_card

    card = load_card(name)
    decl = getattr(card.loops, loop).model_copy(update={"max_segment_chars": 30})  # type: ignore[attr-defined]
    card = card.model_copy(update={"loops": card.loops.model_copy(update={loop: decl})})  # type: ignore[attr-defined]
    text = "The first sentence is here. A second one follows it. And a third, the last one."
    with Runtime.from_card(card, device="cpu", aligner="forced_aligner_tiny") as rt:
        aligner = rt.engine.family.built["aligner"].loop  # type: ignore[attr-defined]
        advance, early = aligner.advance, []

        def watched(state: Any, plan: Any, row: Any) -> bool:
            early.append(state.upstream is None)
            return bool(advance(state, plan, row))

        aligner.advance = watched
        h = rt.submit({"text": text, "max_frames": 6, "seed": 4, "stream": True, "timestamps": "word"})
        r = h.result(300)
        spans = words_ok(r, text)
        assert len(r.segments) == len(spans) >= 3
        for s, seg in zip(spans, r.segments):
            assert (s.text_start, s.text_end) == (seg.text_start, seg.text_end)
            assert [w.word for w in s.words] == split_words(text[seg.text_start:seg.text_end])
            assert all(seg.frame_start / rt.frame_rate - 1e-3 <= w.start for w in s.words)  # absolute: after its own start
        assert early[0]  # the first segment's words while the later ones were still being made
        slots_free(rt)
