"""The encode loop of one request: its reference recordings -> codes, a chunk of frames per engine step.

Owns: `EncodeState` (the recordings, already at the codec's rate and level-set; per recording its encoder
state slot, the frames encoded so far and the codes made) and `EncodeLoop`, a stateless driven loop:
`next` (one ENCODE plan per step with the next `chunk_frames` of every recording with frames left to
launch, or None), `launched` (those frames went to the device), `advance` (append the chunk's codes),
`finalize`. The loop has ended when `state.finish` is set (every recording's codes are in). A recording encodes to `samples // hop` frames (a partial
last frame is left out, as the codec's batched encode does), chunk by chunk, so a long reference never
holds up a step for more than one chunk's work.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from v2.contracts import FinishReason, LoopState, ShapeSignature, WorkPlan, WorkUnitKind
from v2.families.moss_tts_local.kinds import LoopKind

EXPERT = "vocoder_encoder"


@dataclass(frozen=True)
class EncodeRow:
    slot: int      # the recording's encoder state slot
    audio: Any     # float32 [channels, chunk_frames * hop] (numpy): the next samples, zero-padded past the end
    frames: int    # how many of the chunk's frames are real
    recording: int = 0  # which of the request's recordings


@dataclass(frozen=True)
class EncodePlan:
    rows: tuple[EncodeRow, ...]  # one per unfinished recording of the request


@dataclass
class EncodeState(LoopState):
    audio: tuple[Any, ...] = ()
    hop: int = 1
    slots: list[int] = field(default_factory=list)  # its encoder state slots, once started (`started`)
    done: list[int] = field(default_factory=list)   # frames encoded, per recording
    queued: list[int] = field(default_factory=list)  # frames launched (encoded, or on the device), per recording
    parts: list[list[Any]] = field(default_factory=list)  # codes [n, 12] per chunk, per recording
    codes: list[Any] | None = None  # one int64 [N, 12] array per recording, once all are encoded

    @property
    def inputs(self) -> int:
        """Recordings: it holds one encoder state slot each while it encodes."""
        return len(self.audio)

    def frames(self, i: int) -> int:
        return int(self.audio[i].shape[1]) // self.hop


class EncodeLoop:
    kind = LoopKind.ENCODE

    def __init__(self, chunk_frames: int) -> None:
        self.chunk_frames = chunk_frames

    def init(self, request_id: int, audio: tuple[Any, ...], hop: int) -> EncodeState:
        if not audio:
            raise ValueError("an encode needs at least one recording")
        return EncodeState(request_id, audio=tuple(audio), hop=hop, done=[0] * len(audio),
                           queued=[0] * len(audio), parts=[[] for _ in audio])

    def next(self, state: EncodeState) -> WorkPlan[EncodePlan] | None:
        if state.finish is not None:
            return None
        n, hop = self.chunk_frames, state.hop
        rows = []
        for i, audio in enumerate(state.audio):
            real = min(n, state.frames(i) - state.queued[i])
            if real <= 0:
                continue
            start = state.queued[i] * hop
            chunk = np.zeros((audio.shape[0], n * hop), dtype=np.float32)  # [channels, n * hop]
            chunk[:, : real * hop] = audio[:, start : start + real * hop]
            rows.append(EncodeRow(state.slots[i], chunk, real, i))
        if not rows:
            return None  # everything is on the device
        signature = ShapeSignature(WorkUnitKind.ENCODE, EXPERT, n)
        return WorkPlan(state.request_id, LoopKind.ENCODE, signature, EncodePlan(tuple(rows)))

    def started(self, state: EncodeState, slots: list[int]) -> None:
        """Its encoder state slots (one per recording; [] when they are given back)."""
        state.slots = slots

    def launched(self, state: EncodeState, plan: WorkPlan[EncodePlan]) -> None:
        for row in plan.payload.rows:
            state.queued[row.recording] += row.frames

    def advance(self, state: EncodeState, plan: WorkPlan[EncodePlan], codes: list[Any]) -> None:
        """codes: [real frames, 12] per row of the plan."""
        rows = plan.payload.rows
        if len(codes) != len(rows):
            raise RuntimeError(f"encode returned {len(codes)} rows for {len(rows)} recordings")
        for row, c in zip(rows, codes):
            state.parts[row.recording].append(c)
            state.done[row.recording] += len(c)
        if all(d >= state.frames(i) for i, d in enumerate(state.done)):
            state.codes = [np.concatenate(p) for p in state.parts]
            state.finish = FinishReason.STOP

    def finalize(self, state: EncodeState) -> list[Any]:
        """The codes of every recording, int64 [N, G] each ([] when it did not end)."""
        return list(state.codes or [])
