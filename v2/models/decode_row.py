"""The paged decode row on the CPU: `Qwen3Backbone.forward_cached` for one new position per row over a
`PagedKVCache`, in the exact forms' values (v2/models/exact.py) at a fraction of their operations.

A shared building block: every family whose AR backbone is the Qwen3 stack (a talker, a backbone) runs one
decode row per request per step through the paged pool, where per-call setup, per-layer operation count and
fresh large intermediates are the cost on a CPU. `forward_cached` takes this path (`fits`) for a call of one
position per row in float32 with autograd off over a `PagedKVCache` whose block size is a power of two; the
same values as the generic pass bit for bit, whatever the batch and the other rows' context lengths.

Per call (what it reads is kept, v2/models/decode_row_kept.py): the rows' RoPE rows, one `index_select` of the
kept table (`rotate_half_cos_sin` of positions 0 .. P - 1, the sin rows' first half negated), each row's write
place (one flat index per row and kv head), the keys-past-the-row mask, the gather index of the blocks that hold
any row's keys. Per layer, `Qwen3Layer`'s arithmetic in its order, every result written into a kept buffer
(`out=`; nothing made but the output): RMSNorm (`exact.rms_norm_into`: float32, `sqrt`; the mean as `mean` computes
it, the sum then its quotient by the count, here with eps added in the same addcdiv) written into the projection's
`exact.Tile`,
the fused projections as F.linear's mm per tile on the kept `aligned_weight` transposes (one tile shape and
alignment for every row, as `exact.linear`), q/k norms over q and k at once (one weight product: the two
weights stacked per head), rotate-half RoPE (the half swap one `index_select`, its sign in the sin row: the same
products), K/V written into the pool, then the attention as `exact.attention` computes it: the used blocks
gathered block-wise (`index_select`, no element-wise index; V beside a column of ones), scores as products
summed over D, -inf past each row's keys, the row max, exp, and one halving sum of the weighted values and,
through the ones column, the weights (`exact.halving_sum`'s pairs over the keys: the block-level halves, then
within a block; in place), the quotient written into the output projection's tile; the residual adds in place.
SiLU as `exact.silu`. Python numbers enter as kept 0-dim float32 operands (`exact.scalar`: the float32 each becomes
anyway). Two
equalities it leans on, as `frame_stack` does: `(-a) * b == a * (-b)` and `x + 0 == x` (keys past a row's own,
`w * 1`), exact up to the sign of a zero. tests/models/test_decode_row.py holds it to the generic pass.
Must not know: embeddings, heads, requests, which blocks a row holds (the caller's tables say).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from v2.models import exact
from v2.models.decode_row_kept import pool, scratch
from v2.models.kv_cache import Cache, PagedKVCache
from v2.models.row_layer import qk_norm_into

if TYPE_CHECKING:
    from v2.models.qwen3 import Qwen3Backbone


def fits(x: Tensor, cache: Cache) -> bool:
    """Whether the decode row serves a `forward_cached` call with rows x [B, T, H] over `cache`."""
    size = cache.block_size
    return (exact.on(x) and x.dim() == 3 and x.shape[1] == 1 and x.dtype == torch.float32
            and isinstance(cache, PagedKVCache) and cache.k.dtype == torch.float32 and size & (size - 1) == 0
            and not torch.is_grad_enabled())


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
    kept = scratch(model)
    if kept.versions.changed(model):
        kept.remake_layers(model)
    rope = kept.rope
    if rope is None or rope.shape[0] <= top:
        rope = kept.grow_rope(model, top, dev)
    rows, plan = kept.rows.get(b), kept.plans.get((b, blocks, size))
    if rows is None:
        rows = kept.rows_for(cfg, b, dev)
    if plan is None:
        plan = kept.plan(cfg, b, blocks, size, dev)
    layers, dummy = pool(cache, cfg.head_dim)
    torch.index_select(rope, 0, flat, out=rows.cs)  # [B, 2, D]: the rows' cos, -sin | sin
    # where each row's K/V go: row (block Hkv + head) S + offset of a layer's pool as [(N + 1) Hkv S, D]
    block = torch.where(valid, tables.gather(1, torch.div(pos, size, rounding_mode="floor")), dummy)  # [B, 1]
    place = torch.addcmul(pos % size, block, plan.block_rows) + plan.head_rows  # [B, Hkv] (integers: exact)
    index = tables[:, :blocks].reshape(-1)  # [B n]: the blocks gathered
    last = pos if top < context_len else pos.clamp(max=context_len - 1)  # each row's last key read
    drop = plan.keys > last.view(b, 1, 1, 1, 1)  # [B, n, 1, 1, S]: keys past the row's own
    q = plan.q
    scale, _norm = exact.scalar(1.0 / math.sqrt(cfg.head_dim)), exact.rms_norm_into
    src = x.reshape(b, width)  # [B, H]; the residual then lives in rows.h
    for w, (k_rows, v_rows, k_blocks, v_blocks) in zip(kept.layers, layers):
        norm_in, norm_post = w.norms
        _norm(src, w.norm_in, norm_in.eps, rows.sq, rows.ms, rows.normed)
        for a, o in rows.qkv_mm:
            torch.mm(a, w.qkv_t, out=o)  # [B, (Hq + 2 Hkv) D]
        qk, qk3 = rows.raw, rows.raw3
        if w.qk_w is not None:  # q_norm over the q heads, k_norm over the k heads: one RMS, one weight product
            qk_norm_into(w, qk3, hq, rows.qk_sq, rows.qk_ms, rows.normed3)
            qk, qk3 = rows.normed_qk, rows.normed3
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
        exact.silu_into(rows.gate, rows.silu)
        torch.mul(rows.silu, rows.up, out=rows.act)  # exact.silu(gate) * up
        for a, o in rows.down_mm:
            torch.mm(a, w.down_t, out=o)
        src = torch.add(src, rows.out, out=rows.h)
    return _norm(src, model.norm.weight, model.norm.eps, rows.sq, rows.ms).view(b, 1, width)
