"""Qwen3-TTS's talker loop: the kit's paged AR sequence (v2/kit/sequence.py) with this family's
terms.

Owns: `TalkerState` (the generic sequence plus the per-frame trailing text ids and an open request's text
growth), `TalkerLoop` (the generic `ARLoop` named "talker" on the talker expert) and `TalkerResult`. A
frame step t is one plan: on the device it chooses group 0 of frame t from the talker state the step
before left (EOS is one id of that vocabulary, masked before `floor`), completes the frame with the code
predictor's G-1 inner steps, and feeds the frame's row (its embedding plus text row t: the plan's `feed`,
`trailing[t]`, else tts_pad) through the talker, which leaves the state for frame t + 1. So the stop is
read in `advance` (group 0 == EOS: no frame), its logprob kept as `stop_logprob` only, and frame t's codes
arrive with it. `max_frames` frames at most (the reference's `max_new_tokens` = max_frames + 1 choices
yield as many frames when it never stops; its last choice's frame is never completed, so it is never
made here). Long text: each later segment brings its prompt and its trailing text (`begin_text_segment`).
Rows are int64 [T, 2 + G]: (text id or -1, codec id or -1 / SPEAKER, G codes or -1) per row (prepare.py).
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from v2.contracts import ShapeSignature, WorkUnitKind
from v2.families.qwen3_tts.card import TalkerSettings
from v2.kit.sequence import ARLoop, ARResult, ARSequence, FramePlan, FrameRow, PrefillPlan

EXPERT = "talker"
TALKER = "talker"  # the loop's name (its plans' `loop`, its state's key in a record)
PREFILL = ShapeSignature(WorkUnitKind.PREFILL, EXPERT)
FRAME = ShapeSignature(WorkUnitKind.AR_FRAME, EXPERT)

__all__ = ["FRAME", "FramePlan", "FrameRow", "PREFILL", "PrefillPlan", "TALKER", "TalkerLoop", "TalkerResult",
           "TalkerState", "recompute_rows"]


@dataclass(frozen=True)
class TalkerResult(ARResult):
    trailing: tuple[int, ...] = ()  # the trailing text ids frames were fed (tts_pad past the end)


@dataclass
class TalkerState(ARSequence):
    trailing: tuple[int, ...] = ()   # text ids fed with frames 0, 1, ...; tts_pad past the end
    pad_text: int = 0
    open_text: bool = False          # an open request: `trailing` grows as its text arrives (`give_text`)
    text_ended: bool = False         # ... and holds all of it (the end-of-text row included)

    @property
    def wants_input(self) -> bool:
        """It waits for input: a segment ended and another follows (the next prompt), or an open request's next
        frame needs a trailing row its text has not given yet (never a pad row in its place, so the frames do
        not depend on when the text arrives)."""
        return self.switching or (self.open_text and not self.text_ended and self.finish is None
                                  and self.launched_frames >= len(self.trailing))

    def text_at(self, frame: int) -> int:
        return self.trailing[frame] if frame < len(self.trailing) else self.pad_text


class TalkerLoop(ARLoop[TalkerState]):
    def __init__(self, settings: TalkerSettings) -> None:
        super().__init__(settings, TALKER, EXPERT)

    def init(self, request_id: int, rows: Any, *, trailing: tuple[int, ...], pad_text: int, max_frames: int,
             floor: int, slot: int, segment_caps: tuple[int, ...] = ()) -> TalkerState:
        """`max_frames`: the first segment's cap; `segment_caps`: the caps of the segments after it."""
        return TalkerState(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), trailing=trailing,
                           pad_text=pad_text, max_frames=max_frames, floor=floor, slot=slot, segment_caps=segment_caps)

    def frame_feed(self, state: TalkerState, frame: int) -> int:
        return state.text_at(frame)

    def give_text(self, state: TalkerState, trailing: tuple[int, ...], *, ended: bool) -> None:
        """An open request's text so far: its trailing ids (a prefix of what comes later) and whether that is all."""
        assert trailing[: len(state.trailing)] == state.trailing, "trailing text only grows"
        state.trailing, state.open_text = trailing, True
        state.text_ended = state.text_ended or ended

    def begin_text_segment(self, state: TalkerState, rows: Any, trailing: tuple[int, ...]) -> None:
        """The next segment's prompt `rows` and its trailing text ids (the generic `begin_segment`, then the text)."""
        self.begin_segment(state, rows)
        state.trailing = trailing

    def finalize(self, state: TalkerState) -> TalkerResult:
        r = super().finalize(state)
        return TalkerResult(r.finish, r.codes, r.logprobs, r.segments, r.stop_logprob, r.prompt_rows,
                            tuple(state.trailing))


def recompute_rows(state: TalkerState) -> torch.Tensor:
    """The rows a resumed request needs in its KV: its prompt, then each frame's row as it was fed (the
    frame's codes with its text id)."""
    prompt = state.rows[: state.prompt_len]
    if not state.codes:
        return prompt
    frames = torch.full((len(state.codes), prompt.shape[1]), -1, dtype=torch.long)  # [F, 2 + G]
    frames[:, 0] = torch.tensor([state.text_at(t) for t in range(len(state.codes))])
    frames[:, 2:] = torch.tensor(state.codes, dtype=torch.long)
    return torch.cat([prompt, frames])
