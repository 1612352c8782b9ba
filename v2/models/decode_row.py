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
from v2.models.persist import persistent
from v2.models.rope import rotate_half_cos_sin

if TYPE_CHECKING:
    from v2.models.qwen3 import Qwen3Backbone


def fits(x: Tensor, cache: Cache) -> bool:
    """Whether the decode row serves a `forward_cached` call with rows x [B, T, H] over `cache`."""
    size = cache.block_size
    return (exact.on(x) and x.dim() == 3 and x.shape[1] == 1 and x.dtype == torch.float32
            and isinstance(cache, PagedKVCache) and cache.k.dtype == torch.float32 and size & (size - 1) == 0
            and not torch.is_grad_enabled())


class _Plan:
    """The buffers and views of calls of b rows reading `blocks` blocks of `size` keys (module docstring): the
    gathered K [B n, Hkv, S, D] and V with a column of ones [B n, Hkv, S, D + 1] (the weights' own sum rides
    along the weighted values'), the products, the weights, the queries, and each halving level's halves."""

    def __init__(self, cfg: BackboneConfig, b: int, blocks: int, size: int, flat: dict[str, Tensor]) -> None:
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        g = hq // hkv
        self.kg = _view(flat["k"], (b * blocks, hkv, size, d))
        ones = _view(flat["v"], (b * blocks, hkv, size, d + 1))
        ones[..., d] = 1.0
        self.vg = ones[..., :d]  # where the gather writes V
        self.q = _view(flat["q"], (b, hkv, g, d))
        self.qk = _view(flat["qk"], (b, hq + hkv, d))
        self.weights = _view(flat["w"], (b, blocks, hkv, g, size))
        scores = _view(flat["prod"], (b, blocks, hkv, g, size, d))  # q k products (then the acc reuses the buffer)
        acc = _view(flat["prod"], (b, blocks, hkv, g, size, d + 1))
        self.q_k = (self.q.view(b, 1, hkv, g, 1, d), self.kg.view(b, blocks, hkv, 1, size, d), scores)
        self.w_v = (self.weights[..., None], ones.view(b, blocks, hkv, 1, size, d + 1), acc)
        self.halves = _halves(acc, 1, blocks) + _halves(acc.narrow(1, 0, 1), 4, size)
        self.values, self.total = acc[:, 0, :, :, 0, :d], acc[:, 0, :, :, 0, d:]  # [B, Hkv, G, D], [B, Hkv, G, 1]
        self.keys = torch.arange(blocks * size, device=acc.device).view(1, blocks, 1, 1, size)


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


