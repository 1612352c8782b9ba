"""The talker loop of one request: prefill its prompt in chunks, then one frame step per engine step until stop.

Owns: `TalkerState` (prompt rows, the per-frame trailing text ids, prefill cursor, frames made and every
choice's logprobs, limits, its KV slot, whether its KV was taken back) and `TalkerLoop`, a stateless driven
loop that also implements the paged KV's side (`PagedLoop`). A frame step t is one plan: on the device it
chooses group 0 of frame t from the talker state the step before left (EOS is one id of that vocabulary,
masked before `floor`), completes the frame with the code predictor's G-1 inner steps, and feeds the frame's
row (its embedding plus text row t: `trailing[t]`, else tts_pad) through the talker, which leaves the state
for frame t + 1. So the stop is read in `advance` (group 0 == EOS: no frame), and frame t's codes arrive with
it. Plans run ahead of results as MOSS's do: a prefill counts as done once launched, the next frame is
planned while the last is on the device, and a result is taken only if it is the one the loop waits for.
`max_frames` frames at most (the reference's `max_new_tokens` = max_frames + 1 choices yield as many frames
when it never stops; its last choice's frame is never completed, so it is never made here).
Long text: a request may be several segments, each one prompt and one run of frames (stop or its cap), as
MOSS's AR loop: when a segment that another follows ends, the state waits (`switching`, `wants_input`) until
the family lays out the next prompt and its trailing text (`begin_segment`); the frames made so far stay in
the request's history, and each segment's frames count from 0 (they key its noise, with its own seed).
Rows are int64 [T, 2 + G]: (text id or -1, codec id or -1 / SPEAKER, G codes or -1) per row (prepare.py).
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from v2.contracts import FinishReason, LoopState, ShapeSignature, WorkPlan, WorkUnitKind
from v2.families.qwen3_tts.card import TalkerSettings

EXPERT = "talker"
TALKER = "talker"  # the loop's name (its plans' `loop`, its state's key in a record)
PREFILL = ShapeSignature(WorkUnitKind.PREFILL, EXPERT)
FRAME = ShapeSignature(WorkUnitKind.AR_FRAME, EXPERT)


@dataclass(frozen=True)
class PrefillPlan:
    slot: int
    start: int        # position of rows[0] in the slot
    rows: Any         # int64 [n, 2 + G] prompt rows (CPU tensor)
    last: bool        # ends the prompt of a request with no frame yet: its last row's state decodes frame 0
    epoch: int = 0


@dataclass(slots=True)
class FramePlan:
    slot: int
    position: int     # where frame `step`'s row goes in the talker KV
    step: int         # frame index: keys the noise of all G choices
    allow_stop: bool  # EOS may be chosen (step >= the floor)
    text: int         # the text id fed with the frame's row (trailing text, else tts_pad)
    segment: int = 0  # the segment it belongs to


@dataclass(slots=True)
class FrameRow:
    """One row of a frame step's result."""

    stop: bool                   # group 0 chose EOS (no frame)
    codes: tuple[int, ...]       # G codes (meaningless when stop)
    logprobs: tuple[float, ...]  # G: group 0's choice (its distribution includes EOS), then groups 1..G-1


@dataclass(frozen=True)
class TalkerResult:
    finish: FinishReason
    codes: list[tuple[int, ...]]        # every segment's frames
    logprobs: list[tuple[float, ...]]   # per frame, G each
    stop_logprob: float | None          # the EOS choice's logprob (finish stop)
    prompt_rows: int
    segments: list[tuple[int, int, FinishReason]] = field(default_factory=list)  # per segment: (prompt rows,
                                                                                 # frames, how it ended)
    trailing: tuple[int, ...] = ()      # the trailing text ids frames were fed (tts_pad past the end)


@dataclass
class TalkerState(LoopState):
    rows: Any = None                 # int64 [T', 2 + G]: the prompt, and after a preemption its frames' rows
    prompt_len: int = 0
    trailing: tuple[int, ...] = ()   # text ids fed with frames 0, 1, ...; tts_pad past the end
    pad_text: int = 0
    max_frames: int = 0
    floor: int = 0                   # EOS allowed from this frame on
    slot: int = -1
    prefilled: int = 0
    computed: int = 0
    epoch: int = 0
    launched_frames: int = 0
    prefix_from: int | None = None
    paused: bool = False
    codes: list[tuple[int, ...]] = field(default_factory=list)
    logprobs: list[tuple[float, ...]] = field(default_factory=list)
    stop_logprob: float | None = None
    fresh: list[tuple[int, ...]] = field(default_factory=list)
    # long text: `rows`, `trailing`, `codes`, `logprobs`, `max_frames` above are the current segment's
    segment_caps: tuple[int, ...] = ()  # frame caps of the segments after the first
    segment: int = 0
    switching: bool = False             # the segment ended and another follows: waits for `begin_segment`
    done_codes: list[tuple[int, ...]] = field(default_factory=list)
    done_logprobs: list[tuple[float, ...]] = field(default_factory=list)
    ended: list[tuple[int, int, FinishReason]] = field(default_factory=list)
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


