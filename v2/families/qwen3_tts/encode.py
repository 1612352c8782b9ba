"""The encode loop of one request (front, before admission): its reference recording -> x-vector and codes.

Owns: the family's front work kinds (`SPEAKER`: the speaker encoder's x-vector; `WorkUnitKind.ENCODE`: the
codec encoder's reference codes, for an in-context clone), `EncodeState` (the recording at the speaker
encoder's and the codec's rates, what is launched, what came back) and `EncodeLoop`, a stateless driven
loop: `next` plans the x-vector first, then (in-context clone) the codes; each is one whole-recording call
(neither encoder streams), one plan per step; `advance` keeps the result; the loop ends when both are in.
Must not know: tensors on a device, batching, other requests, the encoders' weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from v2.contracts import FinishReason, Kind, LoopState, ShapeSignature, WorkPlan, WorkUnitKind


class Qwen3Work(Kind):
    SPEAKER = "speaker_embed"  # a recording through the speaker encoder -> x-vector [H]


SPEAKER_SIGNATURE = ShapeSignature(Qwen3Work.SPEAKER, "speaker_encoder")  # type: ignore[arg-type]
CODES_SIGNATURE = ShapeSignature(WorkUnitKind.ENCODE, "codec_encoder")


@dataclass(frozen=True)
class EncodePlan:
    slot: int
    audio: Any  # float32 [n] (numpy): the recording at the encoder's rate


@dataclass
class EncodeState(LoopState):
    speaker_audio: Any = None          # [n] at the speaker encoder's rate (None: codes only, an encode job)
    codec_audio: Any = None            # [n] at the codec's rate (None: no codes wanted)
    slots: list[int] = field(default_factory=list)
    launched: set[str] = field(default_factory=set)
    xvector: Any = None                # float32 [H]
    codes: Any = None                  # int64 [R, G]

    @property
    def inputs(self) -> int:
        return 1

    def _done(self) -> bool:
        return ((self.speaker_audio is None or self.xvector is not None)
                and (self.codec_audio is None or self.codes is not None))


class EncodeLoop:
    kind = "encode"  # the front loop's name

    def init(self, request_id: int, *, speaker_audio: Any, codec_audio: Any) -> EncodeState:
        if speaker_audio is None and codec_audio is None:
            raise ValueError("an encode needs a recording")
        return EncodeState(request_id, speaker_audio=speaker_audio, codec_audio=codec_audio)

    def next(self, state: EncodeState) -> WorkPlan | None:
        if state.finish is not None:
            return None
        if state.speaker_audio is not None and "speaker" not in state.launched:
            return WorkPlan(state.request_id, self.kind, SPEAKER_SIGNATURE, EncodePlan(state.slots[0], state.speaker_audio))
        if state.codec_audio is not None and "codes" not in state.launched:
            return WorkPlan(state.request_id, self.kind, CODES_SIGNATURE, EncodePlan(state.slots[0], state.codec_audio))
        return None

    def started(self, state: EncodeState, slots: list[int]) -> None:
        state.slots = slots

    def launched(self, state: EncodeState, plan: WorkPlan) -> None:
        state.launched.add("speaker" if plan.signature is SPEAKER_SIGNATURE else "codes")

    def advance(self, state: EncodeState, plan: WorkPlan, out: Any) -> None:
        if plan.signature is SPEAKER_SIGNATURE:
            state.xvector = np.asarray(out, dtype=np.float32)
        else:
            state.codes = np.asarray(out, dtype=np.int64)
        if state._done():
            state.finish = FinishReason.STOP

    def finalize(self, state: EncodeState) -> list[Any]:
        """[codes] (what an encode-only job returns: the recording's codes [R, G]); [] when not done."""
        return [state.codes] if state.codes is not None else []