class _Scratch:
    """One thread's reused buffers for one backbone: projection tiles (grown with the batch), flat buffers (grown
    with batch x blocks) and the plans viewing them."""

    def __init__(self) -> None:
        self.rows = 0
        self.flat: dict[str, Tensor] = {}
        self.plans: dict[tuple[int, int, int], _Plan] = {}
        self.tiles: tuple[exact.Tile, exact.Tile, exact.Tile] | None = None

    @persistent
    def tiles_for(self, cfg: BackboneConfig, b: int, device: torch.device) -> tuple[exact.Tile, exact.Tile,
                                                                                     exact.Tile]:
        """(hidden, heads, mlp) tiles holding at least b rows."""
        if self.tiles is None or b > self.rows:
            f32 = torch.float32
            self.rows = -(-b // exact.TILE) * exact.TILE
            self.tiles = (exact.Tile(self.rows, cfg.hidden_size, f32, device),
                          exact.Tile(self.rows, cfg.num_heads * cfg.head_dim, f32, device),
                          exact.Tile(self.rows, cfg.intermediate_size, f32, device))
        return self.tiles

    @persistent
    def plan(self, cfg: BackboneConfig, b: int, blocks: int, size: int, device: torch.device) -> _Plan:
        key = (b, blocks, size)
        plan = self.plans.get(key)
        if plan is None:
            hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
            keys = b * blocks * hkv * size
            need = {"k": keys * d, "v": keys * (d + 1), "prod": keys * (hq // hkv) * (d + 1),
                    "w": keys * (hq // hkv), "q": b * hq * d, "qk": b * (hq + hkv) * d}
            if any(name not in self.flat or self.flat[name].numel() < n for name, n in need.items()):
                have = {name: flat.numel() for name, flat in self.flat.items()}
                self.flat = {name: torch.empty(max(n, have.get(name, 0)), dtype=torch.float32, device=device)
                             for name, n in need.items()}  # each as large as any call's so far
                self.plans.clear()  # their views are of the old buffers
            if len(self.plans) >= 64:
                self.plans.clear()
            plan = self.plans[key] = _Plan(cfg, b, blocks, size, self.flat)
        return plan


_SCRATCH: weakref.WeakKeyDictionary[Qwen3Backbone, threading.local] = weakref.WeakKeyDictionary()


def _scratch(model: Qwen3Backbone) -> _Scratch:
    local = _SCRATCH.get(model)
    if local is None:
        local = _SCRATCH[model] = threading.local()
    s: _Scratch | None = getattr(local, "scratch", None)
    if s is None:
        s = local.scratch = _Scratch()
    return s


def _rms(x: Tensor, weight: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """`qwen3.RMSNorm` of float32 x [..., H] (into `out` when given)."""
    h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return torch.mul(weight, h) if out is None else torch.mul(weight, h, out=out)


def forward(model: Qwen3Backbone, x: Tensor, cache: PagedKVCache, tables: Tensor, positions: Tensor, valid: Tensor,
            context_len: int) -> Tensor:
    """`forward_cached`'s value for x [B, 1, H] at positions [B, 1] (valid [B, 1]) through block tables [B, W]
    reading keys below context_len -> the final norm's output [B, 1, H]."""
    cfg, dev = model.cfg, x.device
    b, _, width = x.shape
    hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    inter, size, qk_width = cfg.intermediate_size, cache.block_size, (hq + hkv) * d
    pos = torch.where(valid, positions, 0)  # [B, 1]
    cos, sin = rotate_half_cos_sin(pos, d, cfg.rope_theta, model.rope_scaling)  # [B, 1, D] each
    sin[..., : d // 2].neg_()  # rotate-half's -x2 * sin as x2 * -sin (the same products)
    lengths = (pos[:, 0] + 1).clamp_(max=context_len)  # [B]: keys 0 .. length - 1 read
    blocks = min(tables.shape[1], -(-int(lengths.max()) // size))  # blocks any row reads
    scratch = _scratch(model)
    plan = scratch.plan(cfg, b, blocks, size, dev)
    t_hidden, t_heads, t_mlp = scratch.tiles_for(cfg, b, dev)
    normed, heads, act = t_hidden.rows(b), t_heads.rows(b).view(plan.q.shape), t_mlp.rows(b)
    # where each row's K/V go: row (block Hkv + head) S + offset of a layer's pool as [(N + 1) Hkv S, D]
    block = torch.where(valid[:, 0], tables.gather(1, torch.div(pos, size, rounding_mode="floor"))[:, 0],
                        cache.dummy_block)  # [B]
    place = ((block * hkv)[:, None] + torch.arange(hkv, device=dev)) * size + (pos % size)  # [B, Hkv]
    index = tables[:, :blocks].reshape(-1)  # [B n]: the blocks gathered
    drop = plan.keys >= lengths.view(b, 1, 1, 1, 1)  # [B, n, 1, 1, S]: keys past the row's own
    k_rows, v_rows = cache.k.view(cache.k.shape[0], -1, d), cache.v.view(cache.v.shape[0], -1, d)
    q, qk_out = plan.q, plan.qk
    scale = 1.0 / math.sqrt(d)
    h = x.reshape(b, width)  # [B, H]
    for i, layer in enumerate(model.layers):
        att, mlp, norm_in, norm_post = layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
        _rms(h, norm_in.weight, norm_in.eps, normed)
        qkv = t_hidden.linear(b, exact.aligned_weight(att.qkv_proj.weight))  # [B, (Hq + 2 Hkv) D]
        qk = qkv[:, :qk_width].view(b, hq + hkv, d)
        if att.qk_norm:  # q_norm over the q heads, k_norm over the k heads: one RMS (one eps), two weight products
            if att.q_norm.eps == att.k_norm.eps:
                r = qk / torch.sqrt(qk.pow(2).mean(-1, keepdim=True) + att.q_norm.eps)
                torch.mul(att.q_norm.weight, r[:, :hq], out=qk_out[:, :hq])
                torch.mul(att.k_norm.weight, r[:, hq:], out=qk_out[:, hq:])
            else:
                _rms(qk[:, :hq], att.q_norm.weight, att.q_norm.eps, qk_out[:, :hq])
                _rms(qk[:, hq:], att.k_norm.weight, att.k_norm.eps, qk_out[:, hq:])
            qk = qk_out
        swapped = qk.view(b, hq + hkv, 2, d // 2).flip(-2).view(b, hq + hkv, d)
        rot = qk * cos + swapped * sin  # [B, Hq + Hkv, D]
        torch.mul(rot[:, :hq].view(q.shape), scale, out=q)  # [B, Hkv, G, D]
        k_rows[i].index_put_((place,), rot[:, hq:])
        v_rows[i].index_put_((place,), qkv[:, qk_width:].view(b, hkv, d))
        torch.index_select(cache.k[i], 0, index, out=plan.kg)  # [B n, Hkv, S, D]
        torch.index_select(cache.v[i], 0, index, out=plan.vg)  # into [B n, Hkv, S, D + 1]
        scores = torch.mul(*plan.q_k[:2], out=plan.q_k[2]).sum(-1)  # [B, n, Hkv, G, S]
        scores.masked_fill_(drop, -math.inf)
        torch.exp(scores - scores.amax(dim=(1, 4), keepdim=True), out=plan.weights)  # 0 where masked
        torch.mul(*plan.w_v[:2], out=plan.w_v[2])  # [B, n, Hkv, G, S, D + 1]: weighted values, weights
        for lower, upper in plan.halves:
            lower.add_(upper)
        torch.div(plan.values, plan.total, out=heads)  # [B, Hkv, G, D]
        h = h + t_heads.linear(b, exact.aligned_weight(att.o_proj.weight))
        _rms(h, norm_post.weight, norm_post.eps, normed)
        gate_up = t_hidden.linear(b, exact.aligned_weight(mlp.gate_up_proj.weight))  # [B, 2 I]
        gate = gate_up[:, :inter]
        torch.mul(gate / (1.0 + torch.exp(-gate)), gate_up[:, inter:], out=act)  # exact.silu(gate) * up
        h = h + t_mlp.linear(b, exact.aligned_weight(mlp.down_proj.weight))
    return _rms(h, model.norm.weight, model.norm.eps).view(b, 1, width)

