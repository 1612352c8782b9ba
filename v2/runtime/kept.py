"""A device result of which the engine copies only part to the host: the rest stays where the executor made it.

Owns: `Kept`. An executor's `launch` may return `Kept(host, device)` instead of a tensor: the stream copies
`host` (a tensor, or None) to the host as it copies any result, and hands `device` (the executor's own: e.g.
hidden-state rows, token ids or embeddings the loop it feeds takes next) through untouched, so its `read`
gets `Kept(host array, device)` and may give rows that hold views of `device` (a fed loop's items on the
model's device: no host copy the engine does not need, no upload back). What `device` holds must stay valid
until the rows are consumed: a buffer the executor does not overwrite before then (not a graph's static
output reused by the next replay), which is the executor's to guarantee.
Must not know: requests, loops, executors, the stream's workings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

D = TypeVar("D")
H = TypeVar("H")


@dataclass(frozen=True)
class Kept(Generic[H, D]):
    host: H    # copied to the host by the stream (a tensor at launch, a host array at read; or None)
    device: D  # left as it is: what the executor's `read` hands the loops, on the device


def split_kept(value: object, copy: Callable[[Any], object]) -> object:
    """`value` with its host part copied by `copy` (a `Kept`'s `host` alone; any other value whole)."""
    if isinstance(value, Kept):
        return Kept(None if value.host is None else copy(value.host), value.device)
    return copy(value)
