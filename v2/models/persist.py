"""Tensors that outlive the call that makes them (caches, buffers kept from step to step) are made as normal
tensors, whatever mode the caller runs in.

The runtime runs its device work in `torch.inference_mode()` (v2/runtime/device.py): an operation there skips
autograd's and the version counter's bookkeeping for what it makes, a fixed cost that dominates the tiny
operations of a CPU frame. What it makes is an inference tensor: it may not be written in place outside
inference mode, nor saved by a differentiable pass. A cache filled during that work and read later by a
generic or differentiable pass of the same model (`generate`, an RL recompute) must hold normal tensors:
`persistent(fn)` makes fn's tensors so. A normal tensor may be written in place inside inference mode (its
version is bumped), and a view of it made there is a normal tensor too, so only what is made needs this.
`ParamVersions`: whether the parameters a kept object was made from changed.
Must not know: which caches use it.
"""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec, TypeVar

import torch
from torch import nn

P = ParamSpec("P")
R = TypeVar("R")


def persistent(fn: Callable[P, R]) -> Callable[P, R]:
    """fn run outside inference mode: the tensors it makes are normal tensors."""

    @functools.wraps(fn)
    def made(*args: P.args, **kwargs: P.kwargs) -> R:
        with torch.inference_mode(False):
            return fn(*args, **kwargs)

    return made


class ParamVersions:
    """Whether a module's parameters changed since the last look (`changed(module)`): a version bumped by an in-place
    write, a parameter replaced in its module, or a submodule replaced in its parent (its parameters are others).
    Read from lists of where each is held, made once (walking `parameters()` at every look costs more than the
    check); the module itself is not kept."""

    def __init__(self) -> None:
        self._held: list[tuple[dict[str, nn.Parameter | None], str, nn.Parameter]] | None = None
        self._children: list[tuple[dict[str, nn.Module | None], str, nn.Module]] = []
        self._seen: tuple[int, ...] | None = None

    def changed(self, module: nn.Module) -> bool:
        held = self._held
        if (held is None or any(d.get(n) is not p for d, n, p in held)
                or any(d.get(n) is not c for d, n, c in self._children)):
            held = self._held = [(m._parameters, n, p) for m in module.modules()
                                 for n, p in m._parameters.items() if p is not None]
            self._children = [(m._modules, n, c) for m in module.modules() for n, c in m._modules.items()
                              if c is not None]
            self._seen = None
        now = tuple(p._version for _, _, p in held)
        changed, self._seen = now != self._seen, now
        return changed
