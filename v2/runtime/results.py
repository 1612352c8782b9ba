"""What a request's result is made of: `SpeechResult` (audio, codes, how it ended, `Metrics`, its segments
(`SpeechSegment`), added loops' results, a speaking LLM's text) and `SegmentMark` (a segment of a request as
it is spoken, before the result). Plain frozen data; v2/runtime/handles.py re-exports every name.
Must not know: handles, threads, callbacks, models, slots, scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from v2.events import SentenceWords, WordTime


@dataclass(frozen=True)
class Metrics:
    prompt_rows: int      # all segments' prompts together
    frames: int
    audio_seconds: float
    ttfa_s: float | None  # submit -> first audio chunk made (None when no audio)
    total_s: float        # submit -> finished
    queue_s: float        # submit -> admitted

    @property
    def rtf(self) -> float | None:
        """Real-time factor = generation time / audio duration (lower is better)."""
        return self.total_s / self.audio_seconds if self.audio_seconds > 0 else None


@dataclass(frozen=True)
class SpeechSegment:
    """One segment of a result: a long text is spoken as consecutive segments of whole sentences."""

    text_start: int          # its span of the request's text: text[text_start:text_end]
    text_end: int
    frame_start: int         # its frames: codes[frame_start:frame_end]; its audio starts at frame_start * hop
    frame_end: int
    finish_reason: str       # how the segment ended: stop | length (its frame cap) | abort (cut short)
    prompt_rows: int


@dataclass(frozen=True)
class SpeechResult:
    audio: np.ndarray        # float32 [channels, samples]
    sample_rate: int
    codes: np.ndarray        # int64 [F, G]: G codes per frame (the family's)
    finish_reason: str       # stop | length | abort | error
    metrics: Metrics
    trajectory: Any = None  # a v2.rl.Trajectory under the ROLLOUT profile
    error: str | None = None
    segments: tuple[SpeechSegment, ...] = ()  # in order; their frame ranges tile `codes` (one unless long text)
    added: Mapping[str, object] = field(default_factory=dict)  # each added loop's result, by its name (v2/runtime/added.py)
    text: str | None = None                     # a speaking LLM's reply text (None where the family speaks a given text)
    text_ids: tuple[int, ...] | None = None      # ... its token ids (the stop token not included)
    text_finish_reason: str | None = None        # ... how the text ended: stop | length | abort

    @property
    def words(self) -> tuple[WordTime, ...]:
        """Every word's times, in order (`timestamps: "word"`: the aligner's `SentenceWords`, flattened; empty
        without them). Seconds from the start of the request's audio."""
        spans = self.added.get("aligner", ())
        return tuple(w for s in spans if isinstance(s, SentenceWords) for w in s.words) \
            if isinstance(spans, tuple) else ()


@dataclass(frozen=True)
class SegmentMark:
    """A segment of a request being spoken (open text: as its segments begin and end, before the result)."""

    index: int
    text_start: int             # its span of the text fed: [text_start, text_end)
    text_end: int
    frame_start: int            # its frames so far: from frame_start; frame_end once it has ended
    frame_end: int | None = None
    finish_reason: str | None = None  # stop | length, once it has ended
