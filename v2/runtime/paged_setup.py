"""The engine's paged KV, built from what its family gives: `paged_loops`, one pool per paged loop of the graph.

Owns: matching each paged loop of the graph with its family's `PagedKV` (in the graph's order, the first
one's the loop groups share) and refusing, with the loop named, a paged loop without its KV, a KV for no
paged loop, and two paged loops handed one pool.
Must not know: the engine's step, how the pools are driven (paged_loops.py, kv.py), any family, the
caller's API.
"""

from __future__ import annotations

from typing import Hashable, Mapping

from v2.runtime.family import LoopGraph, PagedKV
from v2.runtime.kv import RequestKV
from v2.runtime.paged_loops import PagedLoops


def paged_loops(graph: LoopGraph, given: Mapping[Hashable, PagedKV]) -> PagedLoops | None:
    """The engine's paged KV: one pool per paged loop of the graph, each from what its family gives
    (`paged_kv`), in the graph's order; None when the graph has none. Refused (ValueError naming the loop):
    a paged loop without its KV, a KV for no paged loop, two paged loops handed one pool (the same
    `KVSpec` object or the same device side: a copy-and-paste that would make them write each other's
    blocks)."""
    if not graph.paged_loops:
        if given:
            raise ValueError(f"loops.{next(iter(given))}: a paged KV for a loop the graph does not page")
        return None
    for name in given:
        if name not in graph.paged_loops:
            raise ValueError(f"loops.{name}: a paged KV for a loop the graph does not page")
    kvs: list[RequestKV] = []
    seen: dict[int, Hashable] = {}
    for i, (name, loop) in enumerate(graph.paged_loops.items()):
        kv = given.get(name)
        if kv is None:
            raise ValueError(f"loops.{name}: a paged loop without a paged KV (its family gives none)")
        for part in (kv.spec, kv.ops):
            if id(part) in seen:
                raise ValueError(f"loops.{name}.kv: the KV of loops.{seen[id(part)]} too; two paged loops share one "
                                 "KV spec by accident (each paged loop holds its own pool)")
            seen[id(part)] = name
        kvs.append(RequestKV.build(kv.spec, kv.ops, loop, name, kv.recompute, first=i == 0, prefill=kv.prefill))
    return PagedLoops(kvs, {name: graph.specs[name].pools for name in graph.paged_loops})
