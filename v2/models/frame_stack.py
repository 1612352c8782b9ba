"""A small decoder's pass over one frame's positions on the CPU: `Qwen3Backbone`'s layers, position after position,
in the exact forms' values (v2/models/exact.py) at a fraction of their operations.

A shared building block: a family's per-frame inner loop (a code predictor, a depth decoder) runs a few-layer
decoder over positions 0..P-1 of each frame, one position a step, where per-step Python and operation count are
the cost. `FrameStack` makes, once per frame, every buffer a step writes: the K/V buffers and the attention over
them are `frame_attention.FrameAttention` (shared with the LayerNorm blocks' pass, frame_stack_ln.py); here the
`exact.Tile`s the projections read (each norm, the attention and the activation write their result into the next
projection's tile: no copies), the layers' operands (`row_layer.RowLayer`, as the decode row reads them; each norm's
eps read at each step) and the RoPE rows of the frame's positions (`rope.rotate_half_table`). A step is
`Qwen3Layer`'s arithmetic in its order: RMSNorm (float32, `sqrt`), the fused projections through
`exact.Tile.linear` (one tile shape and alignment for every row, as `exact.linear`), q/k norms over q and k at
once (each head over its own D; two norms where their eps differ), rotate-half RoPE (the half swap as one `flip`,
its sign folded into the sin row: the same products), the attention as `exact.attention` computes it for a query
that sees keys 0..p (`FrameAttention.attend`; the first step's two positions read two keys under an additive causal
mask), SiLU as `exact.silu`.
So every value equals the generic pass's (`Qwen3Backbone.forward_cached` over a `KVCache`) bit for bit, whatever
the batch (tests/models/test_frame_stack.py holds it to that). Its one-position steps through buffers made once
are frame_stack_kept.py's.
Float32 only (the caller keeps the generic pass for other dtypes); inference only.
Must not know: heads, embeddings, draws, what a position holds; caches outside the frame.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models import exact
from v2.models.frame_attention import FrameAttention
from v2.models.kv_cache import KVCache
from v2.models.qwen3 import Qwen3Backbone
from v2.models.rope import rotate_half_table
from v2.models.row_layer import RowLayer


def fits(model: Qwen3Backbone, x: Tensor) -> bool:
    """Whether `FrameStack` serves `model` for rows like x: on the CPU, float32, autograd off."""
    return exact.on(x) and x.dtype == torch.float32 and not torch.is_grad_enabled()


def _rms(x: Tensor, weight: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """`qwen3.RMSNorm` of float32 x [..., H] (into `out` when given)."""
    h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return torch.mul(weight, h) if out is None else torch.mul(weight, h, out=out)


class FrameStack(FrameAttention):
    """One frame of `model`'s layers for `batch` rows over positions 0 .. positions - 1 (module docstring).

    `step(x, position, out)`: x [B, T, H] (float32) the residual stream at positions position .. position + T - 1
    (consecutive; every earlier position of the frame already stepped) -> the final norm's output at the last
    position written into out [B, H] (e.g. the next projection's `exact.Tile.rows`)."""

    def __init__(self, model: Qwen3Backbone, batch: int, positions: int, *, max_step: int = 2) -> None:
        cfg = model.cfg
        dev, dtype = model.norm.weight.device, torch.float32
        self.cfg, self.batch = cfg, batch
        self.layers = [RowLayer(layer, cfg.num_heads, cfg.num_kv_heads) for layer in model.layers]
        self.final, self.final_norm = model.norm, model.norm.weight  # (its eps read at each step)
        super().__init__(len(self.layers), batch, positions, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, dev)
        d = cfg.head_dim
        rope = rotate_half_table(positions, d, cfg.rope_theta, model.rope_scaling, dev)  # [P, 2, D]
        self.cos, self.sin = rope[:, 0], rope[:, 1]  # [P, D] each: cos, signed sin
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
            norm_in, norm_post = w.norms
            _rms(x, w.norm_in, norm_in.eps, normed)
            qkv = th.linear(n, w.qkv)  # [N, (Hq + 2 Hkv) D]
            qk = qkv[:, :qk_width].view(b, t, hq + hkv, d)
            if w.qk_w is not None:  # q_norm over the q heads, k_norm over the k heads (each head over its own D)
                qn, kn = w.qk_norms
                qk = (_rms(qk, w.qk_w, qn.eps) if qn.eps == kn.eps else
                      torch.cat([_rms(qk[:, :, :hq], qn.weight, qn.eps), _rms(qk[:, :, hq:], kn.weight, kn.eps)], 2))
            swapped = qk.view(b, t, hq + hkv, 2, d // 2).flip(-2).view(b, t, hq + hkv, d)
            qk = qk * cos + swapped * sin  # [B, T, Hq + Hkv, D]
            torch.mul(qk[:, :, :hq].view(b, t, hkv, g, d), self.scale_t, out=q_written)  # q: [G, T, B, Hkv, D]
            self.k[i][position: position + t] = qk[:, :, hq:].transpose(0, 1)  # [T, B, Hkv, D]
            self.v_write[i][position: position + t] = qkv[:, qk_width:].view(b, t, hkv, d).transpose(0, 1)
            self.attend(i, q, position, t, heads)
            x = x + self.t_heads.linear(n, w.o).view(b, t, hdim)
            _rms(x, w.norm_post, norm_post.eps, normed)
            gate_up = th.linear(n, w.gate_up)  # [N, 2 I]
            gate = gate_up[:, :inter]
            torch.mul(exact.silu(gate), gate_up[:, inter:], out=act)
            x = x + tm.linear(n, w.down).view(b, t, hdim)
        _rms(x[:, -1], self.final_norm, self.final.eps, out)
