"""A family with the loops a card or a deployment adds to it: what the engine drives when a runtime has any.

Owns: `with_added(family, card, add_loops)`: the added loops the card declares (`added_loops`) and the
deployment gives (`add_loops`), checked against the card (v2/card_added.py: refusals name the field), built
through their factories (`v2.runtime.added`), and `WithAdded`, the `EngineFamily` the engine is handed
then: the family's own graph with each added loop after the loop it takes from (a `LoopSpec` that
`publishes`; the request still ends with the family's reason: `LoopGraph.ends`), the family's executors then
the added loops' kinds (a kind the family has too is refused), their buckets, their slot pools (named
`<loop>_<pool>`, one slot each per request from admission), their states made at `start` beside the family's,
and the result: the family's, assembled from its own loops' outputs, with each added loop's `finalize` under
`SpeechResult.added`. Everything else is the family's, unchanged. With no added loop the family itself is
what the engine drives (nothing in its path changes).
Must not know: any family, any added loop's work, the engine's internals.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Mapping

from v2.card import CardError, LoopTable, ModelCard
from v2.card_added import OPTION_FIELD, AddedLoopDecl, ResolvedAdded, added_decls, resolve_added
from v2.contracts import FinishReason, LoopState
from v2.runtime.added import AddedContext, AddedLoop, AddedLoopFactory, Host, spoken_of
from v2.runtime.handles import TextHandle
from v2.runtime.family import AnyExecutor, EngineFamily, Family, LaunchState, LoopGraph, LoopSpec, Needs, PagedKV

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from v2.runtime.handles import SpeechResult
    from v2.runtime.records import RequestRecord

AddLoops = Iterable[str] | Mapping[str, AddedLoopDecl | str]  # what `Runtime.from_card(add_loops=...)` takes


def added_loops(card: ModelCard, add_loops: AddLoops = ()) -> list[ResolvedAdded]:
    """The card's added loops and the deployment's, checked together, in feeding order (`CardError` naming
    the field: `added_loops.<name>...` for the card's, `add_loops.<name>...` for the deployment's)."""
    loops = card.__dict__.get("loops")
    declared = loops.declared() if isinstance(loops, LoopTable) else {}
    try:
        given = added_decls(add_loops)
        for name in given:
            if name in card.added_loops:
                raise ValueError(f"{OPTION_FIELD}.{name}: the card adds a loop of that name (added_loops.{name})")
        return resolve_added(declared, {**card.added_loops, **given}, {name: OPTION_FIELD for name in given})
    except ValueError as e:
        raise CardError(f"card {card.name}: {e}") from None


def graph_name(graph: LoopGraph, name: str) -> Hashable:
    """The graph's loop that a card's loop name names (a family may key its loops by an enum of the names)."""
    for key in graph.specs:
        if key == name or getattr(key, "value", None) == name:
            return key
    raise ValueError(f"after: the family's graph has no loop {name!r}")


def with_added(family: Family, card: ModelCard, add_loops: AddLoops = ()) -> EngineFamily:
    """The family itself when nothing is added; else the family with its added loops built and wired."""
    order = added_loops(card, add_loops)
    if not order:
        return family
    host = Host(family.name, family.sample_rate, family.channels, family.device)
    built: dict[str, AddedLoop] = {}
    for r in order:
        factory: AddedLoopFactory = r.factory  # type: ignore[assignment]  # its `takes` and `gives` were checked
        built[r.name] = factory.build(r.name, dict(r.decl.settings), host)
    return WithAdded(family, order, built)


class WithAdded:
    """The family with added loops (see the module's docstring); it delegates the rest to the family."""

    def __init__(self, family: Family, order: list[ResolvedAdded], built: Mapping[str, AddedLoop]) -> None:
        self.family, self.built = family, dict(built)
        graph = family.graph
        feeds: dict[Hashable, tuple[Hashable, ...]] = {s.name: s.feeds for s in graph.loops}
        self.upstream: dict[str, Hashable] = {}  # added loop -> the loop it takes from
        for r in order:
            after = r.after if r.after_added else graph_name(graph, r.after)
            feeds[after] = (*feeds.get(after, ()), r.name)
            self.upstream[r.name] = after
        self.pool_names = {name: {f"{name}_{p}": p for p in b.pools} for name, b in built.items()}
        specs = [dataclasses.replace(s, feeds=feeds[s.name]) for s in graph.loops]
        specs += [LoopSpec(r.name, built[r.name].loop, feeds.get(r.name, ()), tuple(self.pool_names[r.name]),
                           publishes=True) for r in order]
        self.graph = LoopGraph(tuple(specs), paged=graph.paged, audio=graph.audio, front=graph.front,
                               front_pool=graph.front_pool, front_name=graph.front_name, ends=graph.sink.name)
        executors: dict[Hashable, AnyExecutor] = dict(family.executors)
        buckets: dict[Hashable, list[int]] = dict(family.buckets)
        pools = dict(family.pools)
        fields = {r.name: r.field for r in order}
        for name, b in built.items():
            for kind, executor in b.executors.items():
                if kind in executors:
                    raise CardError(f"{fields[name]}.{name}: its work kind {kind!r} is one the graph has already "
                                    "(each added loop's kinds are its own)")
                executors[kind] = executor
            buckets.update(b.buckets)
            for full, own in self.pool_names[name].items():
                pools[full] = b.pools[own]
        self.executors, self.buckets, self.pools = executors, buckets, pools
        self._own = frozenset(s.name for s in graph.loops)

    # ----- the family's, unchanged -----------------------------------------------------------------
    @property
    def prefill_budget(self) -> int:
        return self.family.prefill_budget

    @property
    def max_buffered_chunks(self) -> int:
        return self.family.max_buffered_chunks

    @property
    def weights(self) -> torch.nn.Module:
        return self.family.weights

    @property
    def sample_rate(self) -> int:
        return self.family.sample_rate

    @property
    def channels(self) -> int:
        return self.family.channels

    @property
    def code_width(self) -> int:
        return self.family.code_width

    def bind(self, launch: LaunchState) -> None:
        self.family.bind(launch)

    def thread_setup(self) -> None:
        self.family.thread_setup()

    def front_start(self, slots: list[int]) -> None:
        self.family.front_start(slots)

    def encoded(self, record: RequestRecord) -> Tensor | None:
        return self.family.encoded(record)

    def admitted(self, record: RequestRecord) -> None:
        self.family.admitted(record)

    def paged_kv(self) -> Mapping[Hashable, PagedKV]:
        return self.family.paged_kv()

    def more_input(self, record: RequestRecord, loop: Hashable | None) -> Tensor | None:
        return self.family.more_input(record, loop) if loop is None or loop in self._own else None

    def stats(self) -> Mapping[str, object]:
        return self.family.stats()

    # ----- with the added loops --------------------------------------------------------------------
    def needs(self, record: RequestRecord) -> Needs:
        need = self.family.needs(record)
        slots = dict(need.slots)
        for names in self.pool_names.values():
            slots.update((full, 1) for full in names)
        return Needs(slots, need.kv_rows, need.loop_rows)

    def start(self, record: RequestRecord, slots: Mapping[str, int], share_from: int | None) -> dict[Hashable, LoopState]:
        added = {full for names in self.pool_names.values() for full in names}
        states = self.family.start(record, {p: s for p, s in slots.items() if p not in added}, share_from)
        family, open_text = self.family, isinstance(record.handle, TextHandle)
        for name, b in self.built.items():
            own = {p: slots[full] for full, p in self.pool_names[name].items()}
            states[name] = b.start(AddedContext(record.id, own, family.sample_rate, family.channels,
                                                lambda: spoken_of(family, record, open_text), record.handle.marks,
                                                record.request))
            upstream = states.get(self.upstream[name])
            if upstream is not None and upstream.finish is not None:  # it will make nothing (e.g. a reply in text
                b.loop.feed(states[name], [], upstream.finish)      # alone): the added loop learns it at once
        return states

    def result(self, record: RequestRecord, outputs: Mapping[Hashable, object], reason: FinishReason,
               now: float) -> SpeechResult:
        own = {k: v for k, v in outputs.items() if k in self._own}
        result = self.family.result(record, own, reason, now)
        added: dict[str, Any] = {str(k): v for k, v in outputs.items() if k in self.built}
        return dataclasses.replace(result, added=added) if added else result
