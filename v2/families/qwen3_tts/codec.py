"""The codec loop of one request: its frames -> 24 kHz mono audio chunks, through a per-slot streaming decoder.

Owns: `CodecState` (context frames to decode first, frames received and not yet launched, chunks made, its
codec slot) and `CodecLoop`, a stateless driven loop: `feed` (frames from the talker loop), `next` (an
AUDIO_CHUNK plan when a chunk is due, or None), `launched`, `advance` (make the chunk from the decoded
audio), `finalize`. Chunking as MOSS's vocoder loop: a first chunk of `first_chunk_frames`, doubling up to
`chunk_frames`; a chunk is cut once a frame beyond it exists or the utterance has ended, so the last chunk
is always marked final. An in-context clone's reference codes are decoded first as context (chunks whose
audio is dropped): the stream's state then holds them as the public API's decode of reference + frames
does, and what is delivered is that decode with the reference's samples cut (R x hop samples).
Must not know: tensors on a device, batching, other requests, the talker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from v2.contracts import AudioChunk, FinishReason, LoopState, ShapeSignature, WorkPlan, WorkUnitKind, bucket_for
from v2.families.qwen3_tts.card import CodecSettings

EXPERT = "codec"
CODEC = "codec"  # the loop's name


@dataclass(frozen=True)
class CodecResult:
    finish: FinishReason
    chunks: list[AudioChunk]


@dataclass(frozen=True)
class ChunkPlan:
    slot: int
    codes: tuple[tuple[int, ...], ...]  # the chunk's frames, G codes each
    final: bool                         # no frame follows this chunk
    context: bool = False               # reference frames decoded for their state only (no audio delivered)


@dataclass
class CodecState(LoopState):
    sample_rate: int = 0
    enabled: bool = True
    slot: int = -1
    context: list[tuple[int, ...]] = field(default_factory=list)  # reference frames not yet launched
    pending: list[tuple[int, ...]] = field(default_factory=list)
    planned: int = 0                    # chunks of frames launched (context chunks not counted)
    upstream: FinishReason | None = None
    chunks: list[AudioChunk] = field(default_factory=list)
    fresh: list[AudioChunk] = field(default_factory=list)


class CodecLoop:
    kind = CODEC

    def __init__(self, settings: CodecSettings) -> None:
        self.settings = settings

    def init(self, request_id: int, *, sample_rate: int, enabled: bool = True, slot: int = -1,
             context: list[tuple[int, ...]] | None = None) -> CodecState:
        return CodecState(request_id=request_id, sample_rate=sample_rate, enabled=enabled, slot=slot,
                          context=list(context or []) if enabled else [])

    def chunk_size(self, index: int) -> int:
        s = self.settings
        return min(s.chunk_frames, s.first_chunk_frames * 2 ** min(index, 30))

    def feed(self, state: CodecState, frames: list[tuple[int, ...]], upstream: FinishReason | None) -> None:
        if state.enabled:
            state.pending.extend(frames)
        if upstream is not None:
            state.upstream = upstream
            if not state.pending:
                state.finish = upstream

    def _plan(self, state: CodecState, codes: list[tuple[int, ...]], final: bool, context: bool) -> WorkPlan:
        signature = ShapeSignature(WorkUnitKind.AUDIO_CHUNK, EXPERT, bucket_for(len(codes), self.settings.frame_buckets))
        return WorkPlan(state.request_id, self.kind, signature, ChunkPlan(state.slot, tuple(codes), final, context))  # type: ignore[arg-type]

    def next(self, state: CodecState) -> WorkPlan | None:
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
        else:
            return None
        return self._plan(state, state.pending[:n], final, False)

    def expects(self, state: CodecState, plan: WorkPlan) -> bool:
        return True

    def launched(self, state: CodecState, plan: WorkPlan) -> None:
        p: ChunkPlan = plan.payload
        if p.context:
            del state.context[: len(p.codes)]
            return
        del state.pending[: len(p.codes)]
        state.planned += 1

    def advance(self, state: CodecState, plan: WorkPlan, audio: Any) -> bool:
        """`audio`: the chunk's samples, float32 [1, frames * hop]; a context chunk's are dropped (False)."""
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

    def finalize(self, state: CodecState) -> CodecResult:
        return CodecResult(state.finish or FinishReason.ABORT, list(state.chunks))
