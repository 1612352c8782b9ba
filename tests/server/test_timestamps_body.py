"""Word timestamps' shapes and order without a server or a model: an SSE body puts each sentence's
`speech.timestamps` event after the audio its words span and before `speech.audio.done` (a fake handle that
delivers chunks and aligned sentences in a chosen order); `merged` gives every sentence once, those published
but not delivered before the end included; a barge-in's words sent and heard; the captioned JSON (Kokoro's
shape); `timestamps` planned (refused without an aligner, refused on a raw stream, whole when `stream` is not
given); the captioned path's body; `played_ms`."""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from v2.contracts import AudioChunk
from v2.events import SentenceWords, WordTime
from v2.runtime.added import AddedEvent
from v2.server import audio
from v2.server.captioned import speech_body
from v2.server.errors import ApiError
from v2.server.schema import Limits, parse_body, plan
from v2.server.streaming import audio_body
from v2.server.timestamps import EVENT, captioned, heard, merged, plan_words, played_ok

RATE = 1000  # samples a second of the fake audio


def chunk(seq: int, seconds: float) -> AudioChunk:
    return AudioChunk(seq, np.full((1, int(seconds * RATE)), 0.1, np.float32), RATE, 1, False)


def sentence(index: int, *ends: float) -> SentenceWords:
    return SentenceWords(index, None, None, tuple(WordTime(f"w{index}_{i}", e - 0.1, e) for i, e in enumerate(ends)))


