"""The AR decode loop of one request: prefill its prompt in chunks, then one frame per step until stop.

Owns: `ARState` (prompt, prefill cursor, emitted frames and every decision's logprobs, limits, its KV
slot, whether its KV was taken back) and `ARDecodeLoop`, a stateless driven loop: `init` / `next` (a
PREFILL or AR_FRAME plan, or Done; no kernel) / `advance` (take one row of a batched result) /
`finalize`. After a preemption the runtime hands back rows to recompute (the prompt and the rows of the
frames already made); they are prefilled like a prompt, and decoding goes on from the next frame.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from v2.card import ARDecodeSettings
from v2.contracts import (
    Done, FinishReason, LoopKind, LoopResult, LoopState, ResourceRequest, ShapeSignature, StepResult, WorkPlan,
    WorkUnitKind,
)

EXPERT = "backbone"
PREFILL = ShapeSignature(WorkUnitKind.PREFILL, EXPERT)
FRAME = ShapeSignature(WorkUnitKind.AR_FRAME, EXPERT)


@dataclass(frozen=True)
class PrefillPlan:
    slot: int
    start: int        # position of rows[0] in the slot
    rows: Any         # int64 [n, 13] prompt rows (CPU tensor)
    last: bool        # the chunk ends the prompt of a request with no frame yet: its last row's state decodes frame 0


@dataclass(frozen=True)
class FramePlan:
    slot: int
    position: int     # where this step's backbone input (the new frame's row) goes in the slot
    step: int         # frame index: keys the sampling noise
    allow_stop: bool  # False before min_frames


@dataclass(frozen=True)
class FrameRow:
    """One row of an AR_FRAME result."""

    stop: bool
    codes: tuple[int, ...]      # 12 codes (meaningless when stop)
    logprobs: tuple[float, ...]  # 13: the stop decision, then each codebook


@dataclass
class ARState(LoopState):
    rows: Any = None                 # int64 [T', 13] rows to prefill (CPU tensor): the prompt, and after a
                                     # preemption also the rows of the frames made so far
    prompt_len: int = 0              # T, prompt rows
    max_frames: int = 0
    min_frames: int = 0
    slot: int = -1                   # KV slot, set at admission
    prefilled: int = 0               # rows of `rows` already in the KV
    prefix_from: int | None = None   # a group leader whose prefilled prompt is shared instead of prefilling
    paused: bool = False             # its KV was taken back (preempted); it waits to be given rows to recompute
    codes: list[tuple[int, ...]] = field(default_factory=list)     # emitted frames
    logprobs: list[tuple[float, ...]] = field(default_factory=list)  # every decision, the final stop included
    fresh: list[tuple[int, ...]] = field(default_factory=list)     # frames emitted by the last advance


class ARDecodeLoop:
    kind = LoopKind.AR_DECODE

    def __init__(self, settings: ARDecodeSettings) -> None:
        self.settings = settings

    def init(self, request_id: int, rows: Any, *, max_frames: int, min_frames: int) -> ARState:
        return ARState(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), max_frames=max_frames,
                       min_frames=min_frames)

    def resources(self, state: ARState, *, decode_audio: bool) -> ResourceRequest:
        return ResourceRequest(kv_rows=state.prompt_len + state.max_frames, codec_stream=decode_audio)

    def next(self, state: ARState) -> WorkPlan | Done | None:
        """The next plan, Done, or None (waiting for a group leader's prompt)."""
        if state.finish is not None:
            return Done(state.finish)
        if state.paused:
            return None
        total = int(state.rows.shape[0])
        if state.prefilled < total:
            if state.prefix_from is not None:
                return None
            end = min(total, state.prefilled + self.settings.prefill_chunk_rows)
            last = end == state.prompt_len and not state.codes  # a resumed request keeps its decoding state
            plan: Any = PrefillPlan(state.slot, state.prefilled, state.rows[state.prefilled:end], last)
            return WorkPlan(state.request_id, self.kind, PREFILL, plan)
        frame = len(state.codes)
        plan = FramePlan(state.slot, state.prompt_len + frame, frame, frame >= state.min_frames)
        return WorkPlan(state.request_id, self.kind, FRAME, plan)

    def advance(self, state: ARState, result: StepResult) -> None:
        state.fresh = []
        if result.plan.signature.kind is WorkUnitKind.PREFILL:
            state.prefilled += int(result.plan.payload.rows.shape[0])
            return
        row: FrameRow = result.data
        state.logprobs.append(row.logprobs)
        if row.stop:
            state.finish = FinishReason.STOP
            return
        state.codes.append(row.codes)
        state.fresh = [row.codes]
        if len(state.codes) >= state.max_frames:
            state.finish = FinishReason.LENGTH

    def finalize(self, state: ARState) -> LoopResult:
        return LoopResult(state.finish or FinishReason.ABORT,
                          {"codes": list(state.codes), "logprobs": list(state.logprobs)})
