"""`FrameStack` kept from frame to frame, its one-position steps through buffers and views made once.

A shared building block beside `frame_stack.FrameStack` (a code predictor's or depth decoder's pass over a frame's
positions): after a frame's first step (its two positions, `FrameStack.step`), every step is one position, and on a
CPU its cost is the count of operations and of fresh intermediates. `KeptFrameStack.step` takes such a step as the
LayerNorm blocks' pass does (frame_stack_ln.py): the residual stream in a buffer, each RMSNorm's steps written into
buffers (`exact.rms_norm_into`, the decode row's norm; its output into the next projection's tile), the projections
through `exact.tiles_linear_into` (the call F.linear makes per tile: the same bits), q and k normed at once
(`row_layer.qk_norm_into`, the decode row's too) and rotated at once (the half
swap one `index_select`, `rope.rotate_half_swap`; its sign in the sin row), the rotated k and the v rows copied into
the frame's K/V, the attention through `FrameAttention.attend_one` (its views made once per position), SiLU and the up
product in buffers. Each gives `FrameStack.step`'s values (the same operations in the same order; the norm's mean as
the sum and its quotient, which is what `mean` computes on a CPU), so every value is the same bit for bit, whatever
the batch (tests/models/test_frame_stack.py holds the pass to the generic one).
`kept_stack(model, batch, positions)`: the pass kept per model, thread, batch and positions while the parameters are
the same tensors with the same versions (a frame writes every K/V it reads before reading it, so nothing of an earlier
frame is ever read); its tensors are made as normal tensors (v2/models/persist.py). Float32, inference only.
Must not know: heads, embeddings, draws, what a position holds.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch import Tensor

from v2.models import exact
from v2.models.frame_stack import FrameStack
from v2.models.persist import ParamVersions, persistent
from v2.models.qwen3 import Qwen3Backbone
from v2.models.rope import rotate_half_swap
from v2.models.row_layer import qk_norm_into


class KeptFrameStack(FrameStack):
    """`FrameStack` whose one-position steps run through buffers made here (module docstring)."""

    def __init__(self, model: Qwen3Backbone, batch: int, positions: int) -> None:
        super().__init__(model, batch, positions)
        cfg, b = self.cfg, batch
        hq, hkv, d, h, inter = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size, cfg.intermediate_size
        g, dev, f32 = hq // hkv, self.k.device, torch.float32
        self.hq, self.inter = hq, inter
        rows = self.t_hidden.buf.shape[0]

        def buf(*shape: int) -> Tensor:
            return torch.empty(*shape, dtype=f32, device=dev)

        self.res = buf(b, h)  # the residual stream [B, H]
        self.sq, self.ms = buf(b, h), buf(b, 1)  # a norm's square (then quotient), mean (then root)
        self.qkv_out, self.o_out = buf(rows, (hq + 2 * hkv) * d), buf(rows, h)
        self.gu_out, self.down_out = buf(rows, 2 * inter), buf(rows, h)
        qk_width = (hq + hkv) * d
        self.qk = self.qkv_out[:b, :qk_width].view(b, hq + hkv, d)
        self.v_rows = self.qkv_out[:b, qk_width:].view(b, hkv, d)
        self.qk_sq, self.qk_ms, self.qk_normed = buf(b, hq + hkv, d), buf(b, hq + hkv, 1), buf(b, hq + hkv, d)
        self.swap = rotate_half_swap(hq + hkv, d, dev)  # the halves swapped per head: one index_select of the columns
        self.swapped = buf(b, hq + hkv, d)
        self.rot = buf(b, hq + hkv, d)
        self.q1 = buf(g, 1, b, hkv, d)  # [G, 1, B, Hkv, D]
        self.q1_written = self.q1.permute(2, 1, 3, 0, 4)[:, 0]  # [B, Hkv, G, D]
        # the views a step reads, made once: q and k (as projected, normed) and their swap as [B, (Hq + Hkv) D] columns,
        # the rotated q as the queries' [B, Hkv, G, D] and k, the projections' rows [B, ..]
        self.qk_cols, self.qk_normed_cols = self.qkv_out[:b, :qk_width], self.qk_normed.view(b, qk_width)
        self.swapped_cols = self.swapped.view(b, qk_width)
        self.q_rot, self.k_rot = self.rot[:, :hq].view(self.q1_written.shape), self.rot[:, hq:]
        self.o_rows, self.down_rows, self.act = self.o_out[:b], self.down_out[:b], self.t_mlp.rows(b)
        self.heads1 = self.t_heads.rows(b).view(b, 1, hkv, g, d).permute(3, 1, 0, 2, 4)  # [G, 1, B, Hkv, D]
        self.plan_one(self.q1, self.heads1, positions)
        self.silu = buf(b, inter)
        self.gate, self.up = self.gu_out[:b, :inter], self.gu_out[:b, inter:]
        self.at = [[(k[p], v[p]) for p in range(positions)] for k, v in zip(self.k, self.v_write)]  # [B, Hkv, D] each
        self.cos_at, self.sin_at = list(self.cos.unbind(0)), list(self.sin.unbind(0))  # [D] each

    def step(self, x: Tensor, position: int, out: Tensor) -> None:
        if x.shape[1] != 1:
            super().step(x, position, out)
            return
        b, res, th, norm, scale = self.batch, self.res, self.t_hidden, exact.rms_norm_into, self.scale_t
        normed = th.rows(b)
        cos, sin = self.cos_at[position], self.sin_at[position]
        res.copy_(x[:, 0])
        for i, w in enumerate(self.layers):
            k_at, v_at = self.at[i][position]
            norm_in, norm_post = w.norms
            norm(res, w.norm_in, norm_in.eps, self.sq, self.ms, normed)
            exact.tiles_linear_into(th.buf, b, w.qkv_t, None, self.qkv_out)  # [B, (Hq + 2 Hkv) D]
            qk, cols = self.qk, self.qk_cols
            if w.qk_w is not None:
                qk_norm_into(w, qk, self.hq, self.qk_sq, self.qk_ms, self.qk_normed)
                qk, cols = self.qk_normed, self.qk_normed_cols
            torch.index_select(cols, 1, self.swap, out=self.swapped_cols)
            torch.mul(qk, cos, out=self.rot)
            torch.mul(self.swapped, sin, out=self.swapped)
            torch.add(self.rot, self.swapped, out=self.rot)  # q and k rotated [B, Hq + Hkv, D]
            torch.mul(self.q_rot, scale, out=self.q1_written)
            k_at.copy_(self.k_rot)
            v_at.copy_(self.v_rows)
            self.attend_one(i, position)
            self.t_heads.linear_into(b, w.o_t, None, self.o_out)
            res.add_(self.o_rows)
            norm(res, w.norm_post, norm_post.eps, self.sq, self.ms, normed)
            exact.tiles_linear_into(th.buf, b, w.gate_up_t, None, self.gu_out)  # [B, 2 I]
            exact.silu_into(self.gate, self.silu)
            torch.mul(self.silu, self.up, out=self.act)
            self.t_mlp.linear_into(b, w.down_t, None, self.down_out)
            res.add_(self.down_rows)
        norm(res, self.final_norm, self.final.eps, self.sq, self.ms, out)


_KEPT: weakref.WeakKeyDictionary[Qwen3Backbone, threading.local] = weakref.WeakKeyDictionary()


def kept_stack(model: Qwen3Backbone, batch: int, positions: int) -> KeptFrameStack:
    """The model's `KeptFrameStack` for `batch` rows over `positions` in this thread, made anew when a parameter
    changes (at most 8 kept per model and thread)."""
    local = _KEPT.get(model)
    if local is None:
        local = _KEPT[model] = threading.local()
    kept: dict[tuple[int, int], KeptFrameStack] | None = getattr(local, "stacks", None)
    versions: ParamVersions | None = getattr(local, "versions", None)
    if kept is None or versions is None:
        kept, versions = local.stacks, local.versions = {}, ParamVersions()
    if versions.changed(model):
        kept.clear()
    key = (batch, positions)
    stack = kept.get(key)
    if stack is None:
        if len(kept) >= 8:
            kept.pop(next(iter(kept)))
        stack = kept[key] = persistent(KeptFrameStack)(model, batch, positions)
    return stack