class FakeHandle:
    """Chunks and aligned sentences in the order given, each sentence in the request's log (`events()`) from
    where it comes; `late`: sentences published but never delivered to subscribers before the request ends (in
    the log at the end); `lag`: every sentence's subscriber callback lags past the request's end (the runtime's
    events and chunks ride two threads), so only the log has them while the chunks come."""

    def __init__(self, items: list[Any], late: tuple[SentenceWords, ...] = (), lag: bool = False) -> None:
        self.items, self.late, self.lag, self.cancelled = items, late, lag, False
        self.callbacks: list[Any] = []
        self.log: list[AddedEvent] = []
        self.done = True

    def subscribe_events(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def events(self, start: int = 0) -> list[AddedEvent]:
        return self.log[start:]

    async def __aiter__(self) -> Any:
        for item in self.items:
            if isinstance(item, SentenceWords):
                event = AddedEvent("aligner", len(self.log), item)  # its seq: its index among the loop's events
                self.log.append(event)
                for cb in ([] if self.lag else self.callbacks):
                    cb(event)
            else:
                yield item
            await asyncio.sleep(0.01)
        self.log += [AddedEvent("aligner", len(self.log) + i, s) for i, s in enumerate(self.late)]

    def result(self) -> Any:
        return SimpleNamespace(finish_reason="stop", error=None, metrics=SimpleNamespace(prompt_rows=3, frames=4))

    def cancel(self) -> None:
        self.cancelled = True


def sse_events(handle: FakeHandle) -> list[dict[str, Any]]:
    async def run() -> list[bytes]:
        spec = audio.OutputSpec("pcm", RATE, 1)
        encoder = audio.make_encoder(spec, RATE, 1, streaming=True)
        return [b async for b in audio_body(handle, encoder, sse=True, offload=False, words=True)]
    out = asyncio.run(run())
    return [json.loads(b.decode().removeprefix("data: ")) for b in out]


def test_sse_puts_each_sentences_words_after_the_audio_they_span_and_before_done():
    s0, s1 = sentence(0, 0.5, 1.5), sentence(1, 2.2, 2.9)
    # s0 is known after 1 s of audio but ends at 1.5 s: held until the second chunk has gone out
    events = sse_events(FakeHandle([chunk(0, 1), s0, chunk(1, 1), chunk(2, 1), s1]))
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta", "speech.audio.delta", EVENT, "speech.audio.delta", EVENT,
                     "speech.audio.done"]
    assert events[2] == {"type": EVENT, "sentence_index": 0, "text_start": None, "text_end": None, "words": [
        {"word": "w0_0", "start": 0.4, "end": 0.5}, {"word": "w0_1", "start": 1.4, "end": 1.5}]}
    assert [w["word"] for w in events[4]["words"]] == ["w1_0", "w1_1"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(pcm) == 3 * RATE * 2  # every sample, s16


def test_sse_words_published_but_not_delivered_before_the_end_come_before_done():
    s0, s1 = sentence(0, 0.9), sentence(1, 1.9)
    events = sse_events(FakeHandle([chunk(0, 1), s0, chunk(1, 1)], late=(s1,)))
    assert [e["type"] for e in events] == ["speech.audio.delta", EVENT, "speech.audio.delta", EVENT,
                                           "speech.audio.done"]
    assert [e["sentence_index"] for e in events if e["type"] == EVENT] == [0, 1]


def test_sse_words_whose_callback_lags_come_once_the_audio_spans_them_not_at_the_end():
    # a long text's first segment aligned while the rest is made: its words are in the request's log before the
    # later chunks, though the callback thread has not delivered them yet
    s0, s1 = sentence(0, 0.4, 0.9), sentence(1, 2.5)
    events = sse_events(FakeHandle([chunk(0, 1), s0, chunk(1, 1), chunk(2, 1), s1], lag=True))
    # s0 (ends at 0.9 s) read from the log as the second chunk comes, covered by the first: given before it
    assert [e["type"] for e in events] == ["speech.audio.delta", EVENT, "speech.audio.delta", "speech.audio.delta",
                                           EVENT, "speech.audio.done"]
    assert [e["sentence_index"] for e in events if e["type"] == EVENT] == [0, 1]


def test_merged_gives_each_sentence_once_in_order_and_without_words_only_chunks():
    s0 = sentence(0, 0.5)

    async def run(words: bool) -> list[Any]:
        return [x async for x in merged(FakeHandle([chunk(0, 1), s0, chunk(1, 1)]), words)]
    got = asyncio.run(run(True))
    assert [type(x).__name__ for x in got] == ["AudioChunk", "SentenceWords", "AudioChunk"]
    assert [type(x).__name__ for x in asyncio.run(run(False))] == ["AudioChunk", "AudioChunk"]


def test_a_barge_in_lists_the_words_sent_and_of_them_those_heard():
    spans = [sentence(0, 0.4, 0.9), sentence(1, 1.6, 2.3)]
    got = heard(spans, sent_s=2.0, played_ms=700)
    assert [w["word"] for w in got["words_sent"]] == ["w0_0", "w0_1", "w1_0"]  # 2.3 s was not sent
    assert [w["word"] for w in got["words_heard"]] == ["w0_0"]  # ends by 0.7 s
    assert heard(spans, 2.0, None)["words_heard"] == got["words_sent"]  # no position: every word sent
    assert heard([], 0.0, 10) == {"words_sent": [], "words_heard": []}


def test_played_ms_is_absent_or_a_finite_non_negative_number():
    assert all(played_ok(v) for v in (None, 0, 12, 1.5))
    assert not any(played_ok(v) for v in (-1, "10", True, float("nan"), float("inf"), [1], {}))


def test_the_captioned_answer_is_kokoros_shape():
    words = [WordTime("Hello", 0.1, 0.4), WordTime("there", 0.5, 0.9)]
    assert captioned(b"RIFF", "audio/wav", words) == {
        "audio": base64.b64encode(b"RIFF").decode(), "audio_format": "audio/wav",
        "timestamps": [{"word": "Hello", "start_time": 0.1, "end_time": 0.4},
                       {"word": "there", "start_time": 0.5, "end_time": 0.9}]}
    assert captioned(b"x", "audio/mpeg", None)["timestamps"] is None


def _plan(**body: Any) -> Any:
    return plan(parse_body({"input": "Hi.", **body}), Limits(("m",)), native_rate=48000, native_channels=2)


@pytest.mark.parametrize("body, streaming, sse", [
    ({"timestamps": "word"}, False, False),  # no `stream`: the whole answer (JSON)
    ({"timestamps": "word", "stream": False}, False, False),
    ({"timestamps": "word", "stream_format": "sse"}, True, True),
    ({"timestamps": "word", "stream": True, "stream_format": "sse"}, True, True),
    ({}, True, False),  # not asked: as before
])
def test_timestamps_planned(body, streaming, sse):
    p = plan_words(_plan(**body), aligner=True)
    assert (p.streaming, p.sse) == (streaming, sse)


@pytest.mark.parametrize("body, aligner", [
    ({"timestamps": "word"}, False),
    ({"timestamps": "word", "stream_format": "sse"}, False),
    ({"timestamps": "word", "stream": True}, True),  # a raw audio stream cannot carry them
])
def test_timestamps_refused_naming_it(body, aligner):
    with pytest.raises(ApiError) as e:
        plan_words(_plan(**body), aligner=aligner)
    assert e.value.status == 400 and e.value.param == "timestamps"


def test_a_timestamps_value_other_than_word_is_refused_naming_it():
    with pytest.raises(ApiError) as e:
        parse_body({"input": "Hi.", "timestamps": "char"})
    assert e.value.param == "timestamps"


def test_the_captioned_path_body():
    assert speech_body({"input": "Hi."}) == {"input": "Hi.", "timestamps": "word", "stream": False}
    assert speech_body({"input": "Hi.", "stream": True}) == {"input": "Hi.", "timestamps": "word", "stream": False}
    assert speech_body({"input": "Hi.", "return_timestamps": False}) == {"input": "Hi.", "stream": False}
    for bad, param in (({"return_timestamps": "yes"}, "return_timestamps"), ({"stream": 1}, "stream"),
                       ({"stream_format": "sse"}, "stream_format"),
                       ({"return_timestamps": False, "timestamps": "word"}, "timestamps")):
        with pytest.raises(ApiError) as e:
            speech_body({"input": "Hi.", **bad})
        assert e.value.param == param


def test_a_cancel_aligns_the_sentences_whose_audio_went_out_but_whose_words_had_not_come():
    from v2.runtime.handles import SegmentMark
    from v2.server.ws_speak import late_words

    hop, rate = 10, 1000  # a frame is 10 ms
    marks = [SegmentMark(0, 0, 5, 0, 10, "stop"), SegmentMark(1, 5, 10, 10, 20, "stop"),
             SegmentMark(2, 10, 17, 20, 30, "stop"), SegmentMark(3, 17, 20, 30)]
    calls: list[tuple[int, str]] = []

    class Aligner:
        def align(self, audio: np.ndarray, sample_rate: int, text: str, language: Any = None) -> list[WordTime]:
            calls.append((audio.shape[1], text))
            if text.strip() == "bad":
                raise ValueError("text: no words")
            return [WordTime(text.strip(), 0.01, 0.05)]

    out = SimpleNamespace(kept=[np.zeros((1, 200), np.float32), np.zeros((1, 200), np.float32)], hop=hop,
                          native_rate=rate, sent_s=0.25, c=SimpleNamespace(params=SimpleNamespace(language=None)))
    handle = SimpleNamespace(events=lambda: [AddedEvent("aligner", 0, sentence(0, 0.05))], marks=lambda: marks)
    u = SimpleNamespace(out=out, handle=handle, text="zero one  two three")
    late = late_words(Aligner(), u)
    # sentence 0 is aligned by the loop; 2 ends at 0.30 s, past the 0.25 s sent; 3 has not ended
    assert calls == [(100, "one  ")]
    assert late == [SentenceWords(1, 5, 10, (WordTime("one", 0.01 + 0.1, 0.05 + 0.1),))]
    u.text = "zero bad   two three"
    assert late_words(Aligner(), u) == []  # the aligner refuses it: left out
    assert late_words(Aligner(), SimpleNamespace(out=None)) == []
