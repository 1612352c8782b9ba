"""The thinker loop's text deltas (a character split over tokens waits for its last byte) and the talker loop's
feed (one text row per frame: the next token, then tts_eos, then tts_pad; it never plans past its text)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from v2.contracts import FinishReason, WorkPlan
from v2.families.qwen3_omni.loops import TalkerLoop, TalkerState, ThinkerLoop, ThinkerState
from v2.kit.sequence import FrameRow

SETTINGS = SimpleNamespace(prefill_chunk_rows=64)


def _token(loop: ThinkerLoop, state: ThinkerState, token: int) -> None:
    plan = loop.next(state)
    assert isinstance(plan, WorkPlan)
    loop.launched(state, plan)
    assert loop.advance(state, plan, FrameRow(False, (token,), (0.0,)))


def test_text_deltas_wait_for_whole_characters() -> None:
    loop = ThinkerLoop(SETTINGS, lambda ids: bytes(ids).decode("utf-8", "replace"))
    state = ThinkerState(1, rows=torch.zeros(2, 3, dtype=torch.long), prompt_len=2, prefilled=2, max_frames=8)
    texts = []
    for b in "aé!".encode():
        _token(loop, state, b)
        texts.append([d.text for d in loop.published(state)])
    assert texts == [["a"], [""], ["é"], ["!"]]
    assert [d.ids for d in loop.published(state)] == [(ord("!"),)]


def test_talker_feed_and_wait() -> None:
    loop = TalkerLoop(SETTINGS)
    state = TalkerState(1, max_frames=8, eos_text=-2, pad_text=-3)
    loop.feed(state, [(10,), (11,)], None)
    state.rows, state.prompt_len, state.prefilled = torch.zeros(4, 19, dtype=torch.long), 4, 4
    plan = loop.next(state)
    assert plan is not None and plan.payload.feed == 11  # frame 0 speaks token 1
    loop.launched(state, plan)
    assert loop.next(state) is None  # frame 1 needs token 2 or the thinker's end
    loop.feed(state, [], FinishReason.STOP)
    assert [loop.frame_feed(state, t) for t in range(4)] == [11, -2, -3, -3]
    assert loop.next(state) is not None
