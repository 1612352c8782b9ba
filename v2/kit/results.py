"""What every family's result is made of, from a finished request's record and its loops' results.

Owns: `joined_audio` (the audio loop's chunks joined, or no samples), `request_metrics` (a request's
metrics from its record: time to first audio, total, queueing), `timings` (a metrics' times as a
trajectory records them) and `segment_spans` (each segment's text span and frame range, the frame ranges
tiling the codes). What a record gives: `submitted`, `admitted`, `first_audio`.
Must not know: any family's codes, prompt layout, segments' planning or trajectory fields.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from v2.contracts import AudioChunk, FinishReason
from v2.runtime.handles import Metrics, SegmentMark, SpeechSegment


def joined_audio(chunks: Sequence[AudioChunk], channels: int) -> np.ndarray:
    """The chunks' audio joined, float32 [channels, samples] (no chunks: [channels, 0])."""
    return np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((channels, 0), np.float32)


def request_metrics(record: Any, prompt_rows: int, frames: int, audio_seconds: float, now: float) -> Metrics:
    """A finished request's metrics; its times from its record (`now`: when it finished)."""
    return Metrics(
        prompt_rows=prompt_rows, frames=frames, audio_seconds=audio_seconds,
        ttfa_s=None if record.first_audio is None else record.first_audio - record.submitted,
        total_s=now - record.submitted, queue_s=(record.admitted or now) - record.submitted)


def timings(metrics: Metrics) -> dict[str, float | None]:
    """The times a trajectory records."""
    return {"queue_s": metrics.queue_s, "total_s": metrics.total_s, "ttfa_s": metrics.ttfa_s}


def segment_spans(planned: Sequence[Any], ended: Iterable[tuple[int, int, FinishReason]],
                  text_length: int) -> tuple[SpeechSegment, ...]:
    """Each ended segment (its prompt rows, frames, finish) with its text span (`planned[i].start` / `.end`; one
    past the plan spans the whole text, `text_length`) and its frame range (the frame ranges tile the codes)."""
    out, frame = [], 0
    for i, (prompt_rows, frames, finish) in enumerate(ended):
        start, end = (planned[i].start, planned[i].end) if i < len(planned) else (0, text_length)
        out.append(SpeechSegment(start, end, frame, frame + frames, finish.value, prompt_rows))
        frame += frames
    return tuple(out)


def mark_switch(record: Any, state: Any) -> None:
    """A submitted long text switching segments (`state`: its AR sequence, `switching`: `segment` has ended,
    `done_codes` + `codes` its frames so far, `ended[-1]` how): that segment marked with its frames and its
    finish, and the next one begun (`record.work.segments[i]`: `start`, `end` of the text)."""
    planned, frames, i = record.work.segments, len(state.done_codes) + len(state.codes), state.segment
    marks = record.handle.marks()
    start = marks[-1].frame_start if marks and marks[-1].index == i else 0
    record.handle.mark(SegmentMark(i, planned[i].start, planned[i].end, start, frames, state.ended[-1][2].value))
    record.handle.mark(SegmentMark(i + 1, planned[i + 1].start, planned[i + 1].end, frames))
