"""Kept row tiles for the AuT encoder's batched forms: named grow-only buffers, `exact.linear`'s calls written
into them, and GELU into a kept output.

Owns: `KeptBuffers` (flat buffers by name, each view the first elements of its buffer in the asked shape; a
`tile` is whole `exact.TILE`-row tiles with the columns padded to `exact.ALIGN`, as `exact.linear` pads its copy;
`linear` runs `exact.linear`'s calls on a tile's whole tiles into a kept output) and `gelu_into` (`exact.gelu`
into a kept output). Exact on the CPU: every call has the shape and alignment `exact.linear` gives it, so
the same bits. Inference only (autograd off); one caller at a time per `KeptBuffers` (the caller's lock).
Must not know: models, clips, windows, requests.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from v2.models import exact


class KeptBuffers:
    """Grow-only flat buffers by name, zeroed when made. `keep`: the most elements a kept buffer may have (a
    view over it is a new zeroed tensor, not kept); None keeps every size (for a set made per call)."""

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self._flat: dict[str, Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], like: Tensor, zero: bool = False) -> Tensor:
        """A view [shape] of buffer `name` (like's dtype and device; `zero`: zeroed now)."""
        n = math.prod(shape)
        if self.keep is not None and n > self.keep:
            return torch.zeros(shape, dtype=like.dtype, device=like.device)
        buf = self._flat.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._flat[name] = torch.zeros(max(n, 1), dtype=like.dtype, device=like.device)
        view = buf[:n].view(shape)
        if zero:
            view.zero_()
        return view

    def tile(self, name: str, r: int, cols: int, like: Tensor) -> Tensor:
        """Buffer `name`'s rows [:r, :cols], of whole `exact.TILE`-row tiles with the columns padded to
        `exact.ALIGN` (never written: zero), as `exact.linear` pads its copy."""
        tiled = -(-r // exact.TILE) * exact.TILE
        return self.get(name, (tiled, cols + (-cols % exact.ALIGN)), like)[:r, :cols]

    def linear(self, name: str, rows: Tensor, module: exact.Linear, fresh: bool = False) -> Tensor:
        """`module` of rows [r, in] (a `tile` view) -> [r, out]: `exact.linear`'s calls on the tile's whole tiles,
        written into buffer `name` (`fresh`: a new tensor, for what outlives the call)."""
        if not exact.on(rows):
            return module(rows)
        r, w = rows.shape[0], module.weight
        tiles = rows.as_strided((-(-r // exact.TILE) * exact.TILE, rows.stride(0)), (rows.stride(0), 1))  # [tiled, in']
        shape = (tiles.shape[0], w.shape[0])
        out = rows.new_empty(shape) if fresh else self.get(name, shape, rows)
        exact.tiles_linear_into(tiles, r, exact.aligned_weight(w).t(), module.bias, out, exact.TILE)
        return out[:r]


def gelu_into(x: Tensor, out: Tensor) -> None:
    """`exact.gelu` of x written into out (x and out distinct): on the CPU `exact.gelu_into` (each operation into
    out, the same bits), elsewhere F.gelu's."""
    if not exact.on(x):
        out.copy_(exact.gelu(x))
        return
    exact.gelu_into(x, out)
