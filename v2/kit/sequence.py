"""The paged AR sequence of one request, and the driven loop that plans it: any family whose backbone
prefills a prompt into the paged KV and then makes one frame per step.

Owns: the plans (`PrefillPlan`, `FramePlan`) and a read row (`FrameRow`); `ARSequence`, the per-request
state (prompt rows, prefill cursor, frames made and every decision's logprobs, limits, its KV slot,
epochs, whether its KV was taken back, long text's segments); `ARLoop`, a stateless `PagedLoop` over it:
`next` (a PREFILL chunk or an AR_FRAME plan, or None; no kernel) / `launched` / `advance` (take one row of
a batched result) / `finalize`, and the paged KV's side (`kv_span`, `kv_given`, `preempted`, `resumable`,
`resume`, `share`, `shared`); `ARResult`, what it made.

Plans run ahead of results: a prefill counts as done once launched (its rows are in the KV for every
later step), and the next frame is planned while the last one's result is still on the device
(`launched_frames` records how far). A result is taken only if it is the one the loop waits for (`step`
equal to the frames taken, same segment, not ended; a prefill of the current epoch): a frame launched past
a stop, past a segment's end or before a preemption's rows were recomputed is dropped, so no frame past a
stop reaches codes or logprobs. The length cap is known ahead, so no frame is planned past it.
After a preemption the runtime hands back rows to recompute (the family's `recompute_rows`: the prompt
and the rows of the frames made); they are prefilled like a prompt, and decoding goes on.
Long text: a request may be several segments, each one prompt and one run of frames (stop or its cap).
When a segment that another follows ends, the state waits (`switching`) until the family lays out the
next prompt (`begin_segment`); the frames made so far stay in the request's history, and each segment's
frames count from 0. A segment that another follows emits at least one frame (its codes carry the voice
into the next prompt). Open segments (`open_segments`): the segments arrive while the request runs, so
every segment may be followed; each ended one waits for the next or for the end (`end_input`).

What a family gives (its adapter): the loop's name and its expert (`ARLoop(settings, name, expert)`), a
per-frame input id (`frame_feed`, e.g. a trailing text id; 0 where none), where a stop decision's
logprobs go (`stop_in_logprobs`: a column of every row, or only `stop_logprob`), a state subclass for
what else it carries, and the rows to recompute.
Must not know: tensors on a device, batching, other requests, any family's row layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Hashable, TypeVar

from v2.contracts import FinishReason, Kind, LoopState, ShapeSignature, WorkPlan, WorkUnitKind


@dataclass(frozen=True)
class PrefillPlan:
    slot: int
    start: int        # position of rows[0] in the slot
    rows: Any         # int64 [n, row width] prompt rows (CPU tensor; the family's layout)
    last: bool        # ends the prompt of a request with no frame yet: its last row's state decodes frame 0
    epoch: int = 0    # the state's epoch when planned: a result from before a preemption or a new segment is dropped


@dataclass(slots=True)
class FramePlan:
    """Made once per row per step: a plain slotted class, never mutated."""

    slot: int
    position: int     # where this step's input row goes in the slot
    step: int         # frame index in its segment: keys the sampling noise
    allow_stop: bool  # False before the floor
    segment: int = 0  # the segment it belongs to
    feed: int = 0     # the family's per-frame input id (`ARLoop.frame_feed`), 0 where none


@dataclass(slots=True)
class FrameRow:
    """One row of an AR_FRAME result."""

    stop: bool                   # the frame step chose to stop (no frame)
    codes: tuple[int, ...]       # the frame's codes (meaningless when stop)
    logprobs: tuple[float, ...]  # every decision of the step (the family's columns)


@dataclass(frozen=True)
class ARResult:
    """What the AR loop made, every segment's together."""

    finish: FinishReason
    codes: list[tuple[int, ...]]                   # every frame's codes
    logprobs: list[tuple[float, ...]]              # per row (with the final stop's row where the family keeps it)
    segments: list[tuple[int, int, FinishReason]]  # per segment: (prompt rows, frames, how it ended)
    stop_logprob: float | None = None              # the stop decision's logprob (finish stop)
    prompt_rows: int = 0                           # the last segment's prompt rows


