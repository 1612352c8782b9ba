"""A benchmark's torch thread count, given back when it ends: a bench run in-process (a test, a notebook, another
bench) leaves the process's `torch.get_num_threads()` as it found it.

Owns: `keeps_threads`, a decorator for a bench's entry point (its `main`, or the function that sets the count)
that restores the intra-op thread count the call found when it returns or raises, whatever the body set.
Must not know: any bench's measurements, cards, families.
"""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def keeps_threads(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with torch's intra-op thread count restored to the caller's when it returns or raises."""

    @functools.wraps(fn)
    def kept(*args: P.args, **kwargs: P.kwargs) -> R:
        import torch  # on first call only: a bench module's import stays as light as it is

        saved = torch.get_num_threads()
        try:
            return fn(*args, **kwargs)
        finally:
            if torch.get_num_threads() != saved:
                torch.set_num_threads(saved)

    return kept
