"""Weight updates: checking named tensors against the model before anything is touched, then copying in place.

Owns: the name mapping (model parameter names or the release's key names, parts of fused parameters
included; tied aliases are skipped, their target is what counts), one error listing unknown and mis-shaped names, and the in-place copies (the
parameters keep their storage, so captured graphs stay valid).
Must not know: the engine, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

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
