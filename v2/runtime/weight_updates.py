"""Weight updates: checking named tensors against the model before anything is touched, then copying in place.

Owns: `UpdateGate` (one update at a time: asked for from any thread, applied by the engine thread once
nothing runs; an update whose caller timed out is withdrawn, never applied later; versions are ints and
strictly increase), the name mapping (model parameter names or the release's key names, parts of fused
parameters included; tied aliases are skipped, their target is what counts), one error listing unknown and
mis-shaped names, the value checks (a real, dense, finite tensor of a floating dtype; numpy arrays
converted), and the all-or-nothing in-place copies (the parameters keep their storage, so captured graphs
stay valid; what was overwritten is restored if any later tensor fails). The model's naming (its release
layout, aliases, checkpoint files) is its family's (`WeightNames`).
Must not know: the engine, requests, any family or model.
"""

from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np
import torch
from torch import Tensor, nn


class Part(Protocol):
    """Where one name lives in the model: rows [start, start + shape[0]) of parameter `param` (of its slice
    `param[expert]` where the part has an `expert` that is not None: one expert of a stacked parameter)."""

    param: str
    start: int
    shape: tuple[int, ...]


class WeightNames(Protocol):
    """A family's naming of its model's weights, and reading its checkpoint files."""

    def layout(self, model: nn.Module) -> dict[str, Part]: ...  # every name that updates the model
    def canonical(self, name: str) -> str: ...   # a given name as the layout names it
    def tied(self, name: str) -> str | None: ...  # the weight a tied alias stands for (None: not an alias)
    def files(self, path: Path) -> Any: ...      # a checkpoint directory's weight files
    def shapes(self, files: Any) -> dict[str, tuple[int, ...]]: ...
    def by_file(self, files: Any) -> Iterable[tuple[Any, list[str]]]: ...
    def open(self, file: Any) -> Any: ...        # a context manager over one file
    def read(self, handle: Any, key: str, file: Any) -> Tensor: ...


class WeightUpdateError(ValueError):
    """The update is refused (unknown names, wrong shapes, bad values or version); nothing was changed."""


