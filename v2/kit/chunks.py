"""The chunk stream of one request: its frames -> audio chunks as they arrive, through a per-slot streaming
codec decoder; for any family whose codec decodes frames in chunks.

Owns: `ChunkStream` (left-context frames to decode first, frames received and not yet launched, chunks
made, its codec slot), `ChunkLoop`, a stateless driven loop: `feed` (frames from the loop upstream),
`next` (an AUDIO_CHUNK plan when a chunk is due, or None; no kernel), `hold` (the upstream loop waits for
input), `launched`, `advance` (make the chunk from the decoded audio), `finalize`; `ChunkPlan` and
`ChunkResult`. The loop has ended when `state.finish` is set: once the final chunk is made (or at once
when the utterance ends with nothing left to decode).
Chunking: a first chunk of `first_chunk_frames`, doubling per chunk up to `chunk_frames`, the rest at the
end; each chunk then plays at least as long as the next takes to make whenever generation runs faster
than half real time, so a stream does not underrun after its small first chunk. A chunk is cut once a
frame beyond it exists or the utterance has ended, so the last chunk is always marked final. While the
upstream loop waits for input (`hold`: an open request's text has run dry), every pending frame but the
last is cut, so the audio made so far goes out; the last waits to learn if it is final.
Left context (the family's: e.g. an in-context clone's reference codes): decoded first in chunks of at
most the largest bucket whose audio is dropped, so the stream's state holds them as a whole decode of
context + frames would, and what is delivered is that decode without the context's samples.
Must not know: tensors on a device, batching, other requests, any model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

from v2.contracts import AudioChunk, FinishReason, LoopState, ShapeSignature, WorkPlan, WorkUnitKind, bucket_for


@dataclass(frozen=True)
class ChunkResult:
    finish: FinishReason
    chunks: list[AudioChunk]


@dataclass(frozen=True)
class ChunkPlan:
    slot: int
    codes: tuple[tuple[int, ...], ...]  # the chunk's frames (a frame's codes each)
    final: bool                         # no frame follows this chunk
    context: bool = False               # left-context frames decoded for their state only (no audio delivered)


@dataclass
class ChunkStream(LoopState):
    sample_rate: int = 0
    enabled: bool = True                    # False: frames are dropped, no audio is made
    slot: int = -1                          # codec slot, set at admission
    context: list[tuple[int, ...]] = field(default_factory=list)  # left-context frames not yet launched
    pending: list[tuple[int, ...]] = field(default_factory=list)  # frames not yet launched to the codec
    planned: int = 0                        # chunks of frames launched (made, or on the device; context not counted)
    upstream: FinishReason | None = None    # how the upstream loop ended, once it has
    held: bool = False                      # the upstream loop waits for input: cut all pending frames but the last
    chunks: list[AudioChunk] = field(default_factory=list)
    fresh: list[AudioChunk] = field(default_factory=list)  # made by the last advance


class ChunkLoop:
    """`settings`: `first_chunk_frames`, `chunk_frames`, `frame_buckets`; `name`: the loop's name (its
    plans' `loop`, its state's key in a record); `expert`: what its plans' signatures name."""

    def __init__(self, settings: Any, name: Hashable, expert: str) -> None:
        self.settings, self.kind, self.expert = settings, name, expert

    def init(self, request_id: int, *, sample_rate: int, enabled: bool = True, slot: int = -1,
             context: list[tuple[int, ...]] | None = None) -> ChunkStream:
        """`slot`: its codec slot (given at admission; none when not `enabled`); `context`: left-context frames."""
        return ChunkStream(request_id=request_id, sample_rate=sample_rate, enabled=enabled, slot=slot,
                           context=list(context or []) if enabled else [])

    def chunk_size(self, index: int) -> int:
        """Frames in chunk `index`: the first chunk's size, doubling up to the steady size."""
        s = self.settings
        return int(min(s.chunk_frames, s.first_chunk_frames * 2 ** min(index, 30)))

    def feed(self, state: ChunkStream, frames: list[tuple[int, ...]], upstream: FinishReason | None) -> None:
        if state.enabled:
            state.pending.extend(frames)
        if frames:
            state.held = False
        if upstream is not None:
            state.upstream = upstream
            if not state.pending:  # nothing left to decode (e.g. it stopped right after a chunk)
                state.finish = upstream

    def _plan(self, state: ChunkStream, codes: list[tuple[int, ...]], final: bool, context: bool) -> WorkPlan:
        signature = ShapeSignature(WorkUnitKind.AUDIO_CHUNK, self.expert, bucket_for(len(codes), self.settings.frame_buckets))
        return WorkPlan(state.request_id, self.kind, signature, ChunkPlan(state.slot, tuple(codes), final, context))

    def next(self, state: ChunkStream) -> WorkPlan | None:
        """A due chunk's plan (left context first), or None (ended, or waiting for frames)."""
        if state.finish is not None:
            return None
        if state.context:
            return self._plan(state, state.context[: self.settings.frame_buckets[-1]], False, True)
        if not state.pending:
            return None
        due = self.chunk_size(state.planned)
        if len(state.pending) > due:
            n, final = due, False
        elif state.upstream is not None:
            n = min(due, len(state.pending))
            final = n == len(state.pending)
        elif state.held and len(state.pending) > 1:
            n, final = len(state.pending) - 1, False
        else:
            return None
        return self._plan(state, state.pending[:n], final, False)

    def hold(self, state: ChunkStream) -> None:
        """The upstream loop waits for input: no frame may come for a while, so the pending ones go out (but one)."""
        state.held = True

    def expects(self, state: ChunkStream, plan: WorkPlan) -> bool:
        """Every launched chunk is one the loop waits for."""
        return True

    def launched(self, state: ChunkStream, plan: WorkPlan) -> None:
        """The chunk's frames went to the device (a non-final chunk leaves at least one frame pending, so the
        final chunk is always planned once the utterance has ended)."""
        p: ChunkPlan = plan.payload
        if p.context:
            del state.context[: len(p.codes)]
            return
        del state.pending[: len(p.codes)]
        state.planned += 1

    def advance(self, state: ChunkStream, plan: WorkPlan, audio: Any) -> bool:
        """`audio`: the chunk's samples, float32 [channels, frames * hop]; a context chunk's are dropped (False)."""
        p: ChunkPlan = plan.payload
        state.fresh = []
        if p.context:
            return False
        chunk = AudioChunk(len(state.chunks), audio, state.sample_rate, len(p.codes), p.final)
        state.chunks.append(chunk)
        state.fresh = [chunk]
        if p.final:
            state.finish = state.upstream
        return True

    def finalize(self, state: ChunkStream) -> ChunkResult:
        return ChunkResult(state.finish or FinishReason.ABORT, list(state.chunks))
