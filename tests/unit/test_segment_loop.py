"""The AR loop over a long text's segments, on hand-made results: a segment ends (stop or its cap), the loop
waits for the next prompt, prefills it and decodes from frame 0 of the new segment; the history and the
segment boundaries come out of `finalize`."""

from __future__ import annotations

import pytest
import torch

from v2.card import load_card
from v2.contracts import FinishReason, WorkPlan, WorkUnitKind
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, FrameRow

AR = load_card("moss_tts_local_tiny").loops.ar_decode.model_copy(update={"prefill_chunk_rows": 8})


def frame(plan: WorkPlan, code: int, stop: bool = False) -> tuple[WorkPlan, FrameRow]:
    return plan, FrameRow(stop, (code,) * 12, (-0.25,) * 13)


def run(loop: ARDecodeLoop, state: object, plan: WorkPlan, row: FrameRow | None = None) -> bool:
    """The engine's order: the plan is launched, then its result read back."""
    loop.launched(state, plan)
    return loop.advance(state, plan, row)


def prefill(loop: ARDecodeLoop, state: object) -> WorkPlan:
    while (p := loop.next(state)).signature.kind is WorkUnitKind.PREFILL:
        run(loop, state, p)
    return p


def test_segments_switch_keep_history_and_report_boundaries():
    loop = ARDecodeLoop(AR)
    state = loop.init(1, torch.zeros(6, 13, dtype=torch.long), max_frames=3, min_frames=0, segment_caps=(4, 5))
    state.slot = 2
    p = prefill(loop, state)
    assert p.payload.allow_stop is False  # a segment another follows emits at least one frame
    for code in range(3):  # segment 0 reaches its cap of 3
        run(loop, state, *frame(p, code))
        p = loop.next(state) if not state.switching else p
    assert state.switching and state.finish is None and loop.next(state) is None
    with pytest.raises(RuntimeError):
        loop.begin_segment(loop.init(2, torch.zeros(2, 13, dtype=torch.long), max_frames=1, min_frames=0), torch.zeros(1, 13))
    loop.begin_segment(state, torch.ones(10, 13, dtype=torch.long))
    assert state.paused and loop.next(state) is None  # waits for KV blocks, as a preempted request
    state.paused = False
    p = prefill(loop, state)
    assert (p.payload.position, p.payload.step, p.payload.allow_stop) == (10, 0, False)
    run(loop, state, *frame(p, 7))
    p = loop.next(state)
    assert p.payload.allow_stop is True
    run(loop, state, *frame(p, 0, stop=True))  # segment 1 stops after one frame
    loop.begin_segment(state, torch.ones(4, 13, dtype=torch.long))
    state.paused = False
    p = prefill(loop, state)
    assert p.payload.allow_stop is True and state.max_frames == 5  # the last segment: min_frames as given
    run(loop, state, *frame(p, 9))
    run(loop, state, *frame(loop.next(state), 9, stop=True))
    assert state.finish is FinishReason.STOP
    out = loop.finalize(state)
    assert [c[0] for c in out.codes] == [0, 1, 2, 7, 9]
    assert len(out.logprobs) == 7  # every decision, each segment's stop included
    assert out.segments == [(6, 3, FinishReason.LENGTH), (10, 1, FinishReason.STOP), (4, 1, FinishReason.STOP)]


def test_a_request_cut_short_while_switching_reports_only_ended_segments():
    loop = ARDecodeLoop(AR)
    state = loop.init(1, torch.zeros(3, 13, dtype=torch.long), max_frames=1, min_frames=0, segment_caps=(2,))
    state.slot = 0
    run(loop, state, *frame(prefill(loop, state), 4))
    assert state.switching
    out = loop.finalize(state)
    assert out.finish is FinishReason.ABORT and out.segments == [(3, 1, FinishReason.LENGTH)]
    assert [c[0] for c in out.codes] == [4]
