"""The loop graph a card declares: `LoopSpec` (one loop, the loops it feeds, the pools it holds, whether it
publishes) and `LoopGraph` (the loops in feeding order, which hold a paged KV, which one's output is the
caller's audio, the front loop, the loop whose reason is the request's: checked when built), `LAST`.
v2/runtime/family.py re-exports every name.
Must not know: any family, the bound family's protocols (family.py), tensors, models, threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Iterable, Mapping

from v2.runtime.loops import AnyFedLoop, AnyFrontLoop, AnyLoop, AnyPagedLoop, FedLoop, PagedLoop


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