@dataclass
class ARSequence(LoopState):
    rows: Any = None                 # int64 [T', width]: the prompt, and after a preemption its frames' rows too
    prompt_len: int = 0              # T, prompt rows
    max_frames: int = 0
    floor: int = 0                   # the stop is allowed from this frame on
    slot: int = -1                   # KV slot, set at admission
    prefilled: int = 0               # rows of `rows` in the KV, or launched to it
    computed: int = 0                # rows of `rows` whose prefill has been read back (KV known good)
    epoch: int = 0                   # bumped when its KV is taken back or a segment begins
    launched_frames: int = 0         # frames of this segment launched: taken, or still on the device
    prefix_from: int | None = None   # a group leader whose prefilled prompt is shared instead of prefilling
    paused: bool = False             # its KV was taken back (preempted); it waits to be given rows to recompute
    codes: list[tuple[int, ...]] = field(default_factory=list)       # emitted frames
    logprobs: list[tuple[float, ...]] = field(default_factory=list)  # every taken row's logprobs
    stop_logprob: float | None = None
    fresh: list[tuple[int, ...]] = field(default_factory=list)       # frames emitted by the last advance
    # long text: `rows`, `codes`, `logprobs`, `max_frames` above are the current segment's
    segment_caps: tuple[int, ...] = ()  # frame caps of the segments after the first
    segment: int = 0                    # the current segment's index
    switching: bool = False             # the segment ended and another follows: waits for `begin_segment`
    open_segments: bool = False         # segments arrive while it runs: each may be followed by another
    done_codes: list[tuple[int, ...]] = field(default_factory=list)     # frames of the finished segments
    done_logprobs: list[tuple[float, ...]] = field(default_factory=list)
    ended: list[tuple[int, int, FinishReason]] = field(default_factory=list)  # finished segments

    @property
    def wants_input(self) -> bool:
        """A segment ended and another follows: it waits for the next prompt (`begin_segment`)."""
        return self.switching


S = TypeVar("S", bound=ARSequence)  # a family's sequence state


