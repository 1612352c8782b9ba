"""Weight updates: checking named tensors against the model before anything is touched, then copying in place.

Owns: the name mapping (model parameter names or the release's key names; tied aliases are skipped, their
target is what counts), one error listing unknown and mis-shaped names, and the in-place copies (the
parameters keep their storage, so captured graphs stay valid).
Must not know: the engine, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from v2.models.loader import canonical_name, tied_target
from v2.models.weights import open_weights, read_tensor, stored_by_file, stored_shapes, weight_files


class WeightUpdateError(ValueError):
    """The update names unknown parameters or wrong shapes; nothing was changed."""


def check_names(model: nn.Module, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """{given name: parameter name} for every name that updates a parameter; raises listing every bad name."""
    params = dict(model.named_parameters())
    mapping, unknown, misshaped = {}, [], []
    for name, shape in shapes.items():
        target = canonical_name(name)
        if target not in params:
            if tied_target(target) in params:
                continue  # a tied alias: the weight it aliases is the one to update
            unknown.append(name)
        elif tuple(shape) != tuple(params[target].shape):
            misshaped.append(f"{name}: given {list(shape)} vs model {list(params[target].shape)}")
        else:
            mapping[name] = target
    if unknown or misshaped or not mapping:
        parts = [f"unknown ({len(unknown)}): {', '.join(unknown)}"] if unknown else []
        parts += [f"mis-shaped ({len(misshaped)}): {'; '.join(misshaped)}"] if misshaped else []
        raise WeightUpdateError("weight update refused: " + (" | ".join(parts) or "no tensors given"))
    return mapping


def from_tensors(model: nn.Module, named: dict[str, Tensor]) -> Callable[[], Iterator[tuple[str, Tensor]]]:
    """Check named tensors now; return what yields (parameter name, tensor) when the update is applied."""
    mapping = check_names(model, {k: tuple(v.shape) for k, v in named.items()})
    return lambda: ((mapping[k], named[k]) for k in mapping)


def from_disk(model: nn.Module, path: str | Path) -> Callable[[], Iterator[tuple[str, Tensor]]]:
    """Check a safetensors checkpoint's headers now; tensors are read one at a time when applied."""
    files = weight_files(Path(path))
    mapping = check_names(model, stored_shapes(files))

    def tensors() -> Iterator[tuple[str, Tensor]]:
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    if key in mapping:
                        yield mapping[key], read_tensor(f, key, file)
    return tensors


@torch.no_grad()
def apply(model: nn.Module, tensors: Iterable[tuple[str, Tensor]]) -> int:
    """Copy each tensor into its parameter in place; returns how many were copied."""
    params = dict(model.named_parameters())
    count = 0
    for name, value in tensors:
        params[name].copy_(value.to(device=params[name].device, dtype=params[name].dtype))
        count += 1
    return count
