"""The driven loops and executors a family gives the runtime, as small protocols, and what a paged loop's KV is
made of. No torch.

Owns: `Executor` (the device work of one work kind; `Halves`, one made of three calls) and `Batch` (what it is
handed); the driven loops (`Loop`; `FedLoop`: one that takes what another loop makes; `PagedLoop`: the one
whose plans write the paged KV, with `PagedState`, what the KV reads of its state), `FrontLoop` and
`FrontState` (work done before admission, e.g. encoding reference recordings), `Publishing` (a loop whose
output goes to the request's subscribers), the `Any*` names a graph and an engine hold them by; `KVSpec` (a
paged KV pool's geometry), `KVOps`, `PagedKV` (one paged loop's pool, device side, recompute and prefill
kind) and `Needs` (what a request holds from admission). v2/runtime/family.py re-exports every name.
Must not know: any family, the loop graph (loop_graph.py), the bound family's protocols (family.py), tensors,
models, threads (their types are named for the checker only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable,
)

from v2.contracts import FinishReason, LoopState, WorkPlan, WorkUnitKind

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from torch import Tensor

S = TypeVar("S", bound=LoopState, contravariant=True)  # a loop's own state (made by it, passed back untouched)
R = TypeVar("R", contravariant=True)   # a row its executor reads back for one of its plans
I = TypeVar("I", contravariant=True)   # an item the loop feeding it made (its `fresh`)
P = TypeVar("P")                       # an executor's host half's output: its device half's input
H = TypeVar("H", contravariant=True)   # the host copy of its device half's result


class Batch(Protocol):
    """What an executor is handed (`v2.runtime.scheduler.Batch`)."""

    @property
    def kind(self) -> Hashable: ...
    @property
    def plans(self) -> tuple[WorkPlan, ...]: ...
    @property
    def bucket(self) -> int: ...


class Executor(Protocol[P, H]):
    """The device work of one work kind. The engine calls `pack` on its thread (host only: inputs packed as host
    tensors), `launch` on the device stream (device only: uploads and the call; returns device results the
    stream copies to the host), and `read` on its thread with that host copy (one typed row per plan, in plan
    order). Registered by the family under its kind: adding a kind adds an executor."""

    def pack(self, batch: Batch) -> P: ...
    def launch(self, packed: P) -> object: ...
    def read(self, host: H, batch: Batch) -> Iterable[object]: ...


class Halves:
    """An `Executor` made of three calls: `pack(batch)`, `launch(packed)`, `read(host, batch)` (a family
    registers one under a work kind when its device work is plain functions or bound methods)."""

    def __init__(self, pack: Callable[[Batch], Any], launch: Callable[[Any], object],
                 read: Callable[[Any, Batch], Iterable[object]]) -> None:
        self.pack, self.launch, self.read = pack, launch, read


class Loop(Protocol[S, R]):
    """A stateless driven loop (its per-request state is a `LoopState`). `next` runs no kernel and may return
    None without ending (waiting: for a result, for input, for an upstream loop); the loop has ended exactly
    when `state.finish` is set. `advance` takes one row of a launched plan's result and returns whether it
    was taken (False: a row the loop no longer waits for); what it made is then in `state.fresh`, which the
    engine feeds to the loops this one feeds (or, for the graph's audio loop, streams to the caller)."""

    def next(self, state: S) -> WorkPlan | None: ...
    def launched(self, state: S, plan: WorkPlan) -> None: ...
    def expects(self, state: S, plan: WorkPlan) -> bool: ...
    def advance(self, state: S, plan: WorkPlan, row: R) -> bool: ...
    def finalize(self, state: S) -> object: ...


@runtime_checkable
class FedLoop(Loop[S, R], Protocol[S, R, I]):
    """A loop that works on what another loop makes: `feed` hands it the items (`fresh`) of the loop feeding
    it, and how that loop ended once it has (`upstream`)."""

    def feed(self, state: S, items: Sequence[I], upstream: FinishReason | None) -> None: ...


class PagedState(Protocol):
    """What the paged KV reads of the state of the loop that holds it (written only by that loop)."""

    request_id: int
    slot: int          # its row of the device block tables
    prompt_len: int    # rows of the current prompt
    prefilled: int     # rows in the KV, or launched to it
    computed: int      # rows whose prefill was read back
    epoch: int         # bumped when its KV is taken back
    paused: bool       # waiting for blocks to (re)compute its rows
    prefix_from: int | None  # a group leader whose prompt it will share


@runtime_checkable
class PagedLoop(Loop[S, R], Protocol[S, R]):
    """A loop whose plans write a paged KV (a graph may hold several, each with its own pool: `PagedKV`). The
    engine tells it what its pager did."""

    def kv_span(self, plan: WorkPlan) -> tuple[int, int]: ...  # KV rows [start, end) the plan writes
    def kv_given(self, state: S, cached: int) -> None: ...     # blocks given; `cached` rows came from the cache
    def preempted(self, state: S) -> None: ...                 # its blocks were taken back
    def resumable(self, state: S) -> bool: ...                 # nothing of it still on the device
    def resume(self, state: S, rows: Tensor, cached: int) -> None: ...  # blocks again, to recompute `rows`
    def share(self, state: S, leader: int | None) -> None: ...  # will share (None: not) a leader's prompt
    def shared(self, state: S) -> None: ...                    # took the leader's prompt blocks and state


class FrontState(Protocol):
    """What the encode stage reads of a front loop's state: its inputs, the slots they hold, whether it is done."""

    @property
    def request_id(self) -> int: ...
    @property
    def inputs(self) -> int: ...          # inputs to encode (each takes a slot of the front pool)
    @property
    def slots(self) -> Sequence[int]: ...
    @property
    def finish(self) -> FinishReason | None: ...


class FrontLoop(Protocol[S, R]):
    """Work before admission (a waiting request's references -> codes; also encode-only jobs)."""

    def next(self, state: S) -> WorkPlan | None: ...
    def started(self, state: S, slots: list[int]) -> None: ...  # its state slots, one per input
    def launched(self, state: S, plan: WorkPlan) -> None: ...
    def advance(self, state: S, plan: WorkPlan, rows: R) -> None: ...
    def finalize(self, state: S) -> Sequence[NDArray[np.int64]]: ...  # codes [N, G] per input


@runtime_checkable
class Publishing(Protocol[S]):
    """A family loop whose spec `publishes`: what its last `advance` made for the request's subscribers (their
    `AddedEvent.item`s, e.g. a speaking LLM's `TextDelta`s), in place of its `fresh` (which feeds the loops
    downstream)."""

    def published(self, state: S) -> Sequence[object]: ...


# A graph holds loops of different states and rows, an engine executors of different inputs: each gets back
# only its own values, which these names leave to the family that made them.
AnyLoop = Loop[Any, Any]
AnyFedLoop = FedLoop[Any, Any, Any]
AnyPagedLoop = PagedLoop[Any, Any]
AnyFrontLoop = FrontLoop[Any, Any]
AnyExecutor = Executor[Any, Any]


@dataclass(frozen=True)
class KVSpec:
    """The paged KV pool: blocks of `block_size` rows, at most `max_blocks` per request."""

    num_blocks: int
    block_size: int
    max_blocks: int
    prefix_cache: bool = True


class KVOps(Protocol):
    """The family's device side of the paged KV, queued on the engine's stream: block copies then table entries
    (`apply`), and a group member taking its leader's prompt state (`fork`)."""

    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None: ...
    def fork(self, src: int, dst: int) -> None: ...


@dataclass(frozen=True, eq=False)
class PagedKV:
    """One paged loop's KV, as its family gives it: its pool (`spec`: its own layers, heads and block size
    live in the family's pool; the engine sees blocks), its device side (`ops`), the rows a resumed request
    recomputes from the loop's state (`recompute`: its prompt, then a row per item it made, the fed items
    it consumed included), and the kind of its prefill plans (`prefill`: counted against the step's prefill
    budget; a loop's own kind where two paged loops run different models)."""

    spec: KVSpec
    ops: KVOps
    recompute: Callable[[LoopState], Tensor]
    prefill: Hashable = WorkUnitKind.PREFILL


@dataclass(frozen=True)
class Needs:
    """What one request holds from admission: slots per pool, and KV rows at its longest (in its first paged
    loop; `loop_rows`: in the others, by loop name, where known)."""

    slots: Mapping[str, int]
    kv_rows: int = 0
    loop_rows: Mapping[Hashable, int] = field(default_factory=dict)

