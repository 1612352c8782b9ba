"""Weight files and meta-device models, shared by every expert's loader.

Owns: finding safetensors files (`model.safetensors` or a sharded `model.safetensors.index.json`),
reading shapes from headers and tensors one at a time from memory-mapped files (never pickle), one
error listing every missing / unexpected / mis-shaped key, building a module tree on the meta device
with initialisation skipped, and seeded parameter values. With these a loader allocates each weight
once, straight in its target dtype and device; `SafetensorsFiles`, the file half of a family's weight names,
and `ReleaseNames`, a family's weight names where they are the release checkpoint's keys.
Must not know: any model's key names or layout.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from v2.models.config import ConfigError

M = TypeVar("M", bound=nn.Module)


class CheckpointError(ValueError):
    """The checkpoint does not fit the config; the message names every bad key or file."""


def weight_files(path: Path) -> dict[str, Path]:
    """Map every stored key to the file that holds it."""
    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from e
        return {k: path / v for k, v in weight_map.items()}
    if single.is_file():
        with open_weights(single) as f:
            return {k: single for k in f.keys()}
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def open_weights(file: Path) -> Any:
    """An open safetensors file (use it as a context manager); a missing or unreadable file is a CheckpointError."""
    if not file.is_file():
        raise CheckpointError(f"{file}: weight file is missing")
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from e


def stored_by_file(files: dict[str, Path]) -> Iterator[tuple[Path, list[str]]]:
    by_file: dict[Path, list[str]] = {}
    for key, file in files.items():
        by_file.setdefault(file, []).append(key)
    yield from by_file.items()


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """Skip nn.init's default initialisers (every value is about to be overwritten)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "ones_", "zeros_", "trunc_normal_")
    saved = {n: getattr(nn.init, n) for n in names}
    for n in names:
        setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def empty_model(cls: type[M], cfg: object) -> M:
    """The module tree on the meta device: shapes only, no memory, no initialisation."""
    with torch.device("meta"), _no_init():
        return cls(cfg)  # type: ignore[call-arg]


def raise_mismatch(missing: list[str], unexpected: list[str], misshaped: list[str]) -> None:
    """Raise one CheckpointError listing every missing, unexpected and mis-shaped key (if any)."""
    parts = []
    if missing:
        parts.append(f"missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected:
        parts.append(f"unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
    if misshaped:
        parts.append(f"mis-shaped keys ({len(misshaped)}): {'; '.join(misshaped)}")
    if parts:
        raise CheckpointError("checkpoint does not match config.json: " + " | ".join(parts))


def stored_shapes(files: dict[str, Path]) -> dict[str, tuple[int, ...]]:
    """The shape of every stored key, read from the file headers only."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file, keys in stored_by_file(files):
        with open_weights(file) as f:
            present = set(f.keys())
            for key in keys:
                if key not in present:
                    raise CheckpointError(f"{file}: index lists '{key}' but the file does not hold it")
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


class Placement(Protocol):
    """Where one stored key lives in a model: rows [start, start + shape[0]) of parameter `param`."""

    @property
    def param(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...


def fill_from_files(model: nn.Module, layout: Mapping[str, Placement], files: dict[str, Path], *,
                    dtype: torch.dtype, device: torch.device | str) -> dict[str, nn.Parameter]:
    """Every parameter of `model` (built on the meta device) allocated once in `dtype` on `device`, then each
    stored key that `layout` places read into its rows (a key it does not place is left out: the caller has
    checked the keys). Returns the parameters by name, for what the caller fills itself (tied tables)."""
    for name, p in list(model.named_parameters()):  # one allocation per parameter, filled below
        set_tensor(model, name, torch.empty(p.shape, dtype=dtype, device=device))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    if key in layout:
                        part = layout[key]
                        params[part.param][part.start : part.start + part.shape[0]] = read_tensor(f, key, file)
    return params


def set_tensor(model: nn.Module, name: str, value: Tensor) -> None:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name)
    module._parameters[leaf] = nn.Parameter(value, requires_grad=False)


def read_config(path: Path) -> dict:
    file = path / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{path}: config.json is missing")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}: invalid JSON ({e})") from e


def read_tensor(f: Any, key: str, file: Path) -> Tensor:
    try:
        return f.get_tensor(key)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file}: cannot read tensor '{key}' ({e})") from e


def fill_seeded(model: nn.Module, seed: int, *, gain: float, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> None:
    """Give every parameter of a (meta) model a value drawn from `seed` on `device`, in name order:
    matrices ~ N(0, gain / sqrt(fan_in)), biases ~ N(0, 0.02), other vectors (norms, scales) ~ 1 + N(0, 0.02).
    The same seed gives the same values on every machine for a given `device` type (CPU: everywhere)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        value = torch.randn(shape, generator=gen, device=device)
        if len(shape) == 2:
            value *= gain / shape[-1] ** 0.5
        elif name.endswith("bias"):
            value *= 0.02
        else:
            value = value.mul_(0.02).add_(1.0)
        set_tensor(model, name, value.to(dtype))


class SafetensorsFiles:
    """The checkpoint-file half of a family's `WeightNames` (v2.runtime.weight_updates): the release's
    safetensors files found, their keys' shapes, and tensors read, with the functions above."""

    def files(self, path: Path) -> Any:
        return weight_files(path)

    def shapes(self, files: Any) -> dict[str, tuple[int, ...]]:
        return stored_shapes(files)

    def by_file(self, files: Any) -> Iterator[tuple[Path, list[str]]]:
        return stored_by_file(files)

    def open(self, file: Any) -> Any:
        return open_weights(file)

    def read(self, handle: Any, key: str, file: Any) -> Tensor:
        return read_tensor(handle, key, file)


class ReleaseNames(SafetensorsFiles):
    """A model's `WeightNames` where an update's names are the release checkpoint's keys as stored (no aliases,
    no tied names): `layout` is the model's loader's (the parameter rows each key fills, fused parameters'
    parts included); keys that start with `skip` are another expert's stored in the same files (e.g. a
    codec's) and are neither read nor offered."""

    def __init__(self, layout: Callable[[nn.Module], dict[str, Any]], *, skip: str | None = None) -> None:
        self._layout, self.skip = layout, skip

    def layout(self, model: nn.Module) -> dict[str, Any]:
        return self._layout(model)

    def canonical(self, name: str) -> str:
        return name

    def tied(self, name: str) -> str | None:
        return None

    def shapes(self, files: Any) -> dict[str, tuple[int, ...]]:
        shapes = super().shapes(files)
        return shapes if self.skip is None else {k: s for k, s in shapes.items() if not k.startswith(self.skip)}

    def by_file(self, files: Any) -> Iterator[tuple[Path, list[str]]]:
        return super().by_file(files) if self.skip is None else self._kept(files, self.skip)

    def _kept(self, files: Any, skip: str) -> Iterator[tuple[Path, list[str]]]:
        for file, keys in super().by_file(files):
            keys = [k for k in keys if not k.startswith(skip)]
            if keys:
                yield file, keys
