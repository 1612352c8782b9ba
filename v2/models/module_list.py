"""Typed module lists: an `nn.ModuleList` whose items are all of one class, typed as that class.

Owns: `module_list_of(items)`, which builds a plain `nn.ModuleList` (the same container, parameter names and
state-dict keys as `nn.ModuleList(items)`) and types it `ModuleListOf[M]`, so iterating or indexing it gives
`M` to a type checker instead of `nn.Module`. `ModuleListOf` exists for type checkers only (nothing is ever an
instance of it at run time): use it in annotations, never in `isinstance`.
Must not know: any model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar, cast, overload

from torch import nn

M = TypeVar("M", bound=nn.Module)

if TYPE_CHECKING:
    class ModuleListOf(nn.ModuleList, Generic[M]):
        """`nn.ModuleList` as a type checker sees it when every item is an `M`."""

        def __iter__(self) -> Iterator[M]: ...

        @overload
        def __getitem__(self, idx: slice) -> ModuleListOf[M]: ...
        @overload
        def __getitem__(self, idx: int) -> M: ...
        def __getitem__(self, idx: int | slice) -> M | ModuleListOf[M]: ...


def module_list_of(items: Iterable[M]) -> ModuleListOf[M]:
    """`nn.ModuleList(items)`, typed by its items' class."""
    # The cast only narrows the item type: the list holds exactly `items`, each an M.
    return cast("ModuleListOf[M]", nn.ModuleList(items))