# Any floating dtype is cast to the parameter's dtype on copy (bf16 <-> fp32 and fp16 included);
# integer, bool and complex tensors are refused rather than silently cast.
FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_value(name: str, value: object) -> Tensor:
    """`value` as a tensor fit to copy into a parameter, or a WeightUpdateError naming `name`."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            raise WeightUpdateError(f"{name}: expected a floating array, got numpy {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise WeightUpdateError(f"{name}: expected a tensor, got {type(value).__name__}")
    if value.is_meta or value.layout is not torch.strided:
        raise WeightUpdateError(f"{name}: a meta or sparse tensor holds no dense values")
    if value.dtype not in FLOATING:
        raise WeightUpdateError(f"{name}: expected a floating dtype ({', '.join(map(str, FLOATING))}), got {value.dtype}")
    if not bool(torch.isfinite(value).all()):
        raise WeightUpdateError(f"{name}: holds NaN or infinite values")
    return value


def check_version(version: object, current: int) -> int:
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise WeightUpdateError(f"version: expected an int, got {type(version).__name__}")
    if int(version) <= current:
        raise WeightUpdateError(f"version: must be greater than the current version {current}, got {version}")
    return int(version)


def check_names(model: nn.Module, shapes: dict[str, tuple[int, ...]], names: WeightNames) -> dict[str, Part]:
    """{given name: where it goes} for every name that updates the model: a parameter's name, or a release key
    (a fused parameter's part included); raises listing every unknown or mis-shaped name."""
    layout = names.layout(model)
    mapping, unknown, misshaped = {}, [], []
    for name, shape in shapes.items():
        if not isinstance(name, str):
            raise WeightUpdateError(f"weight update refused: names must be str, got {type(name).__name__}")
        target = names.canonical(name)
        if target not in layout:
            if names.tied(target) in layout:
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


Named = tuple[str, Part, Tensor]  # (given name, where it goes, value)


def from_tensors(model: nn.Module, named: dict[str, Tensor], names: WeightNames) -> Callable[[], Iterator[Named]]:
    """Check every name, shape and value now (the caller's thread); return what yields them when applied."""
    if not isinstance(named, dict):
        raise WeightUpdateError(f"named_tensors: expected a dict of name -> tensor, got {type(named).__name__}")
    values = {k: check_value(str(k), v) for k, v in named.items()}
    mapping = check_names(model, {k: tuple(v.shape) for k, v in values.items()}, names)
    return lambda: ((k, mapping[k], values[k]) for k in mapping)


def from_disk(model: nn.Module, path: str | Path, names: WeightNames) -> Callable[[], Iterator[Named]]:
    """Check a safetensors checkpoint's headers now; tensors are read (and their values checked) one at a
    time when applied."""
    files = names.files(Path(path))
    mapping = check_names(model, names.shapes(files), names)

    def tensors() -> Iterator[Named]:
        for file, keys in names.by_file(files):
            with names.open(file) as f:
                for key in keys:
                    if key in mapping:  # values on disk are checked as they are read
                        yield key, mapping[key], check_value(key, names.read(f, key, file))
    return tensors


def _copy(rows: Tensor, value: Tensor) -> None:
    rows.copy_(value.to(device=rows.device, dtype=rows.dtype))


@torch.no_grad()
def apply(model: nn.Module, tensors: Iterable[Named]) -> int:
    """Copy each (already checked) tensor into its parameter (rows) in place; returns how many were copied.
    All or nothing: if producing a value or a copy fails, every row already written gets its old values back,
    and it raises."""
    params = dict(model.named_parameters())
    saved: list[tuple[Tensor, Tensor]] = []  # (rows, their values before), on the parameter's device
    try:
        for _name, part, value in tensors:
            param, expert = params[part.param], getattr(part, "expert", None)
            rows = (param if expert is None else param[expert])[part.start : part.start + part.shape[0]]
            saved.append((rows, rows.clone()))
            _copy(rows, value)
    except BaseException:
        for rows, before in reversed(saved):
            rows.copy_(before)
        raise
    return len(saved)


@dataclass
class PendingUpdate:
    tensors: Callable[[], Iterator[Named]]
    version: int
    abort: bool
    applying: bool = False  # set under the lock once the engine starts copying: it can no longer be withdrawn
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class UpdateGate:
    """At most one weight update in flight; `version` is the weights' version now."""

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond  # the runtime's lock: the engine waits on it
        self.pending: PendingUpdate | None = None
        self.version = 0

    def check(self, version: object, mode: str) -> int:
        """The cheap checks, before any tensor is looked at."""
        if mode not in ("wait", "abort"):
            raise ValueError(f"mode: must be 'wait' or 'abort', got {mode!r}")
        return check_version(version, self.version)

    def request(self, tensors: Callable[[], Iterator[Named]], version: int, mode: str,
                timeout: float | None, *, closed: Callable[[], bool]) -> None:
        """Queue an update and wait until the engine has applied it (caller's thread). On timeout the update
        is withdrawn unless the engine is already copying it (then this waits for the outcome)."""
        update = PendingUpdate(tensors, self.check(version, mode), mode == "abort")
        with self._cond:
            if closed():
                raise RuntimeError("the runtime is closed")
            if self.pending is not None:
                raise RuntimeError("a weight update is already in progress")
            check_version(version, self.version)
            self.pending = update
            self._cond.notify_all()
        if not update.done.wait(timeout):
            with self._cond:
                if not update.applying:
                    self.pending = None
                    self._cond.notify_all()
                    raise TimeoutError(f"weight update to version {version} not applied within {timeout} s; "
                                       "it was withdrawn and will not be applied")
            update.done.wait()
        if update.error is not None:
            raise update.error

    def progress(self, model: nn.Module, running: dict[int, Any], abort: Callable[[Any], None]) -> None:
        """Engine thread, each step while an update is pending: in "abort" mode end what runs; once nothing
        runs, copy the tensors in place, bump the version, and release the caller."""
        with self._cond:
            update = self.pending
        if update is None:  # withdrawn
            return
        if update.abort:
            for req in list(running.values()):
                abort(req)
        if running:
            return
        with self._cond:
            if self.pending is not update:
                return
            update.applying = True
        try:
            apply(model, update.tensors())
            self.version = update.version
        except Exception as e:
            update.error = e
        with self._cond:
            self.pending = None
        update.done.set()
