"""The encode loop of one request (front, before admission): its context recordings -> Mimi codes.

Owns: `EncodeState` (the recordings, mono at the codec's rate, in turn order; its one slot; what is
launched and what came back) and `EncodeLoop`, a stateless driven loop: `next` plans every recording of
the request at once (one ENCODE plan; the executor encodes each recording alone, one whole-recording call,
as the reference's processor does per audio segment), `advance` keeps the codes, and the loop ends when
they are in. One slot per request (the `encode` pool bounds requests encoding at once).
Must not know: tensors on a device, batching, other requests, the codec's weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from v2.contracts import FinishReason, LoopState, ShapeSignature, WorkPlan, WorkUnitKind

EXPERT = "codec_encoder"
ENCODE = "encode"  # the front loop's name
SIGNATURE = ShapeSignature(WorkUnitKind.ENCODE, EXPERT)


@dataclass(frozen=True)
class EncodePlan:
    slot: int
    audio: tuple[Any, ...]  # float32 [n_i] (numpy) per recording, at the codec's rate


@dataclass
class EncodeState(LoopState):
    audio: tuple[Any, ...] = ()
    slots: list[int] = field(default_factory=list)
    launched: bool = False
    codes: list[np.ndarray] | None = None  # int64 [F_i, N] per recording, once encoded

    @property
    def inputs(self) -> int:
        """Slots it holds while it encodes: one, whatever its recordings."""
        return 1


class EncodeLoop:
    kind = ENCODE

    def init(self, request_id: int, audio: tuple[Any, ...]) -> EncodeState:
        if not audio:
            raise ValueError("an encode needs at least one recording")
        return EncodeState(request_id, audio=tuple(audio))

    def next(self, state: EncodeState) -> WorkPlan | None:
        if state.finish is not None or state.launched:
            return None
        return WorkPlan(state.request_id, self.kind, SIGNATURE, EncodePlan(state.slots[0], state.audio))

    def started(self, state: EncodeState, slots: list[int]) -> None:
        state.slots = slots

    def launched(self, state: EncodeState, plan: WorkPlan) -> None:
        state.launched = True

    def advance(self, state: EncodeState, plan: WorkPlan, codes: list[Any]) -> None:
        """codes: int64 [F_i, N] per recording of the plan."""
        if len(codes) != len(state.audio):
            raise RuntimeError(f"encode returned {len(codes)} recordings' codes for {len(state.audio)}")
        state.codes = [np.asarray(c, dtype=np.int64) for c in codes]
        state.finish = FinishReason.STOP

    def finalize(self, state: EncodeState) -> list[Any]:
        """The codes of every recording ([] when not done): what an encode-only job returns."""
        return list(state.codes or [])
