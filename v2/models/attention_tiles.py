"""The CPU form of `exact.attention` in fewer operations: the same bits, less work.

Owns: `attention` (what `exact.attention` runs on the CPU) and `attention_reference` (the form it replaced, kept
as the definition the fast form is held to, and as the fallback for the rows it cannot vouch for).

Why the same bits. Per query row both forms compute the same values by the same operations:
- scores: products q * k summed over D by `sum(-1)` over a contiguous last dim of D (torch's inner-dim sum runs
  one fixed code path per row: the other rows, and the layout of the dims before D, do not enter it);
- the mask as -inf, the row max over keys (order-free), exp of the difference (the same bits in a call's body
  and tail, designs/model.md);
- the weighted values and the weights summed over keys by halving levels: here the values carry a column of
  ones (w * 1 == w), so one halving over [.., keys, D + 1] gives both sums, its levels added in place; the
  mask's negation and each query's last key are made once a call, not per block.
The only difference is a block's key count: a block here may hold other queries than the reference's, so it may
read keys past a row's own block's last key. They are masked for that row (weight +0), their products are zeros,
and an exact zero added to a nonzero partial sum leaves it unchanged (a halving over 2P whose upper P entries are
zeros is the halving over P); so a row's results are the same, except where one is an exact zero (its sign can
differ: -0 + +0 == +0) or not finite (a masked key's inf or NaN value times 0 is NaN; a row with every key masked
is NaN here through -inf - -inf, 0 / 0 there). Those rows (rare: checked on the output) are recomputed by the
reference form's own block, so the result is the reference's for every input.

Must not know: models, heads' meaning, callers. Float tensors on the CPU only (`exact.attention` sends others
to SDPA).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from v2.models import exact

BLOCK_ELEMENTS = 1 << 18  # elements of one block's [.., queries, keys, D + 1] weighted values
REFERENCE_BLOCK_ELEMENTS = 1 << 18  # elements of one block's [.., queries, keys, D] products in the reference form


def _heads_mask(mask: Tensor | None, b: int, hkv: int, g: int, t: int, c: int) -> Tensor | None:
    """mask broadcastable to [B, Hq, T, C] as a view broadcastable to [B, Hkv, G, T, C] (no copy)."""
    if mask is None:
        return None
    mask = mask.expand(*mask.shape[:-2], t, c)
    return mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(mask.shape[0], hkv, g, t, c)


def _grouped(q: Tensor, k: Tensor, mask: Tensor | None, scale: float | None) -> tuple[Tensor, Tensor | None]:
    """q [B, Hq, T, D] scaled and grouped by its key head: [B, Hkv, G, T, D]; the mask as `_heads_mask`."""
    b, hq, t, d = q.shape
    hkv, c = k.shape[1], k.shape[2]
    g = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qg = (q * scale).view(b, hkv, g, t, d)  # [B, Hkv, G, T, D]
    return qg, _heads_mask(mask, b, hkv, g, t, c)


def _keep(mask: Tensor | None, causal: bool, s: int, e: int, t: int, c: int, device: torch.device) -> Tensor | None:
    """Which keys queries s .. e - 1 attend: [q, C] (causal alone) or broadcastable to [B, Hkv, G, q, C]."""
    keep = None
    if causal:
        last = c - t + torch.arange(s, e, device=device)  # [q]: each query's last key
        keep = torch.arange(c, device=device)[None, :] <= last[:, None]  # [q, C]
    if mask is not None:
        part = mask[:, :, :, s:e]
        keep = part if keep is None else part & keep
    return keep


def _keys_used(keep: Tensor, c: int) -> int:
    """1 + the last key index that any query of `keep` [..., C] attends (at least 1)."""
    seen = keep.reshape(-1, c).any(0).nonzero()
    return int(seen[-1]) + 1 if seen.numel() else 1


def _reference_block(qg: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, s: int, e: int) -> Tensor:
    """The reference form's block of queries s .. e - 1: qg [B, Hkv, G, T, D] scaled, k, v [B, Hkv, C, D], mask
    as `_heads_mask`. Returns [B, Hkv, G, q, D]."""
    t, c = qg.shape[3], k.shape[2]
    kg, vg = k[:, :, None, None], v[:, :, None, None]  # [B, Hkv, 1, 1, C, D]
    keep = _keep(mask, causal, s, e, t, c, qg.device)
    # keys past the last one any query of the block sees add only zeros to its sums: leave them out
    used = c if keep is None else _keys_used(keep, c)
    # over D (the head size: fixed per call site) a row-wise sum runs the same code for every row
    scores = (qg[:, :, :, s:e, None, :] * kg[..., :used, :]).sum(-1)  # [B, Hkv, G, q, used]
    if keep is not None:
        scores = scores.masked_fill(~keep[..., :used], -math.inf)
    top = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - top.masked_fill(top == -math.inf, 0.0))  # [B, Hkv, G, q, used]; 0 where masked
    total = exact.halving_sum(weights, -1)[..., None]  # [B, Hkv, G, q, 1]
    return exact.halving_sum(weights[..., None] * vg[..., :used, :], -2) / total  # [B, Hkv, G, q, D]


def _reference_block_size(b: int, hq: int, t: int, c: int, d: int) -> int:
    return max(1, min(t, REFERENCE_BLOCK_ELEMENTS // max(1, b * hq * c * d)))


def attention_reference(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, causal: bool = False,
                        scale: float | None = None) -> Tensor:
    """The elementwise CPU attention in blocks of `REFERENCE_BLOCK_ELEMENTS` products (arguments as `attention`)."""
    qg, heads_mask = _grouped(q, k, mask, scale)
    b, hkv, g, t, d = qg.shape
    hq, c = hkv * g, k.shape[2]
    out = q.new_empty(b, hkv, g, t, d)
    block = _reference_block_size(b, hq, t, c, d)
    for s in range(0, t, block):
        e = min(t, s + block)
        out[:, :, :, s:e] = _reference_block(qg, k, v, heads_mask, causal, s, e)
    return out.view(b, hq, t, d)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, causal: bool = False,
              scale: float | None = None) -> Tensor:
    """`attention_reference`'s bits, faster: q [B, Hq, T, D]; k, v [B, Hkv, C, D] (Hq a multiple of Hkv); mask
    broadcastable to [B, Hq, T, C], True = attend; causal: query t sees keys 0 .. C - T + t. Returns
    [B, Hq, T, D]. A differentiable call (grad on, an input that requires it) runs `attention_reference` (its
    operations are out of place, so autograd records them), and so does one whose values are of a wider dtype than
    the scores (the weights' total would be summed in the values' dtype here, in the scores' there)."""
    if q.shape[2] == 0:
        return q.new_empty(q.shape)
    weights_dtype = torch.promote_types(q.dtype, k.dtype)
    if (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)) \
            or torch.promote_types(weights_dtype, v.dtype) != weights_dtype:
        return attention_reference(q, k, v, mask, causal=causal, scale=scale)
    qg, heads_mask = _grouped(q, k, mask, scale)
    b, hkv, g, t, d = qg.shape
    hq, c = hkv * g, k.shape[2]
    k_read = k[:, :, None, None]  # [B, Hkv, 1, 1, C, D]
    ones = torch.empty(b, hkv, c, d + 1, dtype=v.dtype, device=v.device)  # [B, Hkv, C, D + 1]
    ones[..., :d] = v
    ones[..., d] = 1.0  # the weights' own sum rides along the weighted values'
    v_read = ones[:, :, None, None]  # [B, Hkv, 1, 1, C, D + 1]
    out = q.new_empty(b, hkv, g, t, d)
    block = max(1, min(t, BLOCK_ELEMENTS // max(1, b * hq * c * (d + 1))))
    keep = _keep(heads_mask, causal, 0, t, t, c, q.device)  # every query's keys, once
    drop = None if keep is None else ~keep  # [T, C] or broadcastable to [B, Hkv, G, T, C]
    # per query 1 + its last key over the batch and heads (0: none); a block reads up to its queries' largest
    ends_list = None
    if keep is not None:
        seen = keep.reshape(-1, t, c).any(0)  # [T, C]
        ends_list = (seen * torch.arange(1, c + 1, device=q.device)).amax(-1).tolist()  # [T]
    for s in range(0, t, block):
        e = min(t, s + block)
        used = c if ends_list is None else max(1, max(ends_list[s:e]))
        scores = (qg[:, :, :, s:e, None, :] * k_read[..., :used, :]).sum(-1)  # [B, Hkv, G, q, used]
        if drop is not None:
            scores.masked_fill_(drop[..., s:e, :used], -math.inf)
        # a row whose every score is -inf (all its keys masked) gets NaN here, not the reference's 0 / 0: a
        # result that is not finite either way, recomputed by the reference's block (`_redo_unvouched`)
        weights = scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()  # [B, Hkv, G, q, used]; 0 where masked
        acc = weights[..., None] * v_read[..., :used, :]  # [B, Hkv, G, q, used, D + 1]
        n = used
        while n > 1:  # exact.halving_sum over the keys, in place: the upper part added to the lower's first rows
            half = 1 << (n - 1).bit_length() - 1
            acc[..., : n - half, :].add_(acc[..., half:n, :])
            n = half
        torch.div(acc[..., 0, :d], acc[..., 0, d:], out=out[:, :, :, s:e])
    _redo_unvouched(out, qg, k, v, heads_mask, causal, _reference_block_size(b, hq, t, c, d))
    return out.view(b, hq, t, d)


def _redo_unvouched(out: Tensor, qg: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                    block: int) -> None:
    """Rewrite with the reference form's own blocks every block of queries where out [B, Hkv, G, T, D] holds an
    exact zero or a value that is not finite (module docstring: only there can the forms differ)."""
    odd = (out == 0) | ~torch.isfinite(out)  # [B, Hkv, G, T, D]
    if not bool(odd.any()):
        return
    rows = odd.any(-1).reshape(-1, out.shape[3]).any(0)  # [T]
    t = out.shape[3]
    for s in range(0, t, block):
        e = min(t, s + block)
        if bool(rows[s:e].any()):
            out[:, :, :, s:e] = _reference_block(qg, k, v, mask, causal, s, e)
