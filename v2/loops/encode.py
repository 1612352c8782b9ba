"""The encode loop of one request: its reference recordings -> codes, as ENCODE work the runtime batches.

Owns: `EncodeState` (the recordings, already at the codec's rate and level-set, and the codes made) and
`EncodeLoop`, a stateless driven loop: `next` (one ENCODE plan carrying all of the request's recordings,
or Done once they are encoded), `advance` (take the codes), `finalize`.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from v2.contracts import Done, FinishReason, LoopKind, LoopResult, LoopState, ShapeSignature, StepResult, WorkPlan, WorkUnitKind

EXPERT = "vocoder_encoder"


@dataclass(frozen=True)
class EncodePlan:
    audio: tuple[Any, ...]  # each recording float32 [channels, n] (numpy) at the codec's rate
    samples: int            # all recordings' samples per channel: what the step budget counts


@dataclass
class EncodeState(LoopState):
    audio: tuple[Any, ...] = ()
    codes: list[Any] | None = None  # one int64 [N, 12] array per recording, once encoded


class EncodeLoop:
    kind = LoopKind.ENCODE

    def init(self, request_id: int, audio: tuple[Any, ...]) -> EncodeState:
        if not audio:
            raise ValueError("an encode needs at least one recording")
        return EncodeState(request_id, audio=tuple(audio))

    def next(self, state: EncodeState) -> WorkPlan | Done:
        if state.codes is not None:
            return Done(FinishReason.STOP)
        plan = EncodePlan(state.audio, sum(int(a.shape[1]) for a in state.audio))
        return WorkPlan(state.request_id, LoopKind.ENCODE, ShapeSignature(WorkUnitKind.ENCODE, EXPERT), plan)

    def advance(self, state: EncodeState, result: StepResult) -> None:
        codes = list(result.data)
        if len(codes) != len(state.audio):
            raise RuntimeError(f"encode returned {len(codes)} code arrays for {len(state.audio)} recordings")
        state.codes, state.finish = codes, FinishReason.STOP

    def finalize(self, state: EncodeState) -> LoopResult:
        return LoopResult(state.finish or FinishReason.ABORT, {"codes": state.codes or []})
