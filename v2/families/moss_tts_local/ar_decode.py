"""The AR decode loop of one request: prefill its prompt in chunks, then one frame per step until stop.

Owns: `ARState` (prompt, prefill cursor, emitted frames and every decision's logprobs, limits, its KV
slot, whether its KV was taken back) and `ARDecodeLoop`, a stateless driven loop: `init` / `next` (a
PREFILL or AR_FRAME plan, or None; no kernel) / `launched` (the plan went to the device) / `advance` (take
one row of a batched result) / `finalize`. The loop has ended when `state.finish` is set.
Plans run ahead of results: a prefill counts as done once launched (its rows are in the KV for every later
step), and the next frame is planned while the last one's result is still on the device (`launched`
records how far). A frame's result is taken only if it is the one the loop waits for (`step` equal to the
frames taken, same segment, not ended): a frame launched past a stop, past a segment's end or before a
preemption's rows were recomputed is dropped, so no frame past a stop reaches codes or logprobs. The
length cap is known ahead, so no frame is planned past it.
After a preemption the runtime hands back rows to recompute (the prompt and the rows of the frames already
made); they are prefilled like a prompt, and decoding goes on from the next frame.
Long text: a request may be several segments, each one prompt and one run of frames (stop or its cap).
When a segment that another follows ends, the state waits (`switching`) until the runtime lays out the
next prompt (`begin_segment`); the frames made so far stay in the request's history. A segment that
another follows emits at least one frame, since its codes carry the voice into the next prompt.
Open text (`open_text`): the segments arrive while the request runs, so whether another follows is not
known: every segment emits at least one frame, each ended segment waits (`switching`) for the next one or
for the end of the text (`end_input`: the loop ends as that segment did), and each segment's cap comes
with its prompt.
Must not know: tensors on a device, batching, other requests, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from v2.contracts import FinishReason, LoopKind, LoopState, ResourceRequest, ShapeSignature, WorkPlan, WorkUnitKind
from v2.families.moss_tts_local.card import ARDecodeSettings

EXPERT = "backbone"
PREFILL = ShapeSignature(WorkUnitKind.PREFILL, EXPERT)
FRAME = ShapeSignature(WorkUnitKind.AR_FRAME, EXPERT)


@dataclass(frozen=True)
class PrefillPlan:
    slot: int
    start: int        # position of rows[0] in the slot
    rows: Any         # int64 [n, 13] prompt rows (CPU tensor)
    last: bool        # the chunk ends the prompt of a request with no frame yet: its last row's state decodes frame 0
    epoch: int = 0    # the state's epoch when planned: a result from before a preemption or a new segment is dropped


@dataclass(slots=True)
class FramePlan:
    """Made once per row per step: a plain slotted class, never mutated."""

    slot: int
    position: int     # where this step's backbone input (the new frame's row) goes in the slot
    step: int         # frame index in its segment: keys the sampling noise
    allow_stop: bool  # False before min_frames
    segment: int = 0  # the segment it belongs to


@dataclass(slots=True)
class FrameRow:
    """One row of an AR_FRAME result."""

    stop: bool
    codes: tuple[int, ...]      # 12 codes (meaningless when stop)
    logprobs: tuple[float, ...]  # 13: the stop decision, then each codebook


@dataclass(frozen=True)
class ARResult:
    """What the AR loop made, every segment's together."""

    finish: FinishReason
    codes: list[tuple[int, ...]]              # every frame's codes
    logprobs: list[tuple[float, ...]]         # every decision's logprobs, the final stop included
    segments: list[tuple[int, int, FinishReason]]  # per segment: (prompt rows, frames, how it ended)


