"""CSM's backbone loop: the kit's paged AR sequence (v2/kit/sequence.py) with this family's stop rule.

Owns: `CsmLoop` (the generic `ARLoop` named "backbone" on the model expert) and `recompute_rows`. A frame
step t is one plan: on the device it chooses codebook 0 of frame t from the backbone state the step
before left, completes the frame with the depth decoder's N-1 codebooks, and feeds the frame's audio row
through the backbone, which leaves the state for frame t + 1. The stop is a frame of codes (the
reference's rule: codebooks 0..N-2 all `codebook_eos`), so unlike a stop id it is a frame too: it stays in
the codes and logprobs, as the reference's `generate` returns it, and it goes to the codec unless all N
of its codes are `codebook_eos` (the reference's audio cut). `max_frames` counts frames with the stop frame
included, as the reference's `max_new_tokens` does. No long-text segments, no per-frame input (`feed` 0).
Rows are int64 [T, 1 + N] (prepare.py): the prompt id, then a frame's codes on audio rows, -1 elsewhere.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from typing import Any

import torch

from v2.contracts import FinishReason, WorkPlan, WorkUnitKind
from v2.kit.sequence import ARLoop, ARResult, ARSequence, FrameRow

EXPERT = "model"
BACKBONE = "backbone"  # the loop's name (its plans' `loop`, its state's key in a record)
CsmState = ARSequence
CsmResult = ARResult

__all__ = ["BACKBONE", "CsmLoop", "CsmResult", "CsmState", "EXPERT", "decoded", "recompute_rows"]


def decoded(codes: tuple[int, ...], eos: int) -> bool:
    """Whether the reference decodes a frame to audio: not when all its codes are `codebook_eos`."""
    return any(c != eos for c in codes)


class CsmLoop(ARLoop[ARSequence]):
    """`codebook_eos`: the stop code (the config's `codebook_eos_token_id`)."""

    stop_in_logprobs = True  # the stop frame's row is a frame's: its logprobs stay in the table

    def __init__(self, settings: Any, codebook_eos: int) -> None:
        super().__init__(settings, BACKBONE, EXPERT)
        self.eos = codebook_eos

    def init(self, request_id: int, rows: Any, *, max_frames: int, slot: int) -> ARSequence:
        return ARSequence(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), max_frames=max_frames,
                          slot=slot)

    def advance(self, state: ARSequence, plan: WorkPlan, row: FrameRow | None) -> bool:
        """The generic take, except for a stop frame: kept as a frame (codes, logprobs), sent to the codec
        unless all its codes are `codebook_eos`, and the sequence ends `stop`."""
        if row is None or not row.stop or plan.signature.kind is not WorkUnitKind.AR_FRAME:
            return super().advance(state, plan, row)
        state.fresh = []
        if not self.expects(state, plan):
            return False
        state.codes.append(row.codes)
        state.logprobs.append(row.logprobs)
        state.fresh = [row.codes] if decoded(row.codes, self.eos) else []
        state.finish = FinishReason.STOP
        return True


def recompute_rows(state: ARSequence, audio_id: int) -> torch.Tensor:
    """The rows a resumed request needs in its KV: its prompt, then each frame's audio row as it was fed
    (`audio_id` in column 0, as the prompt's context frames)."""
    prompt = state.rows[: state.prompt_len]
    if not state.codes:
        return prompt
    frames = torch.full((len(state.codes), prompt.shape[1]), audio_id, dtype=torch.long)  # [F, 1 + N]
    frames[:, 1:] = torch.tensor(state.codes, dtype=torch.long)
    return torch.cat([prompt, frames])
