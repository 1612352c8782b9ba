"""What the paged decode row (v2/models/decode_row.py) keeps from call to call, so a call makes almost nothing.

Owns: per backbone and thread (`scratch`), the projections' tiles and the row buffers with their views per batch
(`Rows`: each projection's (input tile, output) pairs as `exact.Tile.linear` runs them, the norms' steps, the q/k
rows normed, swapped and rotated, the RoPE rows), the attention's buffers and views per batch x blocks (`Plan`),
the layers' parameters as the row reads them (`row_layer.RowLayer`: `aligned_weight` transposes, q and k norm
weights stacked per head; remade when a parameter is written or replaced, `ParamVersions`), and the RoPE table
(`Scratch.rope`: `rotate_half_cos_sin` of positions 0 .. P - 1 at once, each element's cos / sin the same whatever the
tensor's shape: `rope.rotate_half_table`; grown to cover the calls' positions); per pool, its per-layer views (`pool`,
kept on the cache while it holds the same K and V tensors). All made as normal tensors (v2/models/persist.py).
Must not know: what a row computes with them (decode_row.py), requests, which blocks a row holds.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from v2.models import exact
from v2.models.config import BackboneConfig
from v2.models.kv_cache import PagedKVCache
from v2.models.persist import ParamVersions, persistent
from v2.models.rope import rotate_half_swap, rotate_half_table
from v2.models.row_layer import RowLayer

if TYPE_CHECKING:
    from v2.models.qwen3 import Qwen3Backbone

Tiles = tuple[exact.Tile, exact.Tile, exact.Tile]
Pairs = list[tuple[Tensor, Tensor]]


class Plan:
    """The buffers and views of calls of b rows reading `blocks` blocks of `size` keys (module docstring): the
    gathered K [B n, Hkv, S, D] and V with a column of ones [B n, Hkv, S, D + 1] (the weights' own sum rides
    along the weighted values'), the products, the weights (the scores first), their max, the queries, and each
    halving level's halves; the key offsets, the heads' first rows in a block and a block's rows."""

    def __init__(self, cfg: BackboneConfig, b: int, blocks: int, size: int, flat: dict[str, Tensor]) -> None:
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        g = hq // hkv
        self.kg = _view(flat["k"], (b * blocks, hkv, size, d))
        ones = _view(flat["v"], (b * blocks, hkv, size, d + 1))
        ones[..., d] = 1.0
        self.vg = ones[..., :d]  # where the gather writes V
        self.q = _view(flat["q"], (b, hkv, g, d))
        self.weights = _view(flat["w"], (b, blocks, hkv, g, size))
        self.top = _view(flat["mx"], (b, 1, hkv, g, 1))  # the row max
        scores = _view(flat["prod"], (b, blocks, hkv, g, size, d))  # q k products (then the acc reuses the buffer)
        acc = _view(flat["prod"], (b, blocks, hkv, g, size, d + 1))
        self.q_k = (self.q.view(b, 1, hkv, g, 1, d), self.kg.view(b, blocks, hkv, 1, size, d), scores)
        self.w_v = (self.weights[..., None], ones.view(b, blocks, hkv, 1, size, d + 1), acc)
        self.halves = _halves(acc, 1, blocks) + _halves(acc.narrow(1, 0, 1), 4, size)
        self.values, self.total = acc[:, 0, :, :, 0, :d], acc[:, 0, :, :, 0, d:]  # [B, Hkv, G, D], [B, Hkv, G, 1]
        self.keys = torch.arange(blocks * size, device=acc.device).view(1, blocks, 1, 1, size)
        self.head_rows = torch.arange(hkv, device=acc.device) * size  # [Hkv]
        self.block_rows = torch.tensor(hkv * size, device=acc.device)  # a block's rows in a layer's pool


def _view(flat: Tensor, shape: tuple[int, ...]) -> Tensor:
    return flat[: math.prod(shape)].view(shape)


def _halves(x: Tensor, dim: int, n: int) -> list[tuple[Tensor, Tensor]]:
    """`exact.halving_sum`'s additions over the first n entries of `dim` as (lower, upper) views: adding each
    upper into its lower in turn leaves the sum in entry 0."""
    out = []
    while n > 1:
        half = 1 << (n - 1).bit_length() - 1
        out.append((x.narrow(dim, 0, n - half), x.narrow(dim, half, n - half)))
        n = half
    return out


class Rows:
    """The views of calls of b rows into the scratch's row buffers: each projection's (input tile, output) pairs,
    one per tile of rows that F.linear's call runs on (`exact.Tile.linear`); the residual; a norm's square (then
    quotient) and mean; the q/k rows, normed, half-swapped and rotated; the RoPE rows [B, 2, D] (cos; sin with
    its first half negated)."""

    def __init__(self, cfg: BackboneConfig, b: int, tiles: Tiles, bufs: dict[str, Tensor]) -> None:
        hq, hkv, d, inter = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        heads, t_hidden, t_heads, t_mlp = hq + hkv, *tiles
        spans = range(0, b, exact.TILE)

        def mm(tile: exact.Tile, out: Tensor) -> Pairs:
            return [(tile.buf[s: s + exact.TILE], out[s: s + exact.TILE]) for s in spans]

        self.qkv_mm, self.gate_up_mm = mm(t_hidden, bufs["qkv"]), mm(t_hidden, bufs["gate_up"])
        self.o_mm, self.down_mm = mm(t_heads, bufs["out"]), mm(t_mlp, bufs["out"])
        self.normed, self.act, self.out, self.h = t_hidden.rows(b), t_mlp.rows(b), bufs["out"][:b], bufs["h"][:b]
        self.heads = t_heads.rows(b).view(b, hkv, hq // hkv, d)
        self.sq, self.ms = bufs["sq"][:b], bufs["ms"][:b]  # [B, H], [B, 1]
        qkv, gate_up = bufs["qkv"][:b], bufs["gate_up"][:b]
        self.raw = qkv[:, : heads * d]  # [B, (Hq + Hkv) D]: q and k as projected
        self.v = qkv[:, heads * d:].view(b, hkv, d)
        self.gate, self.up, self.silu = gate_up[:, :inter], gate_up[:, inter:], bufs["silu"][:b]
        self.normed_qk = bufs["qk"][:b]  # [B, (Hq + Hkv) D]
        self.raw3, self.normed3 = self.raw.view(b, heads, d), self.normed_qk.view(b, heads, d)
        self.swap = rotate_half_swap(heads, d, qkv.device)  # a head's halves swapped: one index_select
        self.qk_sq, self.qk_ms = bufs["qk_sq"][:b].view(b, heads, d), bufs["qk_ms"][:b].view(b, heads, 1)
        self.swapped, self.rot = bufs["swapped"][:b].view(b, heads, d), bufs["rot"][:b].view(b, heads, d)
        self.swapped2 = self.swapped.view(b, heads * d)
        self.q_rot, self.k_rot = self.rot[:, :hq].view(b, hkv, hq // hkv, d), self.rot[:, hq:]
        self.cs = bufs["cs"][:b]  # [B, 2, D]
        self.cos, self.sin = self.cs[:, :1], self.cs[:, 1:]  # [B, 1, D] each


class Scratch:
    """One thread's reused buffers for one backbone: projection tiles and row buffers (grown with the batch),
    flat buffers (grown with batch x blocks), the plans and rows viewing them, the layers' parameters (remade
    when one changes) and the RoPE table [P, 2, D] (`rotate_half_cos_sin` of positions 0 .. P - 1, the sin
    rows' first half negated; grown to cover the calls' positions)."""

    def __init__(self) -> None:
        self.n_rows = 0
        self.flat: dict[str, Tensor] = {}
        self.plans: dict[tuple[int, int, int], Plan] = {}
        self.rows: dict[int, Rows] = {}
        self.tiles: Tiles | None = None
        self.bufs: dict[str, Tensor] = {}
        self.versions = ParamVersions()
        self.layers: list[RowLayer] = []
        self.rope: Tensor | None = None

    @persistent
    def rows_for(self, cfg: BackboneConfig, b: int, device: torch.device) -> Rows:
        if b > self.n_rows:
            r, f32 = -(-b // exact.TILE) * exact.TILE, torch.float32
            hq, hkv, d, width, inter = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size,
                                        cfg.intermediate_size)
            self.tiles = (exact.Tile(r, width, f32, device), exact.Tile(r, hq * d, f32, device),
                          exact.Tile(r, inter, f32, device))
            shapes = {"qkv": (r, (hq + 2 * hkv) * d), "gate_up": (r, 2 * inter), "out": (r, width), "h": (r, width),
                      "sq": (r, width), "ms": (r, 1), "silu": (r, inter), "qk": (r, (hq + hkv) * d),
                      "qk_sq": (r, (hq + hkv) * d), "qk_ms": (r, hq + hkv), "swapped": (r, (hq + hkv) * d),
                      "rot": (r, (hq + hkv) * d), "cs": (r, 2, d)}
            self.bufs = {name: torch.empty(shape, dtype=f32, device=device) for name, shape in shapes.items()}
            self.n_rows, self.rows = r, {}
        rows = self.rows.get(b)
        if rows is None:
            assert self.tiles is not None
            rows = self.rows[b] = Rows(cfg, b, self.tiles, self.bufs)
        return rows

    @persistent
    def plan(self, cfg: BackboneConfig, b: int, blocks: int, size: int, device: torch.device) -> Plan:
        key = (b, blocks, size)
        plan = self.plans.get(key)
        if plan is None:
            hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
            keys = b * blocks * hkv * size
            need = {"k": keys * d, "v": keys * (d + 1), "prod": keys * (hq // hkv) * (d + 1),
                    "w": keys * (hq // hkv), "mx": b * hq, "q": b * hq * d}
            if any(name not in self.flat or self.flat[name].numel() < n for name, n in need.items()):
                have = {name: flat.numel() for name, flat in self.flat.items()}
                self.flat = {name: torch.empty(max(n, have.get(name, 0)), dtype=torch.float32, device=device)
                             for name, n in need.items()}  # each as large as any call's so far
                self.plans.clear()  # their views are of the old buffers
            if len(self.plans) >= 64:
                self.plans.clear()
            plan = self.plans[key] = Plan(cfg, b, blocks, size, self.flat)
        return plan

    @persistent
    def remake_layers(self, model: Qwen3Backbone) -> None:
        cfg = model.cfg
        self.layers = [RowLayer(layer, cfg.num_heads, cfg.num_kv_heads) for layer in model.layers]

    @persistent
    def grow_rope(self, model: Qwen3Backbone, top: int, device: torch.device) -> Tensor:
        """The table covering positions 0 .. top (a power of two of them, at least 256)."""
        n = max(256, 1 << top.bit_length())
        self.rope = rotate_half_table(n, model.cfg.head_dim, model.cfg.rope_theta, model.rope_scaling, device)
        return self.rope  # [P, 2, D]


_SCRATCH: weakref.WeakKeyDictionary[Qwen3Backbone, threading.local] = weakref.WeakKeyDictionary()


def scratch(model: Qwen3Backbone) -> Scratch:
    """The model's `Scratch` in this thread."""
    local = _SCRATCH.get(model)
    if local is None:
        local = _SCRATCH[model] = threading.local()
    s: Scratch | None = getattr(local, "scratch", None)
    if s is None:
        s = local.scratch = Scratch()
    return s


PoolLayers = list[tuple[Tensor, Tensor, Tensor, Tensor]]


def pool(cache: PagedKVCache, d: int) -> tuple[PoolLayers, Tensor]:
    """Per layer the pool's rows [(N + 1) Hkv S, D] (K, V: where a row's K/V are written) and blocks (K, V: what
    is gathered), and the dummy block's number; kept on the cache while it holds the same K and V tensors."""
    kept: tuple[Tensor, Tensor, PoolLayers, Tensor] | None = getattr(cache, "_decode_row_pool", None)
    if kept is None or kept[0] is not cache.k or kept[1] is not cache.v:
        kept = persistent(_pool_views)(cache, d)
        setattr(cache, "_decode_row_pool", kept)  # freed with the cache
    return kept[2], kept[3]


def _pool_views(cache: PagedKVCache, d: int) -> tuple[Tensor, Tensor, PoolLayers, Tensor]:
    """(K, V, `pool`'s per-layer views, the dummy block's number as a 0-dim tensor)."""
    k_rows, v_rows = cache.k.view(cache.k.shape[0], -1, d), cache.v.view(cache.v.shape[0], -1, d)
    layers = [(k_rows[i], v_rows[i], cache.k[i], cache.v[i]) for i in range(cache.k.shape[0])]
    return cache.k, cache.v, layers, torch.tensor(cache.dummy_block, device=cache.k.device)