@dataclass
class ARState(LoopState):
    rows: Any = None                 # int64 [T', 13] rows to prefill (CPU tensor): the prompt, and after a
                                     # preemption also the rows of the frames made so far
    prompt_len: int = 0              # T, prompt rows
    max_frames: int = 0
    min_frames: int = 0
    slot: int = -1                   # KV slot, set at admission
    prefilled: int = 0               # rows of `rows` in the KV, or launched to it
    computed: int = 0                # rows of `rows` whose prefill has been read back (KV known good)
    epoch: int = 0                   # bumped when its KV is taken back or a segment begins
    launched_frames: int = 0         # frames of this segment launched: taken, or still on the device
    prefix_from: int | None = None   # a group leader whose prefilled prompt is shared instead of prefilling
    paused: bool = False             # its KV was taken back (preempted); it waits to be given rows to recompute
    codes: list[tuple[int, ...]] = field(default_factory=list)     # emitted frames
    logprobs: list[tuple[float, ...]] = field(default_factory=list)  # every decision, the final stop included
    fresh: list[tuple[int, ...]] = field(default_factory=list)     # frames emitted by the last advance
    # long text: `codes` / `logprobs` / `max_frames` / `rows` above are the current segment's
    segment_caps: tuple[int, ...] = ()  # frame caps of the segments after the first
    segment: int = 0                    # the current segment's index
    switching: bool = False             # the segment ended and another follows: waits for `begin_segment`
    open_text: bool = False             # segments arrive while it runs: each may be followed by another
    done_codes: list[tuple[int, ...]] = field(default_factory=list)     # frames of the finished segments
    done_logprobs: list[tuple[float, ...]] = field(default_factory=list)
    ended: list[tuple[int, int, FinishReason]] = field(default_factory=list)  # finished segments: (prompt rows,
                                                                              # frames, how it ended)

    @property
    def wants_input(self) -> bool:
        """A segment ended and another follows: it waits for the next prompt (`begin_segment`)."""
        return self.switching


