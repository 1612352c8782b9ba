"""The seam between the runtime and a model family: what a family gives the engine, as protocols. No torch.

Owns: `Executor` (the device work of one work kind: host half, device half, read), `Loop` and `PagedLoop`
(what the engine calls on a family's driven loops), `FrontLoop` (work done before admission, e.g. encoding
reference recordings), `LoopSpec` / `LoopGraph` (the loops a card declares and the edges between them: which
loop feeds which), `KVSpec` (the paged KV pool's geometry), `Needs` (what a request holds from admission)
and `Family`: one family bound to its card and experts on a device, which the runtime receives at
construction; `TextInput`: what a family that takes text while a request runs (an open request) adds;
`Factory` (a family package's `FAMILY`: binds a card and its experts, builds the experts, and answers from
the card and the checkpoint's config alone, without weights: `VoiceSpec`, `precheck`). The runtime imports
this module and never a family; a family implements it.
Must not know: any family, tensors, models, threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, NamedTuple, Protocol, Sequence

from v2.contracts import LoopState, WorkPlan

LaunchState = Callable[[Callable[[], Any]], None]  # queues a device state change on the engine's stream


class Batch(Protocol):
    """What an executor is handed (`v2.runtime.scheduler.Batch`)."""

    @property
    def kind(self) -> Hashable: ...
    @property
    def plans(self) -> tuple[WorkPlan, ...]: ...
    @property
    def bucket(self) -> int: ...


class Executor(Protocol):
    """The device work of one work kind. The engine calls `prepare` on its thread (host only: inputs as host
    tensors), `launch` on the device stream (device only: uploads and the call; returns device results the
    stream copies to the host), and `read` on its thread with that host copy (one typed row per plan, in plan
    order: `rows[i]` and iteration). Registered by the family under its kind: adding a kind adds an executor."""

    def prepare(self, batch: Batch) -> Any: ...
    def launch(self, prepared: Any) -> Any: ...
    def read(self, host: Any, batch: Batch) -> Any: ...


class Loop(Protocol):
    """A stateless driven loop (its per-request state is a `LoopState`). `next` runs no kernel and may return
    None without ending (waiting: for a result, for input, for an upstream loop); the loop has ended exactly
    when `state.finish` is set. `advance` takes one row of a launched plan's result and returns whether it
    was taken (False: a row the loop no longer waits for); what it made is then in `state.fresh`, which the
    engine feeds to the loops this one feeds (or, for the last loop, streams to the caller)."""

    def next(self, state: Any) -> WorkPlan | None: ...
    def launched(self, state: Any, plan: WorkPlan) -> None: ...
    def expects(self, state: Any, plan: WorkPlan) -> bool: ...
    def advance(self, state: Any, plan: WorkPlan, row: Any) -> bool: ...
    def feed(self, state: Any, items: list[Any], upstream: Any) -> None: ...
    def finalize(self, state: Any) -> Any: ...


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


class PagedLoop(Loop, Protocol):
    """The loop whose plans write the paged KV (one per request). The engine tells it what the pager did."""

    def kv_span(self, plan: WorkPlan) -> tuple[int, int]: ...  # KV rows [start, end) the plan writes
    def kv_given(self, state: Any, cached: int) -> None: ...   # blocks given; `cached` rows came from the cache
    def preempted(self, state: Any) -> None: ...               # its blocks were taken back
    def resumable(self, state: Any) -> bool: ...               # nothing of it still on the device
    def resume(self, state: Any, rows: Any, cached: int) -> None: ...  # blocks again, to recompute `rows`
    def share(self, state: Any, leader: int | None) -> None: ...  # will share (None: not) a leader's prompt
    def shared(self, state: Any) -> None: ...                  # took the leader's prompt blocks and state


class FrontLoop(Protocol):
    """Work before admission (a waiting request's references -> codes; also encode-only jobs)."""

    def next(self, state: Any) -> WorkPlan | None: ...
    def started(self, state: Any, slots: list[int]) -> None: ...  # its state slots, one per input
    def launched(self, state: Any, plan: WorkPlan) -> None: ...
    def advance(self, state: Any, plan: WorkPlan, rows: Any) -> None: ...
    def finalize(self, state: Any) -> Any: ...


@dataclass(frozen=True)
class LoopSpec:
    """One loop a card declares: `name` keys its plans (`WorkPlan.loop`) and its state in a request's record;
    `feeds` names the loops that take what it emits; `pools` the slot pools its state holds a slot of (given
    back when it ends)."""

    name: Hashable
    loop: Any  # a `Loop` (a `PagedLoop` for the graph's `paged` loop)
    feeds: tuple[Hashable, ...] = ()
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoopGraph:
    """A family's loops in the topology its card declares. `loops` in topological order (a loop only feeds
    loops after it); `paged`: the loop holding the paged KV (None: no paged KV); `front`: the loop run before
    admission (None: none) and `front_pool` its slot pool. Loops that no other loop feeds plan before the
    engine reads the last step; the others plan after it, from what was just read; the last loop's `fresh`
    items stream to the caller, and a request ends when every loop has ended (with the last one's reason)."""

    loops: tuple[LoopSpec, ...]
    paged: Hashable | None = None
    front: Any = None
    front_pool: str | None = None
    specs: dict[Hashable, LoopSpec] = field(init=False, repr=False, compare=False)
    sources: tuple[LoopSpec, ...] = field(init=False, repr=False, compare=False)
    fed: tuple[LoopSpec, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.loops:
            raise ValueError("loops: a family declares at least one loop")
        specs = {s.name: s for s in self.loops}
        if len(specs) != len(self.loops):
            raise ValueError("loops: two loops share a name")
        seen: set[Hashable] = set()
        for s in reversed(self.loops):
            for d in s.feeds:
                if d not in specs:
                    raise ValueError(f"loops.{s.name}.feeds: no loop named {d!r}")
                if d not in seen:
                    raise ValueError(f"loops.{s.name}.feeds: {d!r} comes before it (loops are in feeding order)")
            seen.add(s.name)
        if self.paged is not None and self.paged not in specs:
            raise ValueError(f"paged: no loop named {self.paged!r}")
        targets = {d for s in self.loops for d in s.feeds}
        object.__setattr__(self, "specs", specs)
        object.__setattr__(self, "sources", tuple(s for s in self.loops if s.name not in targets))
        object.__setattr__(self, "fed", tuple(s for s in self.loops if s.name in targets))

    @property
    def sink(self) -> LoopSpec:
        """The loop whose output streams to the caller."""
        return self.loops[-1]


@dataclass(frozen=True)
class KVSpec:
    """The paged KV pool: blocks of `block_size` rows, at most `max_blocks` per request."""

    num_blocks: int
    block_size: int
    max_blocks: int
    prefix_cache: bool = True


@dataclass(frozen=True)
class Needs:
    """What one request holds from admission: slots per pool, and KV rows at its longest."""

    slots: Mapping[str, int]
    kv_rows: int = 0


class Family(Protocol):
    """One model family bound to its card and experts: everything model-specific the runtime runs.

    The runtime calls, in a request's order: `parse` and `prepare` at submit (errors name the field),
    `front_state` for inputs to encode before admission and `encoded` once they are, `needs` and `start`
    at admission (then `admitted` for device state: settings, fresh codec state), the loops through
    `graph` and the executors through `executors` every step, `recompute_rows` after a preemption,
    `more_input` when a loop waits for input (a long text's next segment, text fed to an open request) or,
    with `loop` None, when an open request waiting for admission got input (its first prompt's rows, or
    None while it has not enough), and `result` at the end. `more_input(record, loop)` returns a new prompt
    for the paged loop (the runtime gives it KV blocks), or None: the family handed the loop what it needed
    itself (through the loop's own calls), or there is nothing yet (the loop stays waiting, holding no
    batch row; the runtime asks again when more input arrives), or the input has ended (the loop ends).

    Optional, for a family whose stored voices carry more than codes (e.g. a speaker embedding):
    `voice_arrays` (name -> shape of each float32 array a voice carries; absent or empty: codes alone),
    `read_voice(source)` (the input a stored voice is encoded from, as `read_input`) and
    `voice_outputs(front_state) -> {name: array}` (the arrays of a finished front-loop run)."""

    name: str
    graph: LoopGraph
    executors: Mapping[Hashable, Executor]  # by work kind, in the order a step launches them
    buckets: Mapping[Hashable, list[int]]   # batch-size buckets per kind (a kind absent runs unpadded)
    pools: Mapping[str, int]                # slot pools: name -> slots
    kv: KVSpec | None
    kv_ops: Any                             # applies block copies / table entries, forks (`apply`, `fork`)
    prefill_budget: int                     # prompt rows prefilled per step, all requests together
    max_waiting: int
    max_buffered_chunks: int
    weights: Any                            # what weight updates write (an `nn.Module`)
    weight_names: Any                       # its naming (`v2.runtime.weight_updates.WeightNames`)
    device: Any                             # where its experts run (the default stream's device)
    sample_rate: int                        # the audio it makes: Hz, channels, frames per second
    channels: int
    frame_rate: float
    code_width: int                         # codes per frame, and each code's range (the voice store's checks)
    codebook_size: int
    speakers: tuple[str, ...] = ()          # built-in voices a request names as `speaker` (the checkpoint's)
    request_fields: frozenset[str] = frozenset()  # the request fields `parse` takes (what a server may send)
    sampling_keys: tuple[str, ...] = ()     # the keys its nested `sampling` takes (a rollout's sampling options)

    def bind(self, launch: LaunchState) -> None: ...
    def parse(self, request: Any) -> Any: ...
    def prepare(self, request: Any, *, voice: Any = None) -> Any: ...
    def check_group(self, group: Sequence[tuple[Any, Any]]) -> None: ...  # (request, prepared) sharing a prompt
    def front_state(self, request_id: int, inputs: tuple[Any, ...]) -> Any: ...
    def read_input(self, source: Any) -> Any: ...
    def front_start(self, slots: list[int]) -> None: ...
    def encoded(self, record: Any) -> Any: ...
    def needs(self, record: Any) -> Needs: ...
    def start(self, record: Any, slots: Mapping[str, int], share_from: int | None) -> dict[Hashable, LoopState]: ...
    def admitted(self, record: Any) -> None: ...
    def recompute_rows(self, state: Any) -> Any: ...
    def more_input(self, record: Any, loop: Hashable) -> Any: ...
    def result(self, record: Any, outputs: Mapping[Hashable, Any], reason: Any, now: float) -> Any: ...
    def stats(self) -> dict[str, Any]: ...
    def thread_setup(self) -> None: ...


class TextInput(Protocol):
    """What a family adds to take a request's text while it runs (`Runtime.open`). `open_text` checks the
    request like `parse` + `prepare` do, without its text (or with the text's first piece as `text`), and
    returns (request, work) with `work.rows` None and `work.inputs` as `prepare` gives them; `feed(request,
    work, text, end=)` is called on the caller's thread with each piece (`end`: the text is complete) and returns whether the
    engine has new input to hand over (`more_input`); it raises `RequestError` naming the field for a
    piece it refuses, and then takes none of it. Callers serialise `feed` per request."""

    def open_text(self, request: Any, *, voice: Any = None, split: str = "sentence") -> tuple[Any, Any]: ...
    def feed(self, request: Any, work: Any, text: str, *, end: bool = False) -> bool: ...


class VoiceSpec(NamedTuple):
    """What a voice store on a card checks its voices against: codes per frame, each code's range, and the
    float32 arrays every voice carries, name -> shape (empty: codes alone). A bound family has the same as
    `code_width`, `codebook_size`, `voice_arrays`."""

    width: int
    codebook_size: int
    arrays: Mapping[str, tuple[int, ...]]


class Factory(Protocol):
    """A family package's `FAMILY` (`v2.card.family_of`). `bind` and `experts` build a runtime's family;
    `voice_spec` and `precheck` read the card and the checkpoint's config files only (no weights, no
    device), so a command that needs no model loads none and a refusal the config decides comes first."""

    name: str

    def bind(self, card: Any, *experts: Any, graphs: bool = True, **named: Any) -> Family: ...
    def experts(self, card: Any, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: Any = "cpu", dtype: Any = None) -> dict[str, Any]: ...
    def voice_spec(self, card: Any, checkpoint: str | None = None) -> VoiceSpec: ...
    def precheck(self, card: Any, fields: Mapping[str, Any], checkpoint: str | None = None) -> None:
        """Refuse (a `v2.request.RequestError` naming the field) what the card and the checkpoint's config
        decide about request `fields`; what they cannot decide is left to `parse` and `prepare`."""
