"""The seam between the runtime and a model family: what a family gives the runtime, as small protocols. No torch.

Owns: the parts a family hands the engine thread: `Executor` (the device work of one work kind; `Halves`, one
made of three calls), the driven
loops (`Loop`; `FedLoop`: one that takes what another loop makes; `PagedLoop`: the one whose plans write the
paged KV), `FrontLoop` (work done before admission, e.g. encoding reference recordings), `LoopSpec` /
`LoopGraph` (the loops a card declares and the edges between them, which loop feeds which, which loops hold
a paged KV, and which loop's output is the caller's audio: checked when built), `KVSpec` (a paged KV pool's
geometry), `KVOps`, `PagedKV` (one paged loop's pool, device side, recompute and prefill kind), `Needs`
(what a request holds from admission); what the runtime reads of a family's own values (`Request`,
`Prepared`, `FrontState`) and what a family reads of a stored voice (`StoredVoice`); and the protocols each
consumer of a bound family types against, no more:
- `EngineFamily`: what the engine thread drives (engine.py, lifecycle.py, scatter.py);
- `FrontFamily`: what the caller's side of `Runtime` calls (parse, prepare, encode, weight updates);
- `ServedFamily`: what outer layers (the server, the CLI, rollouts) read through `Runtime`: the audio's format,
  built-in voices, the request fields it takes;
- optional capabilities, each checked with `isinstance`: `TextInput` (text fed while a request runs) and
  `VoiceArrays` (stored voices that carry more than codes); `VoiceEmbedding` (a voice made from a precomputed
  speaker embedding);
- `Family`: all three, what a family package's `Factory` binds (`FactoryBase`: a `Factory` whose `bind` is
  the bound family's class).
The runtime imports this module and never a family; a family implements it.
Must not know: any family, tensors, models, threads (their types are named for the checker only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING, Any, Callable, Generic, Hashable, Iterable, Mapping, NamedTuple, Protocol, Sequence, TypeVar,
    runtime_checkable,
)

from v2.contracts import FinishReason, LoopState, WorkPlan, WorkUnitKind

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    import torch
    from torch import Tensor

    from v2.card import ModelCard
    from v2.runtime.handles import SpeechResult
    from v2.runtime.records import RequestRecord
    from v2.runtime.weight_updates import WeightNames

LaunchState = Callable[[Callable[[], object]], object]  # queues a device state change on the engine's stream

S = TypeVar("S", bound=LoopState, contravariant=True)  # a loop's own state (made by it, passed back untouched)
R = TypeVar("R", contravariant=True)   # a row its executor reads back for one of its plans
I = TypeVar("I", contravariant=True)   # an item the loop feeding it made (its `fresh`)
P = TypeVar("P")                       # an executor's host half's output: its device half's input
H = TypeVar("H", contravariant=True)   # the host copy of its device half's result
C = TypeVar("C", bound="ModelCard", contravariant=True)  # a family's card class


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


class _Last:
    """`LoopGraph.audio`'s default: the graph's last loop."""

    def __repr__(self) -> str:
        return "LAST"


LAST = _Last()


@dataclass(frozen=True)
class LoopSpec:
    """One loop a card declares: `name` keys its plans (`WorkPlan.loop`) and its state in a request's record;
    `feeds` names the loops that take what it emits; `pools` the slot pools its state holds a slot of (given
    back when it ends); `publishes`: its output streams to the request's subscribers as events
    (`v2.runtime.added`: a loop a card or a deployment adds)."""

    name: Hashable
    loop: AnyLoop  # a `PagedLoop` for the graph's `paged` loop, a `FedLoop` for a loop another feeds
    feeds: tuple[Hashable, ...] = ()
    pools: tuple[str, ...] = ()
    publishes: bool = False  # what its `advance` leaves in `fresh` goes to the request's handle as events (added loops)


@dataclass(frozen=True)
class LoopGraph:
    """A family's loops in the topology its card declares. `loops` in topological order (a loop only feeds
    loops after it); `paged`: the loop holding a paged KV, or a tuple of them (any number; the first is the
    one whose prompt is the request's prompt at admission; the others get theirs while the request runs,
    through `Family.more_input`; None or (): no paged KV); `audio`: the loop whose items are the audio
    chunks that stream to the caller (default: the last loop; None: the graph makes no audio: nothing
    streams, a result's audio is empty; it may feed further loops, e.g. an aligner); `front`: the loop run
    before admission (None: none), `front_name` the `loop` its plans carry (a declared node: None takes
    the front loop's `kind`) and `front_pool` its slot pool; `ends`: the loop whose reason is the request's
    (None: the last; a graph with added loops keeps its family's). Loops that no other loop feeds plan before the
    engine reads the last step; the others plan after it, from what was just read; a request ends when
    every loop has ended (with the last one's reason).
    Refused when built (`ValueError` naming the loop): an edge to no loop or to an earlier one, a loop fed
    that takes no input (not a `FedLoop`), a `paged` loop that is not a `PagedLoop` or is named twice, an
    `audio` loop that is no loop of the graph, a front loop named like a driven one."""

    loops: tuple[LoopSpec, ...]
    paged: Hashable | tuple[Hashable, ...] | None = None
    audio: Hashable | None = LAST
    front: AnyFrontLoop | None = None
    front_pool: str | None = None
    front_name: Hashable | None = None
    ends: Hashable | None = None  # the loop whose reason is the request's (None: the last loop)
    specs: dict[Hashable, LoopSpec] = field(init=False, repr=False, compare=False)
    sources: tuple[LoopSpec, ...] = field(init=False, repr=False, compare=False)
    fed: tuple[LoopSpec, ...] = field(init=False, repr=False, compare=False)
    feeding: dict[Hashable, tuple[tuple[Hashable, AnyFedLoop], ...]] = field(
        init=False, repr=False, compare=False)  # loop name -> the loops it feeds (name, loop)
    paged_loop: AnyPagedLoop | None = field(init=False, repr=False, compare=False)  # the first paged loop
    paged_loops: dict[Hashable, AnyPagedLoop] = field(init=False, repr=False, compare=False)  # in `paged`'s order

    def __post_init__(self) -> None:
        if not self.loops:
            raise ValueError("loops: a family declares at least one loop")
        specs = {s.name: s for s in self.loops}
        if len(specs) != len(self.loops):
            raise ValueError("loops: two loops share a name")
        seen: set[Hashable] = set()
        feeding: dict[Hashable, tuple[tuple[Hashable, AnyFedLoop], ...]] = {}
        for s in reversed(self.loops):
            fed: list[tuple[Hashable, AnyFedLoop]] = []
            for d in s.feeds:
                if d not in specs:
                    raise ValueError(f"loops.{s.name}.feeds: no loop named {d!r}")
                if d not in seen:
                    raise ValueError(f"loops.{s.name}.feeds: {d!r} comes before it (loops are in feeding order)")
                target = specs[d].loop
                if not isinstance(target, FedLoop):
                    raise ValueError(f"loops.{s.name}.feeds: {d!r} takes no input (its loop has no `feed`)")
                fed.append((d, target))
            feeding[s.name] = tuple(fed)
            seen.add(s.name)
        names = self.paged if isinstance(self.paged, tuple) else () if self.paged is None else (self.paged,)
        paged_loops: dict[Hashable, AnyPagedLoop] = {}
        for name in names:
            loop = specs[name].loop if name in specs else None
            if not isinstance(loop, PagedLoop):
                raise ValueError(f"paged: {name!r} is no loop of the graph that holds a paged KV (a PagedLoop)")
            if name in paged_loops:
                raise ValueError(f"paged: {name!r} is named twice")
            paged_loops[name] = loop
        if self.audio is LAST:
            object.__setattr__(self, "audio", self.loops[-1].name)
        if self.audio is not None and self.audio not in specs:
            raise ValueError(f"audio: {self.audio!r} is no loop of the graph")
        if self.ends is not None and self.ends not in specs:
            raise ValueError(f"ends: {self.ends!r} is no loop of the graph")
        if self.front is not None and self.front_name is None:
            object.__setattr__(self, "front_name", getattr(self.front, "kind", None))
        if self.front_name is not None and self.front_name in specs:
            raise ValueError(f"front: {self.front_name!r} is the name of a driven loop too")
        targets = {d for s in self.loops for d in s.feeds}
        object.__setattr__(self, "specs", specs)
        object.__setattr__(self, "sources", tuple(s for s in self.loops if s.name not in targets))
        object.__setattr__(self, "fed", tuple(s for s in self.loops if s.name in targets))
        object.__setattr__(self, "feeding", feeding)
        object.__setattr__(self, "paged_loops", paged_loops)
        object.__setattr__(self, "paged_loop", next(iter(paged_loops.values()), None))

    @classmethod
    def declared(cls, edges: Iterable[tuple[Hashable, Iterable[Hashable]]], loops: Mapping[Hashable, AnyLoop],
                 pools: Mapping[Hashable, tuple[str, ...]], *, paged: Hashable | None = None,
                 audio: Hashable | None = LAST, front: AnyFrontLoop | None = None,
                 front_pool: str | None = None, front_name: Hashable | None = None,
                 publishes: Iterable[Hashable] = ()) -> LoopGraph:
        """The graph a card declares: `edges`, each declared loop's name with the names of the loops it feeds,
        in feeding order (`v2.card.LoopTable.driven`, names mapped to the family's); the family's loop and
        the pools it holds, by name; `publishes`: the loops whose output streams to the request's subscribers."""
        shown = set(publishes)  # loops whose output streams to the subscribers as events (`Publishing`)
        return cls(tuple(LoopSpec(name, loops[name], tuple(feeds), pools.get(name, ()), name in shown)
                         for name, feeds in edges),
                   paged=paged, audio=audio, front=front, front_pool=front_pool, front_name=front_name)

    def is_front(self, loop: Hashable) -> bool:
        """Whether plans of loop `loop` are the front loop's (encodes before admission)."""
        return loop == self.front_name if self.front_name is not None else loop not in self.specs

    @property
    def sink(self) -> LoopSpec:
        """The loop whose reason the request ends with: `ends`, else the last loop."""
        return self.specs[self.ends] if self.ends is not None else self.loops[-1]


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


# ----- what the runtime reads of a family's own values ----------------------------------------------------
class Request(Protocol):
    """A family's typed request, as the runtime reads it (the rest is the family's)."""

    @property
    def stream(self) -> bool: ...            # its chunks stream to the handle as they are made
    @property
    def timeout(self) -> float | None: ...   # seconds from submit; then it ends ("abort")
    @property
    def voice(self) -> str | None: ...       # a stored voice's name (the runtime looks it up)


class StoredVoice(Protocol):
    """A stored voice as a family reads it (the voice store's entries, `v2.voices.store.Voice`, are these; the
    seam names no store)."""

    @property
    def name(self) -> str: ...
    @property
    def codes(self) -> NDArray[Any]: ...                      # int64 [N, G]: the recording's codes
    @property
    def text(self) -> str | None: ...                         # its transcript, when known
    @property
    def arrays(self) -> Mapping[str, NDArray[Any]]: ...       # the named float32 arrays (e.g. "x_vector")


class Prepared(Protocol):
    """What a family prepared of a request at submit (`prepare`), as the runtime reads it."""

    @property
    def rows(self) -> Tensor | None: ...    # the first prompt [T, W] (None: not laid out yet, e.g. an open request)
    @property
    def inputs(self) -> tuple[object, ...]: ...  # inputs for the front loop (recordings to encode)


# ----- the bound family, as each consumer sees it ------------------------------------------------------
class EngineFamily(Protocol):
    """What the engine thread drives. The loops through `graph` and the executors through `executors` every
    step; in a request's order: `encoded` once its front work is done (the prompt laid out again), `needs` and
    `start` at admission (then `admitted` for device state: settings, fresh codec state), each paged loop's
    `recompute` (`paged_kv`) after a preemption, `more_input` when a loop waits for input (a long text's next segment, text fed to
    an open request) or, with `loop` None, when an open request waiting for admission got input (its first
    prompt's rows, or None while it has not enough), and `result` at the end. `more_input(record, loop)`
    returns a new prompt for a paged loop (the runtime gives it KV blocks; a fed paged loop's first prompt
    comes this way, once its first input arrived), or None: the family handed the
    loop what it needed itself (through the loop's own calls), or there is nothing yet (the loop stays
    waiting, holding no batch row; the runtime asks again when more input arrives), or the input has ended
    (the loop ends)."""

    @property
    def graph(self) -> LoopGraph: ...
    @property
    def executors(self) -> Mapping[Hashable, AnyExecutor]: ...  # by work kind, in launch order
    @property
    def buckets(self) -> Mapping[Hashable, list[int]]: ...  # batch-size buckets per kind (absent: unpadded)
    @property
    def pools(self) -> Mapping[str, int]: ...             # slot pools: name -> slots
    @property
    def prefill_budget(self) -> int: ...                  # prompt rows prefilled per step, all requests together
    @property
    def max_buffered_chunks(self) -> int: ...             # chunks a subscriber may fall behind
    @property
    def weights(self) -> torch.nn.Module: ...             # what weight updates write
    @property
    def sample_rate(self) -> int: ...                     # an error result's empty audio and codes
    @property
    def channels(self) -> int: ...
    @property
    def code_width(self) -> int: ...

    def bind(self, launch: LaunchState) -> None: ...
    def thread_setup(self) -> None: ...
    def front_start(self, slots: list[int]) -> None: ...
    def encoded(self, record: RequestRecord) -> Tensor | None: ...
    def needs(self, record: RequestRecord) -> Needs: ...
    def start(self, record: RequestRecord, slots: Mapping[str, int],
              share_from: int | None) -> dict[Hashable, LoopState]: ...
    def admitted(self, record: RequestRecord) -> None: ...
    def paged_kv(self) -> Mapping[Hashable, PagedKV]: ...  # each paged loop's KV, by loop name (graph.paged's)
    def more_input(self, record: RequestRecord, loop: Hashable | None) -> Tensor | None: ...
    def result(self, record: RequestRecord, outputs: Mapping[Hashable, object], reason: FinishReason,
               now: float) -> SpeechResult: ...
    def stats(self) -> Mapping[str, object]: ...


class FrontFamily(Protocol):
    """What the caller's side of `Runtime` calls: `parse` (a dict of fields -> the family's typed request;
    a `RequestError` whose `field` names the field), `prepare` (limits, the initial prompt layout),
    `check_group` (requests sharing one prompt), `read_input` / `front_state` (a recording for the front
    loop), and the weights and names an update writes. `graph` tells it whether the card makes audio."""

    @property
    def name(self) -> str: ...
    @property
    def graph(self) -> LoopGraph: ...
    @property
    def device(self) -> torch.device: ...                 # where its experts run (the default stream's device)
    @property
    def max_waiting(self) -> int: ...
    @property
    def max_buffered_chunks(self) -> int: ...
    @property
    def code_width(self) -> int: ...                # codes per frame, and each code's range (a voice's checks)
    @property
    def codebook_size(self) -> int: ...
    @property
    def weights(self) -> torch.nn.Module: ...
    @property
    def weight_names(self) -> WeightNames: ...

    def parse(self, request: object) -> Request: ...
    def prepare(self, request: Request, *, voice: StoredVoice | None = None) -> Prepared: ...
    def check_group(self, group: Sequence[tuple[Request, Prepared]]) -> None: ...
    def read_input(self, source: object) -> object: ...
    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> FrontState: ...


class ServedFamily(Protocol):
    """What outer layers read through `Runtime`: the audio it makes (Hz, channels, frames per second), the
    checkpoint's built-in voices a request names as `speaker` (`()`: none), the request fields `parse`
    takes (what a server may send) and the keys of its nested `sampling` (`()`: the runtime's own)."""

    @property
    def name(self) -> str: ...
    @property
    def sample_rate(self) -> int: ...
    @property
    def channels(self) -> int: ...
    @property
    def frame_rate(self) -> float: ...
    @property
    def speakers(self) -> tuple[str, ...]: ...
    @property
    def request_fields(self) -> frozenset[str]: ...
    @property
    def sampling_keys(self) -> tuple[str, ...]: ...


class Family(EngineFamily, FrontFamily, ServedFamily, Protocol):
    """One model family bound to its card and experts: what its `Factory` binds and the runtime receives at
    construction. Each part of the runtime types against the part it uses."""


@runtime_checkable
class TextInput(Protocol):
    """What a family adds to take a request's text while it runs (`Runtime.open`). `open_text` checks the
    request like `parse` + `prepare` do, without its text (or with the text's first piece as `text`), and
    returns (request, work) with `work.rows` None and `work.inputs` as `prepare` gives them; `feed(request,
    work, text, end=)` is called on the caller's thread with each piece (`end`: the text is complete) and
    returns whether the engine has new input to hand over (`more_input`); it raises `RequestError` naming the
    field for a piece it refuses, and then takes none of it. Callers serialise `feed` per request."""

    def open_text(self, request: object, *, voice: StoredVoice | None = None,
                  split: str = "sentence") -> tuple[Request, Prepared]: ...
    def feed(self, request: Request, work: Prepared, text: str, *, end: bool = False) -> bool: ...


@runtime_checkable
class VoiceArrays(Protocol):
    """What a family adds whose stored voices carry more than codes (e.g. a speaker embedding):
    `voice_arrays` (name -> shape of each float32 array a voice carries; empty: codes alone), `read_voice`
    (the input a stored voice is encoded from, as `read_input`) and `voice_outputs(front_state)` (the arrays
    of a finished front-loop run)."""

    @property
    def voice_arrays(self) -> Mapping[str, tuple[int, ...]]: ...
    def read_voice(self, source: object) -> object: ...
    def voice_outputs(self, state: FrontState) -> Mapping[str, NDArray[np.float32]]: ...


@runtime_checkable
class VoiceEmbedding(Protocol):
    """What a family adds whose voice can be made from a precomputed speaker embedding alone (no recording):
    `voice_from_embedding(value)` -> the arrays such a voice carries (`voice_arrays`' names), the value
    checked (its width, finite: `v2.voices.arrays.check_embedding`), refusing a `FieldError` naming
    `speaker_embedding` where its checkpoint cannot (e.g. one without a speaker encoder). Such a voice has no
    codes ([0, G]) and no transcript: the family speaks it from its arrays alone. A family without this
    takes no embedding (its voices are what a recording encodes to)."""

    def voice_from_embedding(self, embedding: object) -> Mapping[str, NDArray[np.float32]]: ...


class VoiceSpec(NamedTuple):
    """What a voice store on a card checks its voices against: codes per frame, each code's range, and the
    float32 arrays every voice carries, name -> shape (empty: codes alone). A bound family has the same as
    `code_width`, `codebook_size`, `voice_arrays`."""

    width: int
    codebook_size: int
    arrays: Mapping[str, tuple[int, ...]]


class Factory(Protocol[C]):
    """A family package's `FAMILY` (`v2.card.family_of`). `bind` and `experts` build a runtime's family (the
    experts are the family's own: what `experts` returns, `bind` takes); `voice_spec` and `precheck` read
    the card and the checkpoint's config files only (no weights, no device), so a command that needs no
    model loads none and a refusal the config decides comes first."""

    name: str

    def bind(self, *args: Any, **kwargs: Any) -> Family: ...  # (card, *experts, graphs=True, **named)
    def experts(self, card: C, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]: ...
    def voice_spec(self, card: C, checkpoint: str | None = None) -> VoiceSpec: ...
    def precheck(self, card: C, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        """Refuse (a `RequestError` naming the field) what the card and the checkpoint's config decide about
        request `fields`; what they cannot decide is left to `parse` and `prepare`."""


class FactoryBase(Generic[C]):
    """The base of a family package's `FAMILY` (a `Factory`): `bind` is the bound family's class (`bound`)
    called with the card and its experts, so a subclass names the class and gives `name`, `experts`,
    `voice_spec` and `precheck` (the checker holds `bound` to `Family`)."""

    name: str
    bound: Callable[..., Family]

    def bind(self, *args: Any, **kwargs: Any) -> Family:
        return self.bound(*args, **kwargs)
