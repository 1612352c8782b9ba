"""The vocoder loop of one request: turn its frames into audio chunks as they arrive.

Owns: `VocoderState` (frames received and not yet launched, chunks made, its codec slot) and
`VocoderLoop`, a stateless driven loop: `feed` (frames from the AR loop), `next` (an AUDIO_CHUNK plan
when a chunk is due, or None; no kernel), `launched` (the chunk's frames went to the device), `advance`
(make the chunk from the decoded audio), `finalize`. The loop has ended when `state.finish` is set: once
the final chunk is made (or at once when the utterance ends with nothing left to decode).
Chunking: a first chunk of `first_chunk_frames`, doubling per chunk up to `chunk_frames`, the rest at the
end. A chunk is cut once a frame beyond it exists or the utterance has ended, so the last chunk is always
marked final. While the AR loop waits for input (`hold`: an open request's text has run dry), every
pending frame but the last is cut, so the audio made so far goes out; the last waits to learn if it is final.
Must not know: tensors on a device, batching, other requests, the TTS model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from v2.contracts import AudioChunk, FinishReason, LoopKind, LoopState, ShapeSignature, WorkPlan, WorkUnitKind, bucket_for
from v2.families.moss_tts_local.card import VocoderSettings

EXPERT = "vocoder"
__all__ = ["AudioChunk", "ChunkPlan", "VocoderLoop", "VocoderResult", "VocoderState"]


@dataclass(frozen=True)
class VocoderResult:
    finish: FinishReason
    chunks: list[AudioChunk]


@dataclass(frozen=True)
class ChunkPlan:
    slot: int
    codes: tuple[tuple[int, ...], ...]  # the chunk's frames, 12 codes each
    final: bool                         # no frame follows this chunk


@dataclass
class VocoderState(LoopState):
    sample_rate: int = 0
    enabled: bool = True                    # False: frames are dropped, no audio is made
    slot: int = -1                          # codec slot, set at admission
    pending: list[tuple[int, ...]] = field(default_factory=list)  # frames not yet launched to the codec
    planned: int = 0                        # chunks launched (made, or on the device)
    upstream: FinishReason | None = None    # how the AR loop ended, once it has
    held: bool = False                      # the AR loop waits for input: cut all pending frames but the last
    chunks: list[AudioChunk] = field(default_factory=list)
    fresh: list[AudioChunk] = field(default_factory=list)  # made by the last advance


class VocoderLoop:
    kind = LoopKind.VOCODER

    def __init__(self, settings: VocoderSettings) -> None:
        self.settings = settings

    def init(self, request_id: int, *, sample_rate: int, enabled: bool = True, slot: int = -1) -> VocoderState:
        """`slot`: its codec slot (given at admission; none when not `enabled`)."""
        return VocoderState(request_id=request_id, sample_rate=sample_rate, enabled=enabled, slot=slot)

    def chunk_size(self, index: int) -> int:
        """Frames in chunk `index`: the first chunk's size, doubling up to the steady size. Each chunk then
        plays at least as long as the next one takes to make whenever generation runs faster than half
        real time, so a stream does not underrun after its small first chunk."""
        s = self.settings
        return min(s.chunk_frames, s.first_chunk_frames * 2 ** min(index, 30))

    def feed(self, state: VocoderState, frames: list[tuple[int, ...]], upstream: FinishReason | None) -> None:
        if state.enabled:
            state.pending.extend(frames)
        if frames:
            state.held = False
        if upstream is not None:
            state.upstream = upstream
            if not state.pending:  # nothing left to decode (e.g. it stopped right after a chunk)
                state.finish = upstream

    def next(self, state: VocoderState) -> WorkPlan | None:
        """A due chunk's plan, or None (ended, or waiting for frames)."""
        if state.finish is not None or not state.pending:
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
        plan = ChunkPlan(state.slot, tuple(state.pending[:n]), final)
        signature = ShapeSignature(WorkUnitKind.AUDIO_CHUNK, EXPERT, bucket_for(n, self.settings.frame_buckets))
        return WorkPlan(state.request_id, self.kind, signature, plan)

    def hold(self, state: VocoderState) -> None:
        """The AR loop waits for input: no frame may come for a while, so the pending ones go out (but one)."""
        state.held = True

    def expects(self, state: VocoderState, plan: WorkPlan) -> bool:
        """Every launched chunk is one the loop waits for."""
        return True

    def launched(self, state: VocoderState, plan: WorkPlan) -> None:
        """The chunk's frames went to the device (a non-final chunk leaves at least one frame pending, so the
        final chunk is always planned once the utterance has ended)."""
        del state.pending[: len(plan.payload.codes)]
        state.planned += 1

    def advance(self, state: VocoderState, plan: WorkPlan, audio: Any) -> bool:
        """`audio`: the chunk's samples, float32 [channels, frames * hop] (numpy)."""
        chunk_plan: ChunkPlan = plan.payload
        chunk = AudioChunk(len(state.chunks), audio, state.sample_rate, len(chunk_plan.codes), chunk_plan.final)
        state.chunks.append(chunk)
        state.fresh = [chunk]
        if chunk_plan.final:
            state.finish = state.upstream
        return True

    def finalize(self, state: VocoderState) -> VocoderResult:
        return VocoderResult(state.finish or FinishReason.ABORT, list(state.chunks))
