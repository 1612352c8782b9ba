"""Seeded values for the Qwen3-Omni parts at tiny widths (embedded cards: no files), drawn so that a forward
pass stays finite: `v2.models.weights.fill_seeded`'s matrices and vectors, then every tensor it has no rule
for (convolutions, transposed convolutions, stacked experts) ~ N(0, gain / fan_in), SnakeBeta's log-scale
`alpha` / `beta` ~ N(0, 0.1), and layer scales (`scale`, `gamma`) ~ 0.1.

Owns: `fill_seeded_part`. The same seed gives the same values on every machine (drawn on the CPU).
Must not know: cards, requests, the runtime.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from v2.models.weights import fill_seeded, set_tensor

LOG_SCALE = ("alpha", "beta")  # SnakeBeta: exp(alpha), exp(beta)
LAYER_SCALE = ("scale", "gamma")


def _fan_in(module: nn.Module, shape: tuple[int, ...]) -> int:
    if isinstance(module, nn.ConvTranspose1d):  # weight [in, out / groups, k]: each output sums in * k / stride
        return max(1, shape[0] * shape[2] // module.stride[0])
    if len(shape) >= 4 or isinstance(module, nn.Conv1d) or "conv" in type(module).__name__.lower():
        return math.prod(shape[1:])  # weight [out, in / groups, *kernel]
    return shape[-1]  # stacked matrices [experts, out, in]


def fill_seeded_part(model: nn.Module, seed: int, *, gain: float) -> None:
    """`fill_seeded(model, seed, gain)`, then the tensors above redrawn from a second generator of `seed`."""
    fill_seeded(model, seed, gain=gain)
    gen = torch.Generator().manual_seed(seed + 7919)
    for name, p in sorted(model.named_parameters()):
        path, _, leaf = name.rpartition(".")
        shape = tuple(p.shape)
        if leaf in LOG_SCALE and len(shape) == 1:
            value = torch.randn(shape, generator=gen) * 0.1
        elif leaf in LAYER_SCALE and len(shape) == 1:
            value = torch.full(shape, 0.1)
        elif len(shape) >= 3:
            fan_in = _fan_in(model.get_submodule(path) if path else model, shape)
            value = torch.randn(shape, generator=gen) * (gain / fan_in ** 0.5)
        else:
            continue
        set_tensor(model, name, value.to(p.dtype))
