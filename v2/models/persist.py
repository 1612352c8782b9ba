"""Tensors that outlive the call that makes them (caches, buffers kept from step to step) are made as normal
tensors, whatever mode the caller runs in.

The runtime runs its device work in `torch.inference_mode()` (v2/runtime/device.py): an operation there skips
autograd's and the version counter's bookkeeping for what it makes, a fixed cost that dominates the tiny
operations of a CPU frame. What it makes is an inference tensor: it may not be written in place outside
inference mode, nor saved by a differentiable pass. A cache filled during that work and read later by a
generic or differentiable pass of the same model (`generate`, an RL recompute) must hold normal tensors:
`persistent(fn)` makes fn's tensors so. A normal tensor may be written in place inside inference mode (its
version is bumped), and a view of it made there is a normal tensor too, so only what is made needs this.
Must not know: which caches use it.
"""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


def persistent(fn: Callable[P, R]) -> Callable[P, R]:
    """fn run outside inference mode: the tensors it makes are normal tensors."""

    @functools.wraps(fn)
    def made(*args: P.args, **kwargs: P.kwargs) -> R:
        with torch.inference_mode(False):
            return fn(*args, **kwargs)

    return made
