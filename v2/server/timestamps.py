"""Word timestamps on the HTTP surfaces: who may ask for them, how a request asks the runtime, and the shapes
the words go out in.

Owns: whether the runtime has an aligner (`has_aligner`, `Runtime.has_aligner`), the refusals of `timestamps`
(400 naming it: no aligner here; a raw audio stream, which cannot carry them) and what it makes of a plan
(`plan_words`: with `timestamps` and no `stream` given, the whole answer, since raw bytes cannot carry words),
the request field the runtime takes (`ask`: `timestamps: "word"` added to the family's fields, so no family
knows of it), a request's aligned sentences (`sentences`, from its added-loop events or its result), the
words' JSON (`{word, start, end}` in seconds from the start of the request's audio; Kokoro-FastAPI's captioned
answer `{audio, audio_format, timestamps: [{word, start_time, end_time}]}`), chunks and sentence words merged
on the event loop in the order they come (`merged`, through interleave.py), and what a barge-in's listener heard
(`heard`).
Must not know: the engine's internals, the aligner's model, any family, routes.
"""

from __future__ import annotations

import base64
import math
from dataclasses import replace
from typing import Any, AsyncIterator, Iterable, Sequence

from v2.contracts import AudioChunk
from v2.events import SentenceWords, WordTime
from v2.params import SpeechParams
from v2.server.errors import ApiError
from v2.server.interleave import interleave

ALIGNER = "aligner"  # the word aligner's added-loop name (its events' and result's key)
EVENT = "speech.timestamps"  # one sentence's words, over SSE and the WebSocket
NO_ALIGNER = ("timestamps: this server has no aligner (start it with `v2 serve --aligner NAME`, e.g. "
              "forced_aligner_tiny or forced_aligner_0_6b)")


def has_aligner(runtime: object) -> bool:
    """The runtime was built with an aligner loop (`Runtime.has_aligner`; False where it has no such property)."""
    return getattr(runtime, "has_aligner", False) is True


def refuse_without(params: SpeechParams, aligner: bool) -> None:
    """`timestamps` asked of a runtime without an aligner: 400 naming it."""
    if params.timestamps is not None and not aligner:
        raise ApiError(400, NO_ALIGNER, param="timestamps", code="unsupported")


def plan_words(p: Any, aligner: bool) -> Any:
    """A speech plan (`schema.SpeechPlan`) with `timestamps` checked: refused without an aligner or on a raw audio
    stream (`stream: true` without `stream_format: sse`); with no `stream` given, the whole answer (JSON)."""
    body: SpeechParams = p.params
    if body.timestamps is None:
        return p
    refuse_without(body, aligner)
    if p.sse:
        return p
    if body.stream is True:
        raise ApiError(400, "timestamps: a raw audio stream cannot carry them; ask for stream_format \"sse\" (events "
                       "beside the audio) or stream false (one JSON answer)", param="timestamps", code="invalid_value")
    return replace(p, streaming=False)


def ask(fields: dict[str, Any], wanted: bool) -> dict[str, Any]:
    """The family's request fields, with the runtime's `timestamps: "word"` where `wanted`."""
    return {**fields, "timestamps": "word"} if wanted else fields


def sentences(events: Iterable[Any]) -> list[SentenceWords]:
    """The aligned sentences among a request's added-loop events (`AddedEvent`s), in order."""
    return [e.item for e in events if getattr(e, "loop", None) == ALIGNER and isinstance(e.item, SentenceWords)]


def words_of(spans: Iterable[SentenceWords]) -> list[WordTime]:
    return [w for s in spans for w in s.words]


def word_json(w: WordTime) -> dict[str, Any]:
    return {"word": w.word, "start": w.start, "end": w.end}


def sentence_json(s: SentenceWords) -> dict[str, Any]:
    """One sentence's words as an event's payload (its `type` added by the caller)."""
    return {"sentence_index": s.index, "text_start": s.text_start, "text_end": s.text_end,
            "words": [word_json(w) for w in s.words]}


def captioned(data: bytes, content_type: str, words: Sequence[WordTime] | None) -> dict[str, Any]:
    """Kokoro-FastAPI's captioned speech answer: the whole file in base64, its type, and the words (None: not
    asked, `return_timestamps: false` at its path)."""
    stamps = None if words is None else [{"word": w.word, "start_time": w.start, "end_time": w.end} for w in words]
    return {"audio": base64.b64encode(data).decode(), "audio_format": content_type, "timestamps": stamps}


PLAYED = "played_ms: a non-negative number, the milliseconds of the utterance's audio the client has played"


def played_ok(value: object) -> bool:
    """`input.cancel`'s `played_ms`: absent, or a finite non-negative number (not a boolean)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and math.isfinite(value) and value >= 0)


def heard(spans: Iterable[SentenceWords], sent_s: float, played_ms: float | None) -> dict[str, Any]:
    """What a barge-in's acknowledgement says of the words: `words_sent`, those whose audio went out whole
    (ending at most `sent_s` seconds into the utterance's audio), and `words_heard`, of them those that end at
    most `played_ms` into it (every sent word when no position was given)."""
    sent = [w for w in words_of(spans) if w.end <= sent_s]
    played = None if played_ms is None else played_ms / 1000.0
    return {"words_sent": [word_json(w) for w in sent],
            "words_heard": [word_json(w) for w in sent if played is None or w.end <= played]}


def merged(handle: Any, words: bool) -> AsyncIterator[AudioChunk | SentenceWords]:
    """The handle's chunks and (`words`) its aligned sentences, in the order they reach the event loop; after the
    last chunk, every sentence not yet given (the request has ended: its events are all published). Closing it
    early cancels the request; a read error is raised to the caller (a raw stream cannot carry it in-band)."""
    def pick(e: Any) -> SentenceWords | None:
        return e.item if words and e.loop == ALIGNER and isinstance(e.item, SentenceWords) else None
    return interleave(handle, pick, raise_read_error=True)
