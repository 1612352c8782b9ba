"""Weight updates: checking named tensors against the model before anything is touched, then copying in place.

Owns: `UpdateGate` (one update at a time: asked for from any thread, applied by the engine thread once
nothing runs), the name mapping (model parameter names or the release's key names, parts of fused parameters
included; tied aliases are skipped, their target is what counts), one error listing unknown and mis-shaped names, and the in-place copies (the
parameters keep their storage, so captured graphs stay valid).
Must not know: the engine, requests.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from v2.models.loader import Part, canonical_name, release_layout, tied_target
from v2.models.weights import open_weights, read_tensor, stored_by_file, stored_shapes, weight_files


class WeightUpdateError(ValueError):
    """The update names unknown parameters or wrong shapes; nothing was changed."""


def check_names(model: nn.Module, shapes: dict[str, tuple[int, ...]]) -> dict[str, Part]:
    """{given name: where it goes} for every name that updates the model: a parameter's name, or a release key
    (a fused parameter's part included); raises listing every unknown or mis-shaped name."""
    layout = release_layout(model)
    for name, p in model.named_parameters():
        layout.setdefault(name, Part(name, 0, tuple(p.shape)))
    mapping, unknown, misshaped = {}, [], []
    for name, shape in shapes.items():
        target = canonical_name(name)
        if target not in layout:
            if tied_target(target) in layout:
                continue  # a tied alias: the weight it aliases is the one to update
            unknown.append(name)
        elif tuple(shape) != layout[target].shape:
            misshaped.append(f"{name}: given {list(shape)} vs model {list(layout[target].shape)}")
        else:
            mapping[name] = layout[target]
    if unknown or misshaped or not mapping:
        parts = [f"unknown ({len(unknown)}): {', '.join(unknown)}"] if unknown else []
        parts += [f"mis-shaped ({len(misshaped)}): {'; '.join(misshaped)}"] if misshaped else []
        raise WeightUpdateError("weight update refused: " + (" | ".join(parts) or "no tensors given"))
    return mapping


def from_tensors(model: nn.Module, named: dict[str, Tensor]) -> Callable[[], Iterator[tuple[Part, Tensor]]]:
    """Check named tensors now; return what yields (where, tensor) when the update is applied."""
    mapping = check_names(model, {k: tuple(v.shape) for k, v in named.items()})
    return lambda: ((mapping[k], named[k]) for k in mapping)


def from_disk(model: nn.Module, path: str | Path) -> Callable[[], Iterator[tuple[Part, Tensor]]]:
    """Check a safetensors checkpoint's headers now; tensors are read one at a time when applied."""
    files = weight_files(Path(path))
    mapping = check_names(model, stored_shapes(files))

    def tensors() -> Iterator[tuple[Part, Tensor]]:
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    if key in mapping:
                        yield mapping[key], read_tensor(f, key, file)
    return tensors


@torch.no_grad()
def apply(model: nn.Module, tensors: Iterable[tuple[Part, Tensor]]) -> int:
    """Copy each tensor into its parameter (rows) in place; returns how many were copied."""
    params = dict(model.named_parameters())
    count = 0
    for part, value in tensors:
        rows = params[part.param][part.start : part.start + part.shape[0]]
        rows.copy_(value.to(device=rows.device, dtype=rows.dtype))
        count += 1
    return count


@dataclass
class PendingUpdate:
    tensors: Callable[[], Iterator[tuple[Part, Tensor]]]
    version: int
    abort: bool
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class UpdateGate:
    """At most one weight update in flight; `version` is the weights' version now."""

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond  # the runtime's lock: the engine waits on it
        self.pending: PendingUpdate | None = None
        self.version = 0

    def request(self, tensors: Callable[[], Iterator[tuple[Part, Tensor]]], version: int, mode: str,
                timeout: float | None, *, closed: Callable[[], bool]) -> None:
        """Queue an update and wait until the engine has applied it (caller's thread)."""
        if mode not in ("wait", "abort"):
            raise ValueError(f"mode: must be 'wait' or 'abort', got {mode!r}")
        update = PendingUpdate(tensors, version, mode == "abort")
        with self._cond:
            if closed():
                raise RuntimeError("the runtime is closed")
            if self.pending is not None:
                raise RuntimeError("a weight update is already in progress")
            self.pending = update
            self._cond.notify_all()
        if not update.done.wait(timeout):
            raise TimeoutError(f"weight update to version {version} not applied within {timeout} s")
        if update.error is not None:
            raise update.error

    def progress(self, model: nn.Module, running: dict[int, Any], abort: Callable[[Any], None]) -> None:
        """Engine thread, each step while an update is pending: in "abort" mode end what runs; once nothing
        runs, copy the tensors in place, bump the version, and release the caller."""
        update = self.pending
        assert update is not None
        if update.abort:
            for req in list(running.values()):
                abort(req)
        if running:
            return
        try:
            apply(model, update.tensors())
            self.version = update.version
        except Exception as e:
            update.error = e
        with self._cond:
            self.pending = None
        update.done.set()
