"""The driven loops on hand-made results: plans, chunking, stop and length, no model."""

from __future__ import annotations

import numpy as np
import torch

from v2.card import load_card
from v2.contracts import FinishReason, WorkPlan, WorkUnitKind
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, FrameRow
from v2.families.moss_tts_local.vocoder import VocoderLoop

CARD = load_card("moss_tts_local_tiny")
AR = CARD.loops.ar_decode.model_copy(update={"prefill_chunk_rows": 4})
VOC = CARD.loops.vocoder.model_copy(update={"first_chunk_frames": 2, "chunk_frames": 5})
FRAME = tuple(range(12))


def frame_result(plan: WorkPlan, stop: bool = False) -> tuple[WorkPlan, FrameRow]:
    return plan, FrameRow(stop, FRAME, tuple([-0.5] * 13))


def run(loop: object, state: object, plan: WorkPlan, data: object = None) -> None:
    """The engine's order: the plan is launched, then its result read back."""
    loop.launched(state, plan)
    loop.advance(state, plan, data)


def test_ar_loop_prefills_in_chunks_then_decodes_frames_until_stop():
    loop = ARDecodeLoop(AR)
    state = loop.init(7, torch.zeros(10, 13, dtype=torch.long), max_frames=5, min_frames=2)
    state.slot = 3
    starts = []
    while (p := loop.next(state)).signature.kind is WorkUnitKind.PREFILL:
        starts.append((p.payload.start, int(p.payload.rows.shape[0]), p.payload.last))
        run(loop, state, p)
    assert starts == [(0, 4, False), (4, 4, False), (8, 2, True)]
    assert (p.payload.slot, p.payload.position, p.payload.step, p.payload.allow_stop) == (3, 10, 0, False)
    run(loop, state, *frame_result(p))
    assert state.fresh == [FRAME]
    p = loop.next(state)
    run(loop, state, *frame_result(p))
    p = loop.next(state)
    assert (p.payload.position, p.payload.step, p.payload.allow_stop) == (12, 2, True)
    run(loop, state, *frame_result(p, stop=True))
    assert state.finish is FinishReason.STOP and state.fresh == [] and loop.next(state) is None
    result = loop.finalize(state)
    assert len(result.codes) == 2 and len(result.logprobs) == 3


def test_ar_loop_ends_at_max_frames():
    loop = ARDecodeLoop(AR)
    state = loop.init(1, torch.zeros(2, 13, dtype=torch.long), max_frames=2, min_frames=0)
    run(loop, state, loop.next(state))
    for _ in range(2):
        run(loop, state, *frame_result(loop.next(state)))
    assert state.finish is FinishReason.LENGTH and loop.next(state) is None
    assert len(state.codes) == 2 and state.launched_frames == 2  # none planned past the cap


def run_vocoder(total: int, end: FinishReason = FinishReason.STOP) -> list[tuple[int, bool]]:
    loop = VocoderLoop(VOC)
    state = loop.init(1, sample_rate=48000)
    made = []
    for i in range(total + 1):
        last = i == total
        loop.feed(state, [] if last else [FRAME], end if last else None)
        while isinstance(p := loop.next(state), WorkPlan):
            n = len(p.payload.codes)
            assert p.signature.bucket >= n
            run(loop, state, p, np.zeros((2, n * 3840), np.float32))
            made.append((n, p.payload.final))
    assert loop.next(state) is None and state.finish is end
    assert [c.seq for c in state.chunks] == list(range(len(made)))
    return made


def test_vocoder_chunks_first_small_then_doubling_to_steady_and_marks_the_last_final():
    assert [VocoderLoop(VOC).chunk_size(i) for i in range(5)] == [2, 4, 5, 5, 5]
    assert run_vocoder(20) == [(2, False), (4, False), (5, False), (5, False), (4, True)]
    assert run_vocoder(16) == [(2, False), (4, False), (5, False), (5, True)]  # cut once a frame beyond it exists
    assert run_vocoder(1, FinishReason.LENGTH) == [(1, True)]
    assert run_vocoder(0) == []