class TalkerLoop:
    kind = TALKER

    def __init__(self, settings: TalkerSettings) -> None:
        self.settings = settings

    def init(self, request_id: int, rows: Any, *, trailing: tuple[int, ...], pad_text: int, max_frames: int,
             floor: int, slot: int, segment_caps: tuple[int, ...] = ()) -> TalkerState:
        """`max_frames`: the first segment's cap; `segment_caps`: the caps of the segments after it."""
        return TalkerState(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), trailing=trailing,
                           pad_text=pad_text, max_frames=max_frames, floor=floor, slot=slot, segment_caps=segment_caps)

    def next(self, state: TalkerState) -> WorkPlan | None:
        if state.finish is not None or state.paused or state.switching:
            return None
        total = int(state.rows.shape[0])
        if state.prefilled < total:
            if state.prefix_from is not None:
                return None
            end = min(total, state.prefilled + self.settings.prefill_chunk_rows)
            last = end == state.prompt_len and not state.codes
            plan: Any = PrefillPlan(state.slot, state.prefilled, state.rows[state.prefilled:end], last, state.epoch)
            return WorkPlan(state.request_id, self.kind, PREFILL, plan)  # type: ignore[arg-type]
        t = state.launched_frames
        if t >= state.max_frames or state.wants_input:
            return None
        plan = FramePlan(state.slot, state.prompt_len + t, t, t >= state.floor, state.text_at(t), state.segment)
        return WorkPlan(state.request_id, self.kind, FRAME, plan)  # type: ignore[arg-type]

    def give_text(self, state: TalkerState, trailing: tuple[int, ...], *, ended: bool) -> None:
        """An open request's text so far: its trailing ids (a prefix of what comes later) and whether that is all."""
        assert trailing[: len(state.trailing)] == state.trailing, "trailing text only grows"
        state.trailing, state.open_text = trailing, True
        state.text_ended = state.text_ended or ended

    def launched(self, state: TalkerState, plan: WorkPlan) -> None:
        if plan.signature.kind is WorkUnitKind.PREFILL:
            state.prefilled = plan.payload.start + int(plan.payload.rows.shape[0])
        else:
            state.launched_frames = plan.payload.step + 1

    def expects(self, state: TalkerState, plan: WorkPlan) -> bool:
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            return bool(p.epoch == state.epoch)
        return (state.finish is None and not state.switching and p.segment == state.segment
                and p.step == len(state.codes))

    def advance(self, state: TalkerState, plan: WorkPlan, row: FrameRow | None) -> bool:
        state.fresh = []
        if not self.expects(state, plan):
            return False
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            state.computed = max(state.computed, p.start + int(p.rows.shape[0]))
            return True
        assert row is not None
        end = None
        if row.stop:
            state.stop_logprob = row.logprobs[0]
            end = FinishReason.STOP
        else:
            state.codes.append(row.codes)
            state.logprobs.append(row.logprobs)
            state.fresh = [row.codes]
            if len(state.codes) >= state.max_frames:
                end = FinishReason.LENGTH
        if end is not None:
            if state.segment < len(state.segment_caps):
                state.switching = True
                state.ended.append((state.prompt_len, len(state.codes), end))
            else:
                state.finish = end
        return True

    def begin_segment(self, state: TalkerState, rows: Any, trailing: tuple[int, ...]) -> None:
        """The next segment's prompt `rows` and trailing text ids: the frames so far join the history; it waits
        (`paused`) for KV blocks, as a preempted request does, then prefills the prompt and decodes frame 0."""
        if not state.switching:
            raise RuntimeError(f"request {state.request_id}: no segment has ended")
        state.done_codes += state.codes
        state.done_logprobs += state.logprobs
        state.codes, state.logprobs, state.fresh, state.stop_logprob = [], [], [], None
        state.max_frames = state.segment_caps[state.segment]
        state.segment += 1
        state.rows, state.prompt_len, state.trailing = rows, int(rows.shape[0]), trailing
        state.prefilled = state.computed = state.launched_frames = 0
        state.switching, state.paused = False, True
        state.epoch += 1

    def finalize(self, state: TalkerState) -> TalkerResult:
        current = [] if state.switching else [(state.prompt_len, len(state.codes), state.finish or FinishReason.ABORT)]
        return TalkerResult(state.finish or FinishReason.ABORT, state.done_codes + state.codes,
                            state.done_logprobs + state.logprobs, state.stop_logprob, state.prompt_len,
                            state.ended + current, tuple(state.trailing))

    # ----- the paged KV's side -----------------------------------------------------------------
    def kv_span(self, plan: WorkPlan) -> tuple[int, int]:
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            return p.start, p.start + int(p.rows.shape[0])
        return p.position, p.position + 1

    def kv_given(self, state: TalkerState, cached: int) -> None:
        state.prefilled = state.computed = cached

    def preempted(self, state: TalkerState) -> None:
        state.paused, state.prefilled, state.computed = True, 0, 0
        state.epoch += 1
        state.launched_frames = len(state.codes) + (state.launched_frames > len(state.codes))

    def resumable(self, state: TalkerState) -> bool:
        return state.launched_frames <= len(state.codes)

    def resume(self, state: TalkerState, rows: Any, cached: int) -> None:
        state.rows, state.paused = rows, False
        state.prefilled = state.computed = cached

    def share(self, state: TalkerState, leader: int | None) -> None:
        if leader is None:
            state.paused = True
        state.prefix_from = leader

    def shared(self, state: TalkerState) -> None:
        state.prefilled, state.prefix_from = state.prompt_len, None


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