class ARLoop(Generic[S]):
    """The AR loop of a family: `name` (its plans' `loop`, its state's key in a record), `expert` (what
    its plans' signatures name)."""

    stop_in_logprobs = False  # a stop row's logprobs join `logprobs` (True) or only `stop_logprob`

    def __init__(self, settings: Any, name: Hashable, expert: str, *, prefill: Kind = WorkUnitKind.PREFILL,
                 frame: Kind = WorkUnitKind.AR_FRAME) -> None:
        """`prefill` / `frame`: its plans' kinds (a loop's own where two paged loops run different models)."""
        self.settings, self.kind, self.expert = settings, name, expert  # settings: `prefill_chunk_rows`
        self.prefill_signature = ShapeSignature(prefill, expert)
        self.frame_signature = ShapeSignature(frame, expert)
        self.prefill_kind = prefill

    def frame_feed(self, state: S, frame: int) -> int:
        """The family's per-frame input id for frame `frame` (none: 0)."""
        return 0

    def followed(self, state: S) -> bool:
        """Another segment may follow the current one."""
        return state.open_segments or state.segment < len(state.segment_caps)

    def next(self, state: S) -> WorkPlan | None:
        """The next plan, or None (ended, waiting for a group leader's prompt, for KV blocks, for input, or
        for the result of the frame that reaches the cap)."""
        if state.finish is not None or state.paused or state.switching:
            return None
        total = int(state.rows.shape[0])
        if state.prefilled < total:
            if state.prefix_from is not None:
                return None
            end = min(total, state.prefilled + self.settings.prefill_chunk_rows)
            last = end == state.prompt_len and not state.codes  # a resumed request keeps its decoding state
            chunk = PrefillPlan(state.slot, state.prefilled, state.rows[state.prefilled:end], last, state.epoch)
            return WorkPlan(state.request_id, self.kind, self.prefill_signature, chunk)
        t = state.launched_frames
        if t >= state.max_frames or state.wants_input:
            return None
        floor = max(state.floor, 1) if self.followed(state) else state.floor
        plan = FramePlan(state.slot, state.prompt_len + t, t, t >= floor, state.segment, self.frame_feed(state, t))
        return WorkPlan(state.request_id, self.kind, self.frame_signature, plan)

    def launched(self, state: S, plan: WorkPlan) -> None:
        """The plan went to the device: a prefill's rows count as in the KV, a frame as on its way."""
        if plan.signature.kind is self.prefill_kind:
            state.prefilled = plan.payload.start + int(plan.payload.rows.shape[0])
        else:
            state.launched_frames = plan.payload.step + 1

    def expects(self, state: S, plan: WorkPlan) -> bool:
        """Whether this launched plan's result is one the loop waits for."""
        p = plan.payload
        if plan.signature.kind is self.prefill_kind:
            return bool(p.epoch == state.epoch)
        return state.finish is None and not state.switching and p.segment == state.segment and p.step == len(state.codes)

    def advance(self, state: S, plan: WorkPlan, row: FrameRow | None) -> bool:
        """Take the result of a launched plan (`row`: a frame's, None for a prefill); False when it was
        dropped (`expects` says no)."""
        state.fresh = []
        if not self.expects(state, plan):
            return False
        p = plan.payload
        if plan.signature.kind is self.prefill_kind:
            state.computed = max(state.computed, p.start + int(p.rows.shape[0]))
            return True
        assert row is not None
        end = None
        if row.stop:
            state.stop_logprob = row.logprobs[0]
            if self.stop_in_logprobs:
                state.logprobs.append(row.logprobs)
            end = FinishReason.STOP
        else:
            state.codes.append(row.codes)
            state.logprobs.append(row.logprobs)
            state.fresh = [row.codes]
            if len(state.codes) >= state.max_frames:
                end = FinishReason.LENGTH
        if end is not None:
            if self.followed(state):
                state.switching = True
                state.ended.append((state.prompt_len, len(state.codes), end))
            else:
                state.finish = end
        return True

    def begin_segment(self, state: S, rows: Any, cap: int | None = None) -> None:
        """The next segment's prompt `rows` (`cap`: its frame cap, else the next of `segment_caps`): its
        frames so far join the history; it waits (`paused`) for KV blocks, as a preempted request does, then
        prefills the prompt and decodes its first frame."""
        if not state.switching:
            raise RuntimeError(f"request {state.request_id}: no segment has ended")
        state.done_codes += state.codes
        state.done_logprobs += state.logprobs
        state.codes, state.logprobs, state.fresh, state.stop_logprob = [], [], [], None
        state.max_frames = state.segment_caps[state.segment] if cap is None else cap
        state.segment += 1
        state.rows, state.prompt_len = rows, int(rows.shape[0])
        state.prefilled = state.computed = state.launched_frames = 0
        state.switching, state.paused = False, True
        state.epoch += 1

    def end_input(self, state: S) -> None:
        """Open segments: the input ended with no segment after the one that just ended; it ends as that did."""
        if not state.switching:
            raise RuntimeError(f"request {state.request_id}: no segment has ended")
        _, _, end = state.ended.pop()  # the current segment's entry again (`finalize` adds it)
        state.switching, state.finish = False, end

    def finalize(self, state: S) -> ARResult:
        """codes and logprobs of every segment; `segments`: per segment (prompt rows, frames, finish), the
        current one's included (ABORT when it did not end)."""
        current = [] if state.switching else [(state.prompt_len, len(state.codes), state.finish or FinishReason.ABORT)]
        return ARResult(state.finish or FinishReason.ABORT, state.done_codes + state.codes,
                        state.done_logprobs + state.logprobs, state.ended + current, state.stop_logprob,
                        state.prompt_len)

    # ----- the paged KV's side (the engine tells the loop what its pager did) -----------------------
    def kv_span(self, plan: WorkPlan) -> tuple[int, int]:
        """The KV rows [start, end) a plan writes: a prefill chunk's rows, or a frame's one row."""
        p = plan.payload
        if plan.signature.kind is self.prefill_kind:
            return p.start, p.start + int(p.rows.shape[0])
        return p.position, p.position + 1

    def kv_given(self, state: S, cached: int) -> None:
        """Blocks for its prompt: the first `cached` rows came from the prefix cache (they count as prefilled)."""
        state.prefilled = state.computed = cached

    def preempted(self, state: S) -> None:
        """Its KV was taken back: it waits for blocks, then recomputes its rows. A frame still on the device
        is taken when it arrives (its rows are recomputed with the rest); a prefill is not."""
        state.paused, state.prefilled, state.computed = True, 0, 0
        state.epoch += 1
        state.launched_frames = len(state.codes) + (state.launched_frames > len(state.codes))

    def resumable(self, state: S) -> bool:
        """No frame of it is still on the device (its recomputed rows would lack it)."""
        return state.launched_frames <= len(state.codes)

    def resume(self, state: S, rows: Any, cached: int) -> None:
        """Blocks again after a preemption (or for a new segment): `rows` to (re)compute, `cached` of them cached."""
        state.rows, state.paused = rows, False
        state.prefilled = state.computed = cached

    def share(self, state: S, leader: int | None) -> None:
        """It will take group leader `leader`'s prompt instead of prefilling (None: the leader is gone; it
        waits for blocks of its own, as a preempted request does)."""
        if leader is None:
            state.paused = True
        state.prefix_from = leader

    def shared(self, state: S) -> None:
        """It took the leader's prompt blocks and backbone state: its prompt is prefilled."""
        state.prefilled, state.prefix_from = state.prompt_len, None
