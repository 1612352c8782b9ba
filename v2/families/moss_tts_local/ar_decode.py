"""MOSS-TTS-Local's AR decode loop: the kit's paged AR sequence (v2/kit/sequence.py) with this
family's terms.

Owns: `ARDecodeLoop`, the generic `ARLoop` named `LoopKind.AR_DECODE` on the backbone, whose rows are
int64 [T, 13] (a text id, 12 codes) and whose frame rows carry 13 logprobs (the stop decision, then each
codebook; a stop's row is kept, so `logprobs` has every decision, the final stop included); `init` from a
request's limits (`min_frames` is the floor; `open_text`: its segments arrive while it runs) and the KV
rows a request asks for (`resources`). `ARState`, `ARResult`, the plans and `FrameRow` are the runtime's.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from typing import Any

from v2.contracts import ShapeSignature, WorkUnitKind
from v2.families.moss_tts_local.kinds import LoopKind
from v2.families.moss_tts_local.card import ARDecodeSettings
from v2.kit.sequence import ARLoop, ARResult, ARSequence, FramePlan, FrameRow, PrefillPlan

EXPERT = "backbone"
PREFILL = ShapeSignature(WorkUnitKind.PREFILL, EXPERT)
FRAME = ShapeSignature(WorkUnitKind.AR_FRAME, EXPERT)
ARState = ARSequence

__all__ = ["ARDecodeLoop", "ARResult", "ARState", "EXPERT", "FRAME", "FramePlan", "FrameRow", "PREFILL", "PrefillPlan"]


class ARDecodeLoop(ARLoop[ARSequence]):
    stop_in_logprobs = True  # the stop head's choice is column 0 of every row, the final stop's row included

    def __init__(self, settings: ARDecodeSettings) -> None:
        super().__init__(settings, LoopKind.AR_DECODE, EXPERT)

    def init(self, request_id: int, rows: Any, *, max_frames: int, min_frames: int,
             segment_caps: tuple[int, ...] = (), slot: int = -1, open_text: bool = False) -> ARState:
        """`max_frames`: the first segment's cap; `segment_caps`: the caps of the segments that follow;
        `slot`: its KV slot (given at admission); `open_text`: its segments arrive while it runs."""
        return ARState(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), max_frames=max_frames,
                       floor=min_frames, segment_caps=segment_caps, slot=slot, open_segments=open_text)
