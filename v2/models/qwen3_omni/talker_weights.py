"""Loading one part of a Qwen3-Omni checkpoint (the talker with its code predictor, or code2wav) by itself.

Owns: `load_part` (the tensors under one prefix, `talker.` or `code2wav.`, into a module tree built on the meta
device: every key of that part present and of its shape, none unknown; q/k/v and gate/up fused per decoder as
`v2.models.qwen3.release_layout` says, MoE experts stacked as moe.py keeps them; bf16 or any stored dtype -> the compute dtype) and `seeded_part`
(weights drawn from a seed, for tests of sizes no checkpoint has).
Must not know: the thinker, the runtime, requests. The whole model's loader is loader.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from v2.models.qwen3 import release_layout
from v2.models.weights import (
    open_weights, raise_mismatch, read_tensor, set_tensor, stored_by_file, stored_shapes, weight_files,
)

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True)
class Slot:
    """Where one release key lives: `param`[index] (a view of that shape)."""

    param: str
    index: tuple[int | slice, ...]
    shape: tuple[int, ...]


def part_layout(model: nn.Module) -> dict[str, Slot]:
    """Every release key (relative to `model`) its parameters are made of: q/k/v and gate/up split per decoder
    (`release_layout`), a shared expert's gate/up split in halves, stacked experts (`experts.gate_up_proj`
    [E, 2I, H], `experts.down_proj` [E, H, I]) split into the release's `experts.E.{gate,up,down}_proj.weight`."""
    params = dict(model.named_parameters())
    layout: dict[str, Slot] = {}
    for key, part in release_layout(model).items():
        shape = tuple(params[part.param].shape)
        if key.endswith("experts.gate_up_proj") or key.endswith("experts.down_proj"):
            base = key.rpartition(".")[0] + "."
            for e in range(shape[0]):
                if key.endswith("gate_up_proj"):
                    i = shape[1] // 2
                    layout[f"{base}{e}.gate_proj.weight"] = Slot(part.param, (e, slice(0, i)), (i, shape[2]))
                    layout[f"{base}{e}.up_proj.weight"] = Slot(part.param, (e, slice(i, 2 * i)), (i, shape[2]))
                else:
                    layout[f"{base}{e}.down_proj.weight"] = Slot(part.param, (e,), shape[1:])
        elif key.endswith("gate_up_proj.weight") and key == part.param:  # not split by a decoder: halves
            base, i = key[: -len("gate_up_proj.weight")], shape[0] // 2
            layout[base + "gate_proj.weight"] = Slot(part.param, (slice(0, i),), (i, *shape[1:]))
            layout[base + "up_proj.weight"] = Slot(part.param, (slice(i, 2 * i),), (i, *shape[1:]))
        else:
            layout[key] = Slot(part.param, (slice(part.start, part.start + part.shape[0]),), part.shape)
    return layout


def load_part(model: M, path: Path, prefix: str, *, dtype: torch.dtype, device: torch.device | str,
              named: bool = False) -> M:
    """Fill `model` (meta) from the keys of `path`'s safetensors that start with `prefix` (strict). `named`: the
    model's own parameter names already begin with `prefix` (else it is prepended)."""
    layout = {("" if named else prefix) + k: slot for k, slot in part_layout(model).items()}
    files = {k: f for k, f in weight_files(path).items() if k.startswith(prefix)}
    stored = stored_shapes(files)
    misshaped = [f"{k}: checkpoint {list(s)} vs model {list(layout[k].shape)}"
                 for k, s in sorted(stored.items()) if k in layout and tuple(s) != layout[k].shape]
    raise_mismatch(sorted(set(layout) - set(stored)), sorted(set(stored) - set(layout)), misshaped)
    for name, p in list(model.named_parameters()):
        set_tensor(model, name, torch.empty(p.shape, dtype=dtype, device=device))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    slot = layout[key]
                    params[slot.param][slot.index] = read_tensor(f, key, file)
    return model.eval()


def seeded_part(model: M, seed: int, *, gain: float = 0.5, dtype: torch.dtype = torch.float32) -> M:
    """Every parameter of `model` (meta) drawn from `seed` on the CPU in name order: matrices and tables
    ~ N(0, gain / sqrt(fan_in)), biases ~ N(0, 0.02), vectors (norms, scales, SnakeBeta) ~ 1 + N(0, 0.02)
    (`scale`/`gamma`: 0.1 of that)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        value = torch.randn(shape, generator=gen)
        leaf = name.rpartition(".")[2]
        if len(shape) >= 2:
            value *= gain / math.prod(shape[1:]) ** 0.5
        elif leaf == "bias":
            value *= 0.02
        elif leaf in ("alpha", "beta"):
            value *= 0.1
        else:
            value = value.mul_(0.02).add_(1.0) * (0.1 if leaf in ("scale", "gamma") else 1.0)
        set_tensor(model, name, value.to(dtype))
    return model.eval()
