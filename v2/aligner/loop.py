"""The aligner's added loop: a request's audio (the audio loop's chunks, any family) cut into spans, one per
sentence / long-text segment as its family marks them (`AddedContext.segments()`; one span for the whole
request where it marks none), each span aligned as soon as its audio is complete.

Owns: `AlignState` (a request's audio so far, mono at the family's rate; its spans cut, queued, in flight and
aligned), `Span` (a plan's payload: its index, its span of the text, its words and ids, its audio, its offset
and duration in seconds from the start of the request's audio), `channel_mean` (a chunk's mono mix), and
`AlignerLoop`: a request that does not ask for `timestamps: "word"` costs nothing (its state ends with the
audio loop, no plan); one that does gets one plan per span, one in flight at a time (so its `SentenceWords`
come in order), each `advance` leaving the span's `SentenceWords` in `fresh` (its event); `finalize` gives
them all (`SpeechResult.added["aligner"]`). A span's words are its text's by the release's rule (the request's
`language` where it names Japanese or Korean and this build can split it; else the default rule); a family
that gives ids only gets spans without words. An aborted or failed upstream ends the loop at once.
Must not know: any family, tensors, the model's internals, the engine.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from v2.aligner.service import Aligner
from v2.contracts import AudioChunk, FinishReason, Kind, LoopState, ShapeSignature, WorkPlan
from v2.events import SentenceWords
from v2.models.forced_aligner.words import LanguageError, check_language, find_korean_dict, split_words
from v2.runtime.added import AddedContext

WORDS = "word"  # the `timestamps` value that asks for word times


def align_kind(name: str) -> Kind:
    """The work kind of the aligner loop named `name` (`<name>_align`: each added loop's kinds are its own)."""
    kinds = Kind(f"Align_{name}", [("ALIGN", f"{name}_align")])  # type: ignore[call-arg]
    return kinds.ALIGN  # type: ignore[no-any-return,attr-defined]


@dataclass(frozen=True, eq=False)
class Span:
    """One span to align (compared by identity: the plan in flight is this object)."""

    index: int
    text_start: int | None
    text_end: int | None
    words: tuple[str, ...]
    word_ids: tuple[tuple[int, ...], ...]
    audio: np.ndarray  # mono float32 [n] at `rate`
    rate: int
    offset: float      # seconds from the start of the request's audio
    duration: float    # seconds of this span's audio


@dataclass
class AlignState(LoopState):
    context: AddedContext | None = None
    wanted: bool = False
    language: str | None = None
    pieces: list[np.ndarray] = field(default_factory=list)  # mono chunks not yet cut into a span
    samples: int = 0          # samples received
    frames: int = 0           # frames received (the chunks' `frames`)
    cut: int = 0              # the first sample of the next span
    marks_done: int = 0       # the family's segment marks already cut
    spans: int = 0            # spans cut
    pending: list[Span] = field(default_factory=list)
    inflight: Span | None = None
    upstream: FinishReason | None = None
    done: list[SentenceWords] = field(default_factory=list)


def request_language(request: object) -> str | None:
    """The request's `language` where it names Japanese or Korean and this build can split it; else None."""
    value = getattr(request, "language", None)
    if not isinstance(value, str):
        return None
    try:
        key = check_language(value)
    except LanguageError:
        return None
    if key == "japanese":
        return key if importlib.util.find_spec("nagisa") is not None else None
    if key == "korean" and find_korean_dict() is not None and importlib.util.find_spec("soynlp") is not None:
        return key
    return None


def channel_mean(audio: np.ndarray) -> np.ndarray:
    """The channels' mean of float32 samples [channels, n] -> [n] (one channel: its samples), the bits of
    `audio.mean(axis=0, dtype=np.float32)`. Two channels (the stereo cards' chunks are [n, 2] transposed, which
    numpy's reduction walks ~30x slower): numpy's order, 0 + a0, then + a1, then / 2, in elementwise passes."""
    if audio.shape[0] == 1:
        return audio[0]
    if audio.shape[0] != 2:
        return audio.mean(axis=0, dtype=np.float32)
    out = np.add(audio[0], np.float32(0.0))  # [n]; 0 + a0: a -0.0 becomes +0.0, as the reduction's start does
    out += audio[1]
    out /= np.float32(2)
    return out


class AlignerLoop:
    def __init__(self, name: str, aligner: Aligner) -> None:
        self.name, self.aligner = name, aligner
        self.kind = align_kind(name)

    def start(self, context: AddedContext) -> AlignState:
        wanted = getattr(context.request, "timestamps", None) == WORDS
        return AlignState(context.request_id, context=context, wanted=wanted,
                          language=request_language(context.request) if wanted else None)

    # ----- the loop -----------------------------------------------------------------------------------
    def next(self, s: AlignState) -> WorkPlan | None:
        if s.finish is not None or s.inflight is not None or not s.pending:
            return None
        return WorkPlan(s.request_id, self.name, ShapeSignature(self.kind, "span"), s.pending[0])

    def launched(self, s: AlignState, plan: WorkPlan) -> None:
        s.inflight = s.pending.pop(0)

    def expects(self, s: AlignState, plan: WorkPlan) -> bool:
        return s.finish is None and s.inflight is plan.payload

    def advance(self, s: AlignState, plan: WorkPlan, row: SentenceWords) -> bool:
        if not self.expects(s, plan):
            return False
        s.inflight = None
        s.done.append(row)
        s.fresh = [row]
        self._end(s)
        return True

    def feed(self, s: AlignState, items: Sequence[AudioChunk], upstream: FinishReason | None) -> None:
        if s.finish is not None:
            return
        if s.wanted:
            for chunk in items:
                audio = np.asarray(chunk.audio, dtype=np.float32)  # [channels, n]
                s.pieces.append(channel_mean(audio))
                s.samples += audio.shape[1]
                s.frames += chunk.frames
        if upstream is not None and s.upstream is None:
            s.upstream = upstream
        if upstream in (FinishReason.ABORT, FinishReason.ERROR):
            s.pending.clear()
            s.finish = upstream
            return
        if s.wanted:
            self._cut(s)
        self._end(s)

    def finalize(self, s: AlignState) -> tuple[SentenceWords, ...]:
        return tuple(s.done)

    # ----- spans ----------------------------------------------------------------------------------------
    def _cut(self, s: AlignState) -> None:
        """Every span whose audio is complete: each marked segment whose last frame has arrived, and, once the
        audio has ended, the rest (the unmarked request whole)."""
        assert s.context is not None
        marks = s.context.segments()
        ended = s.upstream is not None
        text: str | None = None
        for i in range(s.marks_done, len(marks)):
            mark = marks[i]
            last = ended and i == len(marks) - 1
            if not last:
                if mark.frame_end is None or s.frames < mark.frame_end:
                    break
                end = max(s.cut, min(s.samples, round(mark.frame_end * s.samples / max(s.frames, 1))))
            else:
                end = s.samples
            if text is None:
                text = s.context.spoken().text
            self._span(s, end, text, mark.text_start, mark.text_end)
            s.marks_done = i + 1
        if ended and not marks and s.spans == 0:
            text = s.context.spoken().text
            self._span(s, s.samples, text, 0, len(text) if text is not None else None)

    def _span(self, s: AlignState, end: int, text: str | None, start_char: int | None,
              end_char: int | None) -> None:
        rate = s.context.sample_rate if s.context is not None else 1
        audio = np.concatenate(s.pieces) if s.pieces else np.zeros(0, np.float32)
        take = end - s.cut  # this span's samples: the first `take` of what is held
        clip, rest = audio[:take], audio[take:]
        s.pieces = [rest] if rest.size else []
        words: list[str] = []
        if text is not None and start_char is not None and end_char is not None:
            words = split_words(text[start_char:end_char], s.language)
        else:
            start_char = end_char = None
        ids = tuple(tuple(int(i) for i in self.aligner.tokenize(w)) for w in words)
        s.pending.append(Span(s.spans, start_char, end_char, tuple(words), ids, clip, rate, s.cut / rate,
                              clip.shape[0] / rate))
        s.cut, s.spans = end, s.spans + 1

    def _end(self, s: AlignState) -> None:
        if s.upstream is not None and not s.pending and s.inflight is None and s.finish is None:
            s.finish = s.upstream
