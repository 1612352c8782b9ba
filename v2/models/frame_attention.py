"""A frame's K/V buffers and the attention of a step over them, on the CPU, as `exact.attention` computes it.

A shared building block of the frame passes (`frame_stack.FrameStack`, the kept one, `frame_stack_ln.LnFrameStack`):
per layer K [P', B, Hkv, D] and V with a column of ones [P', B, Hkv, D + 1] (keys outermost; P' = P rounded up to a
power of two; the positions past the current one are masked), or the keys beside the queries (`q_beside_k`), and
the attention of a step's queries over keys 0 .. p (`attend`: products summed over D, the row max, exp, and one
halving sum of both the weighted values and the weights, through the ones column: its first level adds the keys past
the lower half to the first of it, as `exact.halving_sum` does; a step of several positions reads its keys under an
additive causal mask). The operands lead with the query heads of a kv head and the step's positions, so each
product and sum runs over B Hkv D contiguous values. The one-query attention through buffers and views made once
(`plan_one`, `attend_one`: the same operations, each written into its buffer; its values may be the caller's own
rows, without the ones column). tests/models/test_frame_step_buffers.py holds `attend_one` to `attend`.
Float32 only; inference only.
Must not know: the layers around the attention, heads, embeddings, draws, what a position holds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models import exact
from v2.models.persist import persistent


@functools.lru_cache(maxsize=16)
@persistent
def _causal(positions: int, device: torch.device) -> Tensor:
    """[P, P] float32 (read-only): row p is 0 at keys 0..p and -inf past p."""
    keys = torch.arange(positions, device=device)
    return torch.zeros(positions, positions, device=device).masked_fill(keys[None, :] > keys[:, None], -math.inf)



@dataclass(frozen=True)
class _OneStep:
    """`FrameAttention.attend_one`'s views for one position: products [S, G, 1, B, Hkv, D], scores [S, G, 1, B, Hkv],
    where the weights go (`exps` [S, G, 1, B, Hkv]: the scores in place, or, for values without the ones column,
    the weighted values' last column; `weights` the same as [..., 1]), the halving levels' (lower, upper) halves
    of the weighted values [S, G, 1, B, Hkv, D + 1] in a buffer of a power of two rows and where the products go
    (`weighted`: all of them, or the first D columns), the sums and the weights' total at row 0, and per layer the
    keys and values 0 .. S - 1."""

    prod: Tensor
    scores: Tensor
    exps: Tensor
    weights: Tensor
    levels: list[tuple[Tensor, Tensor]]
    sums: Tensor
    total: Tensor
    k_seen: list[Tensor]
    v_seen: list[Tensor]
    weighted: Tensor



class FrameAttention:
    """A frame's K/V buffers for `layers` layers of `batch` rows over positions 0 .. positions - 1 and the
    attention of a step over them (module docstring): shared by `FrameStack` and the LayerNorm blocks' pass
    (frame_stack_ln.py). Query heads `heads`, kv heads `kv_heads` of `head_dim`. `q_beside_k`: the keys
    are the last kv_heads of `qk` [layers, P', B, heads + kv_heads, D], whose first heads hold a position's
    unscaled queries (a step writes its rotated q and k there in one operation); the key views are strided."""

    def __init__(self, layers: int, batch: int, positions: int, heads: int, kv_heads: int, head_dim: int,
                 device: torch.device, *, q_beside_k: bool = False) -> None:
        dev, dtype = device, torch.float32
        p2 = 1 << (positions - 1).bit_length()
        d, hkv = head_dim, kv_heads
        self.groups = heads // kv_heads
        # keys outermost: a halving level adds two contiguous halves
        if q_beside_k:
            self.qk = torch.zeros(layers, p2, batch, heads + hkv, d, dtype=dtype, device=dev)
            self.k = self.qk[:, :, :, heads:]  # [L, P', B, Hkv, D] (a view)
        else:
            self.k = torch.zeros(layers, p2, batch, hkv, d, dtype=dtype, device=dev)
        self.v = torch.zeros(layers, p2, batch, hkv, d + 1, dtype=dtype, device=dev)
        self.v[..., d] = 1.0  # the weights' own sum rides along the weighted values'
        # read as [P', G, T, B, Hkv, ...]: the query heads of a kv head and the step's positions lead, so each
        # product runs over B Hkv D contiguous values
        self.k_read = [k[:, None, None] for k in self.k]  # [P', 1, 1, B, Hkv, D] per layer
        self.v_read = [v[:, None, None] for v in self.v]  # [P', 1, 1, B, Hkv, D + 1]
        self.v_write = [v[..., :d] for v in self.v]  # [P', B, Hkv, D]
        self.mask = _causal(p2, dev).t()[:, None, :, None, None]  # [P', 1, P', 1, 1]: key j, query position p
        self.scale = 1.0 / math.sqrt(d)
        self.scale_t = exact.scalar(self.scale)  # the queries' scale as an operand (`exact.scalar`)

    def plan_one(self, q: Tensor, heads: Tensor, positions: int, values: list[Tensor] | None = None) -> None:
        """Make once the buffers and views of `attend_one`: steps of one position (0 .. positions - 1) whose scaled
        queries are in q [G, 1, B, Hkv, D] and whose result goes to heads [G, 1, B, Hkv, D]. values: per layer the
        caller's own value rows [P, B, Hkv, D] (views, no ones column) read instead of `v` (a step copies no V):
        the weights written where the ones' products go (w * 1 == w) give the same sums."""
        g, _, b, hkv, d = q.shape
        v_read = self.v_read if values is None else [v[:, None, None] for v in values]  # [P, 1, 1, B, Hkv, D(+1)]
        p2, dev = self.k.shape[1], q.device
        prod = torch.empty(p2, g, 1, b, hkv, d, dtype=q.dtype, device=dev)  # [S, G, 1, B, Hkv, D] per step
        scores = torch.empty(p2, g, 1, b, hkv, dtype=q.dtype, device=dev)  # [S, G, 1, B, Hkv]
        self._q1, self._heads1 = q, heads
        self._top = torch.empty(1, g, 1, b, hkv, dtype=q.dtype, device=dev)
        self._one: list[_OneStep] = []
        for p in range(positions):
            seen = p + 1
            keys = 1 << (seen - 1).bit_length()
            # the weighted values and weights of keys 0 .. seen - 1, then -0.0 up to a power of two: x + -0.0 == x
            # for every x (+0.0 included), so the halving levels over all `keys` rows add what halving_sum adds
            acc = torch.full((keys, g, 1, b, hkv, d + 1), -0.0, dtype=q.dtype, device=dev)
            levels, level = [], keys
            while level > 1:  # the upper half added to the lower, in place (rows past `seen` are never written)
                level //= 2
                levels.append((acc[:level], acc[level : 2 * level]))
            own = values is not None  # the weights in acc's last column, their products with the values beside them
            exps, weighted = (acc[:seen, ..., d], acc[:seen, ..., :d]) if own else (scores[:seen], acc[:seen])
            self._one.append(_OneStep(prod[:seen], scores[:seen], exps, exps[..., None], levels,
                                      acc[0, ..., :d], acc[0, ..., d:], [k[:seen] for k in self.k_read],
                                      [v[:seen] for v in v_read], weighted))

    def attend_one(self, i: int, position: int) -> None:
        """`attend` of one position (t = 1) through `plan_one`'s buffers: the same operations on the same values
        (the products and the sum over D, the max over keys, exp, the weighted values, the halving levels, the
        quotient), each written into its buffer."""
        s = self._one[position]
        torch.mul(self._q1, s.k_seen[i], out=s.prod)
        torch.sum(s.prod, -1, out=s.scores)
        torch.amax(s.scores, 0, keepdim=True, out=self._top)
        torch.sub(s.scores, self._top, out=s.exps)
        torch.exp(s.exps, out=s.exps)
        torch.mul(s.weights, s.v_seen[i], out=s.weighted)
        for lo, hi in s.levels:
            lo.add_(hi)
        torch.div(s.sums, s.total, out=self._heads1)

    def attend(self, i: int, q: Tensor, position: int, t: int, heads: Tensor, k_seen: Tensor | None = None,
               v_seen: Tensor | None = None) -> None:
        """Layer i's attention of the scaled queries q [G, T, B, Hkv, D] at positions position .. position + T - 1
        (their K/V already written) over keys 0 .. position + T - 1, written into heads [G, T, B, Hkv, D]. A
        one-position step may pass the views of keys and values 0 .. position (k_seen, v_seen) it reads."""
        d = self.k.shape[-1]
        seen = position + t  # keys 0 .. seen - 1 hold this frame's positions so far
        keys = 1 << (seen - 1).bit_length()  # the power of two the halving sums pad them to
        if t == 1:  # one query: it sees every key read, no mask; the first halving level as halving_sum's
            k_seen = self.k_read[i][:seen] if k_seen is None else k_seen
            v_seen = self.v_read[i][:seen] if v_seen is None else v_seen
            scores = (q * k_seen).sum(-1)  # [S, G, 1, B, Hkv]
            weights = torch.exp(scores - scores.amax(dim=0, keepdim=True))
            acc = weights[..., None] * v_seen  # [S, G, 1, B, Hkv, D + 1]
            level = keys
            if seen < keys:  # the upper half is short: its keys added to the first of the lower (as halving_sum)
                level = keys // 2
                low = acc[:level].clone()
                low[: seen - level] += acc[level:]
                acc = low
        else:  # the first step's positions: each query sees the keys up to its own (an additive mask)
            mask = self.mask[:keys, :, position: position + t]  # [K, 1, T, 1, 1]
            scores = (q * self.k_read[i][:keys]).sum(-1) + mask  # [K, G, T, B, Hkv]
            weights = torch.exp(scores - scores.amax(dim=0, keepdim=True))
            acc = weights[..., None] * self.v_read[i][:keys]  # [K, G, T, B, Hkv, D + 1]
            level = keys
        while level > 1:  # exact.halving_sum over the keys: the upper half added to the lower
            level //= 2
            acc = acc[:level] + acc[level:]
        torch.div(acc[0, ..., :d], acc[0, ..., d:], out=heads)

