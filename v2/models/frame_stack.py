"""A small decoder's pass over one frame's positions on the CPU: `Qwen3Backbone`'s layers, position after position,
in the exact forms' values (v2/models/exact.py) at a fraction of their operations.

A shared building block: a family's per-frame inner loop (a code predictor, a depth decoder) runs a few-layer
decoder over positions 0..P-1 of each frame, one position a step, where per-step Python and operation count are
the cost. `FrameStack` makes, once per frame, every buffer a step writes: K [P', B, Hkv, D] and V with a column of
ones [P', B, Hkv, D + 1] per layer (keys outermost; P' = P rounded up to a power of two; the positions past the
current one are masked), the `exact.Tile`s the projections read (each norm, the attention and the activation write their result
into the next projection's tile: no copies), the RoPE rows of the frame's positions (each made as a lone position's
`rotate_half_cos_sin` row) and the additive causal masks. A step is `Qwen3Layer`'s arithmetic in its order:
RMSNorm (float32, `sqrt`), the fused projections through `exact.Tile.linear` (one tile shape and alignment for
every row, as `exact.linear`), q/k norms over q and k at once, rotate-half RoPE (the half swap as one `flip`, its
sign folded into the sin row: the same products), the attention as `exact.attention` computes it for a query that
sees keys 0..p (products summed over D, the row max, exp, and one halving sum of both the weighted values and
the weights, through the ones column: its first level adds the keys past the lower half to the first of it, as
`exact.halving_sum` does; the first step's two positions read two keys under an additive causal mask), SiLU as
`exact.silu`. The attention's operands lead with the query heads of a kv head and the step's positions, so each
product and sum runs over B Hkv D contiguous values (at 16 rows it is most of a step's arithmetic).
So every value equals the generic pass's (`Qwen3Backbone.forward_cached` over a `KVCache`) bit for bit, whatever
the batch (tests/models/test_frame_stack.py holds it to that).
The buffers and the attention are `FrameAttention`, shared with the LayerNorm blocks' pass (frame_stack_ln.py),
which keeps its keys beside its queries (`q_beside_k`) and takes the one-query attention through buffers and views
made once (`plan_one`, `attend_one`: the same operations, each written into its buffer; its values may be the
caller's own rows, without the ones column).
Float32 only (the caller keeps the generic pass for other dtypes); inference only.
Must not know: heads, embeddings, draws, what a position holds; caches outside the frame.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models import exact
from v2.models.kv_cache import KVCache
from v2.models.persist import persistent
from v2.models.qwen3 import Qwen3Backbone
from v2.models.rope import Llama3Scaling, rotate_half_cos_sin


def fits(model: Qwen3Backbone, x: Tensor) -> bool:
    """Whether `FrameStack` serves `model` for rows like x: on the CPU, float32, autograd off."""
    return exact.on(x) and x.dtype == torch.float32 and not torch.is_grad_enabled()


@dataclass(frozen=True)
class _Layer:
    norm_in: Tensor
    eps_in: float
    qkv: Tensor
    qk_norm: Tensor | None  # [Hq + Hkv, D]: q_norm's weight for the q heads, k_norm's for the k heads
    qk_eps: float
    o: Tensor
    norm_post: Tensor
    eps_post: float
    gate_up: Tensor
    down: Tensor


def _layers(model: Qwen3Backbone) -> list[_Layer]:
    cfg = model.cfg
    out = []
    for layer in model.layers:
        att, mlp = layer.self_attn, layer.mlp
        qk, eps = None, 0.0
        if att.qk_norm:
            qk = torch.cat([att.q_norm.weight.expand(cfg.num_heads, cfg.head_dim),
                            att.k_norm.weight.expand(cfg.num_kv_heads, cfg.head_dim)])  # [Hq + Hkv, D]
            eps = att.q_norm.eps
        aligned = exact.aligned_weight
        out.append(_Layer(layer.input_layernorm.weight, layer.input_layernorm.eps, aligned(att.qkv_proj.weight), qk,
                          eps, aligned(att.o_proj.weight), layer.post_attention_layernorm.weight,
                          layer.post_attention_layernorm.eps, aligned(mlp.gate_up_proj.weight),
                          aligned(mlp.down_proj.weight)))
    return out


@functools.lru_cache(maxsize=16)
@persistent
def _rope_rows(head_dim: int, theta: float, scaling: Llama3Scaling | None, positions: int,
               device: torch.device) -> tuple[Tensor, Tensor]:
    """cos, signed sin [positions, head_dim] (read-only): row p is `rotate_half_cos_sin` of the lone position p;
    the sin row's first half negated (rotate-half's -x2 * sin == x2 * -sin, exactly)."""
    rows = [rotate_half_cos_sin(torch.tensor([[p]], device=device), head_dim, theta, scaling) for p in range(positions)]
    cos = torch.cat([c[0] for c, _ in rows])  # [P, D]
    sin = torch.cat([s[0] for _, s in rows])  # [P, D]
    sin[:, : head_dim // 2] = -sin[:, : head_dim // 2]
    return cos, sin


@functools.lru_cache(maxsize=16)
@persistent
def _causal(positions: int, device: torch.device) -> Tensor:
    """[P, P] float32 (read-only): row p is 0 at keys 0..p and -inf past p."""
    keys = torch.arange(positions, device=device)
    return torch.zeros(positions, positions, device=device).masked_fill(keys[None, :] > keys[:, None], -math.inf)


def _rms(x: Tensor, weight: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """`qwen3.RMSNorm` of float32 x [..., H] (into `out` when given)."""
    h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return torch.mul(weight, h) if out is None else torch.mul(weight, h, out=out)


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
    (v2/models/frame_stack_ln.py). Query heads `heads`, kv heads `kv_heads` of `head_dim`. `q_beside_k`: the keys
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


class FrameStack(FrameAttention):
    """One frame of `model`'s layers for `batch` rows over positions 0 .. positions - 1 (module docstring).

    `step(x, position, out)`: x [B, T, H] (float32) the residual stream at positions position .. position + T - 1
    (consecutive; every earlier position of the frame already stepped) -> the final norm's output at the last
    position written into out [B, H] (e.g. the next projection's `exact.Tile.rows`)."""

    def __init__(self, model: Qwen3Backbone, batch: int, positions: int, *, max_step: int = 2) -> None:
        cfg = model.cfg
        dev, dtype = model.norm.weight.device, torch.float32
        self.cfg, self.batch = cfg, batch
        self.layers = _layers(model)
        self.final_norm, self.final_eps = model.norm.weight, model.norm.eps
        super().__init__(len(self.layers), batch, positions, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, dev)
        d = cfg.head_dim
        self.cos, self.sin = _rope_rows(d, cfg.rope_theta, model.rope_scaling, positions, dev)
        rows = batch * max_step
        self.t_hidden = exact.Tile(rows, cfg.hidden_size, dtype, dev)
        self.t_heads = exact.Tile(rows, cfg.num_heads * d, dtype, dev)
        self.t_mlp = exact.Tile(rows, cfg.intermediate_size, dtype, dev)
        self._views: dict[int, tuple[Tensor, Tensor, Tensor, Tensor, Tensor]] = {}

    def _views_of(self, t: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """For steps of T positions: (the norms' output [B, T, H], the scaled queries [G, T, B, Hkv, D] and the same
        buffer as [B, T, Hkv, G, D] (where they are written), the attention's output as [G, T, B, Hkv, D], the
        activation's [B T, I]); the outputs are views of the tiles the projections read."""
        if t not in self._views:
            cfg, b, n = self.cfg, self.batch, self.batch * t
            hkv, d = cfg.num_kv_heads, cfg.head_dim
            g = cfg.num_heads // hkv
            heads = self.t_heads.rows(n).view(b, t, hkv, g, d).permute(3, 1, 0, 2, 4)
            q = torch.empty(g, t, b, hkv, d, dtype=self.k.dtype, device=self.k.device)
            self._views[t] = (self.t_hidden.rows(n).view(b, t, cfg.hidden_size), q, q.permute(2, 1, 3, 0, 4), heads,
                              self.t_mlp.rows(n))
        return self._views[t]

    def store(self, cache: KVCache, positions: int) -> None:
        """Copy K/V of positions 0 .. positions - 1 into slots 0 .. B - 1 of a per-frame `KVCache` (what the
        generic pass leaves there; a padding row's writes stay in its own slot)."""
        b, d = self.batch, self.cfg.head_dim
        cache.k[:, :b, :, :positions] = self.k[:, :positions].permute(0, 2, 3, 1, 4)  # [L, B, Hkv, P, D]
        cache.v[:, :b, :, :positions] = self.v[:, :positions, ..., :d].permute(0, 2, 3, 1, 4)

    def step(self, x: Tensor, position: int, out: Tensor) -> None:
        cfg = self.cfg
        b, t, hdim = x.shape
        n, d, hq, hkv = b * t, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        g, inter, qk_width = hq // hkv, cfg.intermediate_size, (hq + hkv) * cfg.head_dim
        cos, sin = self.cos[position: position + t, None], self.sin[position: position + t, None]  # [T, 1, D]
        normed, q, q_written, heads, act = self._views_of(t)
        th, tm = self.t_hidden, self.t_mlp
        for i, w in enumerate(self.layers):
            _rms(x, w.norm_in, w.eps_in, normed)
            qkv = th.linear(n, w.qkv)  # [N, (Hq + 2 Hkv) D]
            qk = qkv[:, :qk_width].view(b, t, hq + hkv, d)
            if w.qk_norm is not None:
                qk = _rms(qk, w.qk_norm, w.qk_eps)
            swapped = qk.view(b, t, hq + hkv, 2, d // 2).flip(-2).view(b, t, hq + hkv, d)
            qk = qk * cos + swapped * sin  # [B, T, Hq + Hkv, D]
            torch.mul(qk[:, :, :hq].view(b, t, hkv, g, d), self.scale, out=q_written)  # q: [G, T, B, Hkv, D]
            self.k[i][position: position + t] = qk[:, :, hq:].transpose(0, 1)  # [T, B, Hkv, D]
            self.v_write[i][position: position + t] = qkv[:, qk_width:].view(b, t, hkv, d).transpose(0, 1)
            self.attend(i, q, position, t, heads)
            x = x + self.t_heads.linear(n, w.o).view(b, t, hdim)
            _rms(x, w.norm_post, w.eps_post, normed)
            gate_up = th.linear(n, w.gate_up)  # [N, 2 I]
            gate = gate_up[:, :inter]
            torch.mul(gate / (1.0 + torch.exp(-gate)), gate_up[:, inter:], out=act)  # exact.silu(gate) * up
            x = x + tm.linear(n, w.down).view(b, t, hdim)
        _rms(x[:, -1], self.final_norm, self.final_eps, out)
