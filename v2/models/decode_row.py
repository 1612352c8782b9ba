"""The paged decode row on the CPU: `Qwen3Backbone.forward_cached` for one new position per row over a
`PagedKVCache`, in the exact forms' values (v2/models/exact.py) at a fraction of their operations.

A shared building block: every family whose AR backbone is the Qwen3 stack (a talker, a backbone) runs one
decode row per request per step through the paged pool, where per-call setup, per-layer operation count and
fresh large intermediates are the cost on a CPU. `forward_cached` takes this path (`fits`) for a call of one
position per row in float32 with autograd off over a `PagedKVCache` whose block size is a power of two; the
same values as the generic pass bit for bit, whatever the batch and the other rows' context lengths.

Per call: RoPE rows (`rotate_half_cos_sin` of the rows' positions, as the generic pass; the sin row's first half
negated), each row's write place (one flat index per row and kv head), its key count and the keys-past-the-row
mask, the gather index of the blocks that hold any row's keys; the buffers and their views (`_Plan`, per rows x
blocks, kept per backbone and thread). Per layer, `Qwen3Layer`'s arithmetic in its order: RMSNorm (float32,
`sqrt`) written into the projection's `exact.Tile` (`out=`), the fused projections through `exact.Tile.linear`
(one tile shape and alignment for every row, as `exact.linear`), q/k norms over q and k at once (two weight
products), rotate-half RoPE (the half swap one `flip`, its sign in the sin row: the same products), K/V written
into the pool, then the attention as `exact.attention` computes it: the used blocks gathered block-wise
(`index_select`, no element-wise index; V beside a column of ones), scores as products summed over D, -inf past
each row's keys, the row max, exp, and one halving sum of the weighted values and, through the ones column, the
weights (`exact.halving_sum`'s pairs over the keys: the block-level halves, then within a block; in place), the
quotient written into the output projection's tile. SiLU as `exact.silu`. Two equalities it leans on, as
`frame_stack` does: `(-a) * b == a * (-b)` and `x + 0 == x` (keys past a row's own, `w * 1`), exact up to the
sign of a zero. tests/models/test_decode_row.py holds it to the generic pass.
Must not know: embeddings, heads, requests, which blocks a row holds (the caller's tables say).
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
from v2.models.kv_cache import Cache, PagedKVCache
from v2.models.persist import ParamVersions, persistent
from v2.models.rope import rotate_half_cos_sin

if TYPE_CHECKING:
    from v2.models.qwen3 import Qwen3Backbone, Qwen3Layer

Tiles = tuple[exact.Tile, exact.Tile, exact.Tile]
Pairs = list[tuple[Tensor, Tensor]]


def fits(x: Tensor, cache: Cache) -> bool:
    """Whether the decode row serves a `forward_cached` call with rows x [B, T, H] over `cache`."""
    size = cache.block_size
    return (exact.on(x) and x.dim() == 3 and x.shape[1] == 1 and x.dtype == torch.float32
            and isinstance(cache, PagedKVCache) and cache.k.dtype == torch.float32 and size & (size - 1) == 0
            and not torch.is_grad_enabled())


class _Plan:
    """The buffers and views of calls of b rows reading `blocks` blocks of `size` keys (module docstring): the
    gathered K [B n, Hkv, S, D] and V with a column of ones [B n, Hkv, S, D + 1] (the weights' own sum rides
    along the weighted values'), the products, the weights (the scores first), their max, the queries, and each
    halving level's halves; the key offsets and the heads' first rows in a block."""

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


class _Rows:
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
        half = torch.arange(d, device=qkv.device).roll(d // 2)  # a head's halves swapped: one index_select
        self.swap = (torch.arange(heads, device=qkv.device)[:, None] * d + half).reshape(-1)
        self.qk_sq, self.qk_ms = bufs["qk_sq"][:b].view(b, heads, d), bufs["qk_ms"][:b].view(b, heads, 1)
        self.swapped, self.rot = bufs["swapped"][:b].view(b, heads, d), bufs["rot"][:b].view(b, heads, d)
        self.swapped2 = self.swapped.view(b, heads * d)
        self.q_rot, self.k_rot = self.rot[:, :hq].view(b, hkv, hq // hkv, d), self.rot[:, hq:]
        self.cs = bufs["cs"][:b]  # [B, 2, D]
        self.cos, self.sin = self.cs[:, :1], self.cs[:, 1:]  # [B, 1, D] each


class _Layer:
    """One layer's parameters as the row reads them: the projections' `aligned_weight` transposes ([in', out],
    the operand F.linear's mm takes), the norms' weights, and the q and k norm weights stacked per head
    [Hq + Hkv, D] (None without q/k norms); the norms' eps are read at each call (`eps`)."""

    def __init__(self, layer: Qwen3Layer, hq: int, hkv: int) -> None:
        att, mlp = layer.self_attn, layer.mlp
        self.qkv_t, self.o_t = exact.aligned_weight(att.qkv_proj.weight).t(), exact.aligned_weight(att.o_proj.weight).t()
        self.gate_up_t = exact.aligned_weight(mlp.gate_up_proj.weight).t()
        self.down_t = exact.aligned_weight(mlp.down_proj.weight).t()
        self.norm_in, self.norm_post = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        self.norms = (layer.input_layernorm, layer.post_attention_layernorm)
        self.qk_w: Tensor | None = None
        if att.qk_norm:
            self.qk_norms = (att.q_norm, att.k_norm)
            self.qk_w = torch.cat([att.q_norm.weight.expand(hq, -1), att.k_norm.weight.expand(hkv, -1)])


class _Scratch:
    """One thread's reused buffers for one backbone: projection tiles and row buffers (grown with the batch),
    flat buffers (grown with batch x blocks), the plans and rows viewing them, the layers' parameters (remade
    when one changes) and the RoPE table [P, 2, D] (`rotate_half_cos_sin` of positions 0 .. P - 1, the sin
    rows' first half negated; grown to cover the calls' positions)."""

    def __init__(self) -> None:
        self.n_rows = 0
        self.flat: dict[str, Tensor] = {}
        self.plans: dict[tuple[int, int, int], _Plan] = {}
        self.rows: dict[int, _Rows] = {}
        self.tiles: Tiles | None = None
        self.bufs: dict[str, Tensor] = {}
        self.versions = ParamVersions()
        self.layers: list[_Layer] = []
        self.rope: Tensor | None = None

    @persistent
    def rows_for(self, cfg: BackboneConfig, b: int, device: torch.device) -> _Rows:
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
            rows = self.rows[b] = _Rows(cfg, b, self.tiles, self.bufs)
        return rows

    @persistent
    def plan(self, cfg: BackboneConfig, b: int, blocks: int, size: int, device: torch.device) -> _Plan:
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
            plan = self.plans[key] = _Plan(cfg, b, blocks, size, self.flat)
        return plan

    @persistent
    def remake_layers(self, model: Qwen3Backbone) -> None:
        cfg = model.cfg
        self.layers = [_Layer(layer, cfg.num_heads, cfg.num_kv_heads) for layer in model.layers]

    @persistent
    def grow_rope(self, model: Qwen3Backbone, top: int, device: torch.device) -> Tensor:
        """The table covering positions 0 .. top (a power of two of them, at least 256)."""
        d, n = model.cfg.head_dim, max(256, 1 << top.bit_length())
        cos, sin = rotate_half_cos_sin(torch.arange(n, device=device)[:, None], d, model.cfg.rope_theta,
                                       model.rope_scaling)  # [P, 1, D] each: each element as any call's
        sin[..., : d // 2].neg_()  # rotate-half's -x2 * sin as x2 * -sin (the same products)
        self.rope = torch.cat([cos, sin], 1)  # [P, 2, D]
        return self.rope


_SCRATCH: weakref.WeakKeyDictionary[Qwen3Backbone, threading.local] = weakref.WeakKeyDictionary()


def _scratch(model: Qwen3Backbone) -> _Scratch:
    local = _SCRATCH.get(model)
    if local is None:
        local = _SCRATCH[model] = threading.local()
    s: _Scratch | None = getattr(local, "scratch", None)
    if s is None:
        s = local.scratch = _Scratch()
    return s


PoolLayers = list[tuple[Tensor, Tensor, Tensor, Tensor]]


def _pool(cache: PagedKVCache, d: int) -> tuple[PoolLayers, Tensor]:
    """Per layer the pool's rows [(N + 1) Hkv S, D] (K, V: where a row's K/V are written) and blocks (K, V: what
    is gathered), and the dummy block's number; kept on the cache while it holds the same K and V tensors."""
    kept: tuple[Tensor, Tensor, PoolLayers, Tensor] | None = getattr(cache, "_decode_row_pool", None)
    if kept is None or kept[0] is not cache.k or kept[1] is not cache.v:
        kept = persistent(_pool_views)(cache, d)
        setattr(cache, "_decode_row_pool", kept)  # freed with the cache
    return kept[2], kept[3]


def _pool_views(cache: PagedKVCache, d: int) -> tuple[Tensor, Tensor, PoolLayers, Tensor]:
    k_rows, v_rows = cache.k.view(cache.k.shape[0], -1, d), cache.v.view(cache.v.shape[0], -1, d)
    layers = [(k_rows[i], v_rows[i], cache.k[i], cache.v[i]) for i in range(cache.k.shape[0])]
    return cache.k, cache.v, layers, torch.tensor(cache.dummy_block, device=cache.k.device)


_SCALARS: dict[float, Tensor] = {}


def _scalar(value: float) -> Tensor:
    """value as a 0-dim float32 operand, made once: the float32 a Python number becomes in a float32 operation,
    without the wrapped number and its conversion that each such operation makes."""
    t = _SCALARS.get(value)
    if t is None:
        t = _SCALARS[value] = persistent(torch.tensor)(value, dtype=torch.float32)
    return t


def _norm(x: Tensor, weight: Tensor, eps: float, sq: Tensor, ms: Tensor, out: Tensor | None = None) -> Tensor:
    """`qwen3.RMSNorm` of float32 x [..., H] (into out when given), its steps into sq (the square, then the
    quotient) and ms; the mean as `mean` computes it on a CPU (the sum, then divided by the count), eps added
    in the same operation (addcdiv: eps + 1 * (sum / count), the same quotient and sum)."""
    torch.pow(x, 2, out=sq)
    torch.sum(sq, -1, keepdim=True, out=ms)
    torch.addcdiv(_scalar(eps), ms, _scalar(float(x.shape[-1])), out=ms).sqrt_()
    torch.div(x, ms, out=sq)
    return torch.mul(weight, sq) if out is None else torch.mul(weight, sq, out=out)


def forward(model: Qwen3Backbone, x: Tensor, cache: PagedKVCache, tables: Tensor, positions: Tensor, valid: Tensor,
            context_len: int) -> Tensor:
    """`forward_cached`'s value for x [B, 1, H] at positions [B, 1] (valid [B, 1]) through block tables [B, W]
    reading keys below context_len -> the final norm's output [B, 1, H]."""
    cfg, dev = model.cfg, x.device
    b, _, width = x.shape
    hq, size = cfg.num_heads, cache.block_size
    pos = positions * valid  # [B, 1]: 0 on padding rows
    flat = pos.view(b)
    top = int(flat.max())
    blocks = min(tables.shape[1], -(-min(top + 1, context_len) // size))  # blocks any row reads
    scratch = _scratch(model)
    if scratch.versions.changed(model):
        scratch.remake_layers(model)
    rope = scratch.rope
    if rope is None or rope.shape[0] <= top:
        rope = scratch.grow_rope(model, top, dev)
    rows, plan = scratch.rows.get(b), scratch.plans.get((b, blocks, size))
    if rows is None:
        rows = scratch.rows_for(cfg, b, dev)
    if plan is None:
        plan = scratch.plan(cfg, b, blocks, size, dev)
    pool, dummy = _pool(cache, cfg.head_dim)
    torch.index_select(rope, 0, flat, out=rows.cs)  # [B, 2, D]: the rows' cos, -sin | sin
    # where each row's K/V go: row (block Hkv + head) S + offset of a layer's pool as [(N + 1) Hkv S, D]
    block = torch.where(valid, tables.gather(1, torch.div(pos, size, rounding_mode="floor")), dummy)  # [B, 1]
    place = (block * (cfg.num_kv_heads * size) + pos % size) + plan.head_rows  # [B, Hkv]
    index = tables[:, :blocks].reshape(-1)  # [B n]: the blocks gathered
    last = pos if top < context_len else pos.clamp(max=context_len - 1)  # each row's last key read
    drop = plan.keys > last.view(b, 1, 1, 1, 1)  # [B, n, 1, 1, S]: keys past the row's own
    q = plan.q
    scale, one = _scalar(1.0 / math.sqrt(cfg.head_dim)), _scalar(1.0)
    src = x.reshape(b, width)  # [B, H]; the residual then lives in rows.h
    for w, (k_rows, v_rows, k_blocks, v_blocks) in zip(scratch.layers, pool):
        norm_in, norm_post = w.norms
        _norm(src, w.norm_in, norm_in.eps, rows.sq, rows.ms, rows.normed)
        for a, o in rows.qkv_mm:
            torch.mm(a, w.qkv_t, out=o)  # [B, (Hq + 2 Hkv) D]
        qk, qk3 = rows.raw, rows.raw3
        if w.qk_w is not None:  # q_norm over the q heads, k_norm over the k heads: one RMS, one weight product
            normed, sq, ms, (qn, kn) = rows.normed3, rows.qk_sq, rows.qk_ms, w.qk_norms
            if qn.eps == kn.eps:
                _norm(qk3, w.qk_w, qn.eps, sq, ms, normed)
            else:
                _norm(qk3[:, :hq], qn.weight, qn.eps, sq[:, :hq], ms[:, :hq], normed[:, :hq])
                _norm(qk3[:, hq:], kn.weight, kn.eps, sq[:, hq:], ms[:, hq:], normed[:, hq:])
            qk, qk3 = rows.normed_qk, normed
        torch.index_select(qk, 1, rows.swap, out=rows.swapped2)  # the halves swapped
        torch.mul(qk3, rows.cos, out=rows.rot)
        torch.mul(rows.swapped, rows.sin, out=rows.swapped)
        torch.add(rows.rot, rows.swapped, out=rows.rot)  # [B, Hq + Hkv, D]
        torch.mul(rows.q_rot, scale, out=q)  # [B, Hkv, G, D]
        k_rows.index_put_((place,), rows.k_rot)
        v_rows.index_put_((place,), rows.v)
        torch.index_select(k_blocks, 0, index, out=plan.kg)  # [B n, Hkv, S, D]
        torch.index_select(v_blocks, 0, index, out=plan.vg)  # into [B n, Hkv, S, D + 1]
        scores = plan.weights  # [B, n, Hkv, G, S]
        torch.sum(torch.mul(*plan.q_k[:2], out=plan.q_k[2]), -1, out=scores)
        scores.masked_fill_(drop, -math.inf)
        torch.amax(scores, dim=(1, 4), keepdim=True, out=plan.top)
        torch.exp(torch.sub(scores, plan.top, out=scores), out=scores)  # the weights: 0 where masked
        torch.mul(*plan.w_v[:2], out=plan.w_v[2])  # [B, n, Hkv, G, S, D + 1]: weighted values, weights
        for lower, upper in plan.halves:
            lower.add_(upper)
        torch.div(plan.values, plan.total, out=rows.heads)  # [B, Hkv, G, D]
        for a, o in rows.o_mm:
            torch.mm(a, w.o_t, out=o)
        src = torch.add(src, rows.out, out=rows.h)
        _norm(src, w.norm_post, norm_post.eps, rows.sq, rows.ms, rows.normed)
        for a, o in rows.gate_up_mm:
            torch.mm(a, w.gate_up_t, out=o)  # [B, 2 I]
        silu = rows.silu
        torch.exp(torch.neg(rows.gate, out=silu), out=silu).add_(one)
        torch.mul(torch.div(rows.gate, silu, out=silu), rows.up, out=rows.act)  # exact.silu(gate) * up
        for a, o in rows.down_mm:
            torch.mm(a, w.down_t, out=o)
        src = torch.add(src, rows.out, out=rows.h)
    return _norm(src, model.norm.weight, model.norm.eps, rows.sq, rows.ms).view(b, 1, width)