class ARDecodeLoop:
    kind = LoopKind.AR_DECODE

    def __init__(self, settings: ARDecodeSettings) -> None:
        self.settings = settings

    def init(self, request_id: int, rows: Any, *, max_frames: int, min_frames: int,
             segment_caps: tuple[int, ...] = (), slot: int = -1, open_text: bool = False) -> ARState:
        """`max_frames`: the first segment's cap; `segment_caps`: the caps of the segments that follow;
        `slot`: its KV slot (given at admission); `open_text`: its segments arrive while it runs."""
        return ARState(request_id=request_id, rows=rows, prompt_len=int(rows.shape[0]), max_frames=max_frames,
                       min_frames=min_frames, segment_caps=segment_caps, slot=slot, open_text=open_text)

    def _followed(self, state: ARState) -> bool:
        """Another segment may follow the current one."""
        return state.open_text or state.segment < len(state.segment_caps)

    def resources(self, state: ARState, *, decode_audio: bool) -> ResourceRequest:
        return ResourceRequest(kv_rows=state.prompt_len + state.max_frames, codec_stream=decode_audio)

    def next(self, state: ARState) -> WorkPlan | None:
        """The next plan, or None (ended, waiting for a group leader's prompt, for KV blocks, for the next
        segment's prompt, or for the result of the frame that reaches the cap)."""
        if state.finish is not None or state.paused or state.switching:
            return None
        total = int(state.rows.shape[0])
        if state.prefilled < total:
            if state.prefix_from is not None:
                return None
            end = min(total, state.prefilled + self.settings.prefill_chunk_rows)
            last = end == state.prompt_len and not state.codes  # a resumed request keeps its decoding state
            plan: Any = PrefillPlan(state.slot, state.prefilled, state.rows[state.prefilled:end], last, state.epoch)
            return WorkPlan(state.request_id, self.kind, PREFILL, plan)
        frame = state.launched_frames
        if frame >= state.max_frames:
            return None
        floor = max(state.min_frames, 1) if self._followed(state) else state.min_frames
        plan = FramePlan(state.slot, state.prompt_len + frame, frame, frame >= floor, state.segment)
        return WorkPlan(state.request_id, self.kind, FRAME, plan)

    def launched(self, state: ARState, plan: WorkPlan) -> None:
        """The plan went to the device: a prefill's rows count as in the KV, a frame as on its way."""
        if plan.signature.kind is WorkUnitKind.PREFILL:
            state.prefilled = plan.payload.start + int(plan.payload.rows.shape[0])
        else:
            state.launched_frames = plan.payload.step + 1

    def expects(self, state: ARState, plan: WorkPlan) -> bool:
        """Whether the result of this launched plan is one the loop waits for: not a frame past the end or of
        an ended segment, not work from before a preemption or a new segment."""
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            return p.epoch == state.epoch
        return state.finish is None and not state.switching and p.segment == state.segment and p.step == len(state.codes)

    def advance(self, state: ARState, plan: WorkPlan, row: FrameRow | None) -> bool:
        """Take the result of a launched plan (`row`: a frame's, None for a prefill); False when it was
        dropped (`expects` says no)."""
        state.fresh = []
        if not self.expects(state, plan):
            return False
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            state.computed = max(state.computed, p.start + int(p.rows.shape[0]))
            return True
        assert row is not None
        state.logprobs.append(row.logprobs)
        end = None
        if row.stop:
            end = FinishReason.STOP
        else:
            state.codes.append(row.codes)
            state.fresh = [row.codes]
            if len(state.codes) >= state.max_frames:
                end = FinishReason.LENGTH
        if end is not None:
            if self._followed(state):
                state.switching = True
                state.ended.append((state.prompt_len, len(state.codes), end))
            else:
                state.finish = end
        return True

    def preempted(self, state: ARState) -> None:
        """Its KV was taken back: it waits for blocks, then recomputes its rows. A frame still on the device
        is taken when it arrives (its rows are recomputed with the rest); a prefill is not."""
        state.paused, state.prefilled, state.computed = True, 0, 0
        state.epoch += 1
        state.launched_frames = len(state.codes) + (state.launched_frames > len(state.codes))

    def begin_segment(self, state: ARState, rows: Any, cap: int | None = None) -> None:
        """The next segment's prompt `rows` (`cap`: its frame cap, for open text): its frames so far join the
        history; it waits (`paused`) for KV blocks, as a preempted request does, then prefills the prompt and
        decodes its first frame."""
        if not state.switching:
            raise RuntimeError(f"request {state.request_id}: no segment has ended")
        state.done_codes += state.codes
        state.done_logprobs += state.logprobs
        state.codes, state.logprobs, state.fresh = [], [], []
        state.max_frames = state.segment_caps[state.segment] if cap is None else cap
        state.segment += 1
        state.rows, state.prompt_len, state.prefilled, state.computed = rows, int(rows.shape[0]), 0, 0
        state.switching, state.paused = False, True
        state.epoch += 1
        state.launched_frames = 0

    def end_input(self, state: ARState) -> None:
        """Open text: the text ended with no segment after the one that just ended; the loop ends as it did."""
        if not state.switching:
            raise RuntimeError(f"request {state.request_id}: no segment has ended")
        _, _, end = state.ended.pop()  # the current segment's entry again (`finalize` adds it)
        state.switching, state.finish = False, end

    # ----- the paged KV's side (the engine tells the loop what its pager did) -----------------------
    def kv_span(self, plan: WorkPlan) -> tuple[int, int]:
        """The KV rows [start, end) a plan writes: a prefill chunk's rows, or a frame's one row."""
        p = plan.payload
        if plan.signature.kind is WorkUnitKind.PREFILL:
            return p.start, p.start + int(p.rows.shape[0])
        return p.position, p.position + 1

    def kv_given(self, state: ARState, cached: int) -> None:
        """Blocks for its prompt: the first `cached` rows came from the prefix cache (they count as prefilled)."""
        state.prefilled = state.computed = cached

    def resumable(self, state: ARState) -> bool:
        """No frame of it is still on the device (its recomputed rows would lack it)."""
        return state.launched_frames <= len(state.codes)

    def resume(self, state: ARState, rows: Any, cached: int) -> None:
        """Blocks again after a preemption (or for a new segment): `rows` to (re)compute, `cached` of them cached."""
        state.rows, state.paused = rows, False
        state.prefilled = state.computed = cached

    def share(self, state: ARState, leader: int | None) -> None:
        """It will take group leader `leader`'s prompt instead of prefilling (None: the leader is gone; it
        waits for blocks of its own, as a preempted request does)."""
        if leader is None:
            state.paused = True
        state.prefix_from = leader

    def shared(self, state: ARState) -> None:
        """It took the leader's prompt blocks and backbone state: its prompt is prefilled."""
        state.prefilled, state.prefix_from = state.prompt_len, None

    def finalize(self, state: ARState) -> ARResult:
        """codes and logprobs of every segment; `segments`: per segment (prompt rows, frames, finish), the
        current one's included (ABORT when it did not end)."""
        current = [] if state.switching else [(state.prompt_len, len(state.codes), state.finish or FinishReason.ABORT)]
        return ARResult(state.finish or FinishReason.ABORT, state.done_codes + state.codes,
                        state.done_logprobs + state.logprobs, state.ended + current)
