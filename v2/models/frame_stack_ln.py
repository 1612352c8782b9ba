"""A frame's pass of GPT-J-style pre-LN blocks on the CPU: the sibling of `frame_stack.FrameStack` for LayerNorm
blocks (LayerNorm with bias, a fused biased q/k/v projection, interleaved RoPE, a biased MLP with one activation),
position after position, in the values of the blocks' generic step at a fraction of its operations.

A shared building block: a family's per-frame local transformer of such blocks (a depth decoder) runs them over
positions 0..P-1 of each frame, one position a step. `LnFrameStack` shares `frame_stack.FrameAttention` (the K/V
buffers, keys outermost, V with a column of ones, and the attention of one query as `exact.attention` computes it)
and makes once per frame the `exact.Tile`s the projections read. A step is the generic step's arithmetic in its
order: `torch.layer_norm` (copied into the next projection's tile), the projections through `exact.Tile.linear`
(one tile shape and alignment for every row, as `exact.linear`; biases as F.linear adds them), interleaved RoPE
over q and k at once (the pair swap as one `flip`, its sign folded into the caller's sin row: the same products),
q scaled and the attention written into the output projection's tile, the activation written into the last
projection's tile (the `exact` `_into` forms), the residual adds, the final LayerNorm into the caller's `out`.
So every value equals the generic step's bit for bit, whatever the batch (a test in tests/models holds it to that).
Steps of one position only (a frame's first position is its own step). Float32 only; inference only.
Must not know: which model the blocks come from, heads, embeddings, draws, what a position holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models import exact
from v2.models.frame_stack import FrameAttention


@dataclass(frozen=True)
class Norm:
    """A LayerNorm's parameters: weight, bias [H], eps."""

    weight: Tensor
    bias: Tensor
    eps: float


@dataclass(frozen=True)
class LnBlock:
    """One pre-LN block: ln_in -> qkv (+ bias) [3 H, H] -> attention -> o (+ bias) -> residual; ln_post -> fc_in
    (+ bias) -> activation -> fc_out (+ bias) -> residual. Weights as the modules hold them ([out, in])."""

    ln_in: Norm
    qkv: Tensor
    qkv_bias: Tensor | None
    o: Tensor
    o_bias: Tensor | None
    ln_post: Norm
    fc_in: Tensor
    fc_in_bias: Tensor | None
    fc_out: Tensor
    fc_out_bias: Tensor | None


def aligned(block: LnBlock) -> LnBlock:
    """The block with its weights as `exact.aligned_weight` pads them (made once, not per projection)."""
    a = exact.aligned_weight
    return LnBlock(block.ln_in, a(block.qkv), block.qkv_bias, a(block.o), block.o_bias, block.ln_post,
                   a(block.fc_in), block.fc_in_bias, a(block.fc_out), block.fc_out_bias)


class LnFrameStack(FrameAttention):
    """One frame of `blocks` for `batch` rows over positions 0 .. positions - 1 (module docstring).

    cos, sin [positions, D]: the interleaved RoPE rows of the frame's positions, sin's even columns negated
    (-x1 * sin == x1 * -sin, exactly); act_into(x, out): the activation of x written into out.
    `step(x, position, out)`: x [B, H] (float32) the residual stream at `position` (every earlier position of the
    frame already stepped) -> the final norm's output written into out [B, H] (e.g. the heads' `exact.Tile.rows`)."""

    def __init__(self, blocks: Sequence[LnBlock], final: Norm, act_into: Callable[[Tensor, Tensor], None], *,
                 batch: int, positions: int, heads: int, cos: Tensor, sin: Tensor) -> None:
        hidden, inter = blocks[0].o.shape[0], blocks[0].fc_in.shape[0]
        if hidden % heads:
            raise ValueError(f"LnFrameStack: hidden size {hidden} does not split into {heads} heads")
        d, dev, dtype = hidden // heads, final.weight.device, torch.float32
        super().__init__(len(blocks), batch, positions, heads, heads, d, dev)
        self.blocks, self.final, self.act_into = list(blocks), final, act_into
        self.batch, self.heads, self.hidden = batch, heads, hidden
        self.cos, self.sin = cos[:, None], sin[:, None]  # [P, 1, D]
        self.t_hidden = exact.Tile(batch, hidden, dtype, dev)
        self.t_heads = exact.Tile(batch, hidden, dtype, dev)
        self.t_mlp = exact.Tile(batch, inter, dtype, dev)
        self.normed = self.t_hidden.rows(batch)  # [B, H]
        self.q = torch.empty(1, 1, batch, heads, d, dtype=dtype, device=dev)  # [G, T, B, heads, D]
        self.q_written = self.q.view(batch, heads, d)
        self.attended = self.t_heads.rows(batch).view(1, 1, batch, heads, d)  # [G, T, B, heads, D]
        self.act = self.t_mlp.rows(batch)  # [B, I]
        # per layer and position: where the step writes its K and V [B, heads, D] and the keys and values it reads
        self.k_at = [list(k.unbind(0)) for k in self.k]
        self.v_at = [list(v.unbind(0)) for v in self.v_write]
        self.k_seen = [[k[: p + 1] for p in range(positions)] for k in self.k_read]
        self.v_seen = [[v[: p + 1] for p in range(positions)] for v in self.v_read]
        self.cos_at, self.sin_at = list(self.cos.unbind(0)), list(self.sin.unbind(0))  # [1, D] each

    def step(self, x: Tensor, position: int, out: Tensor) -> None:
        b, h, d = self.batch, self.hidden, self.hidden // self.heads
        cos, sin = self.cos_at[position], self.sin_at[position]  # [1, D]
        th, tm, normed, shape = self.t_hidden, self.t_mlp, self.normed, (h,)
        for i, w in enumerate(self.blocks):
            normed.copy_(torch.layer_norm(x, shape, w.ln_in.weight, w.ln_in.bias, w.ln_in.eps))
            qkv = th.linear(b, w.qkv, w.qkv_bias)  # [B, 3 H]: q, k, v
            qk = qkv[:, : 2 * h].view(b, 2 * self.heads, d)  # [B, 2 heads, D]
            swapped = qk.view(b, 2 * self.heads, d // 2, 2).flip(-1).view(b, 2 * self.heads, d)  # x1, x0, x3, ...
            qk = qk * cos + swapped * sin  # [B, 2 heads, D]
            torch.mul(qk[:, : self.heads], self.scale, out=self.q_written)
            self.k_at[i][position].copy_(qk[:, self.heads:])  # [B, heads, D]
            self.v_at[i][position].copy_(qkv[:, 2 * h:].view(b, self.heads, d))
            self.attend(i, self.q, position, 1, self.attended, self.k_seen[i][position], self.v_seen[i][position])
            x = x + self.t_heads.linear(b, w.o, w.o_bias)
            normed.copy_(torch.layer_norm(x, shape, w.ln_post.weight, w.ln_post.bias, w.ln_post.eps))
            self.act_into(th.linear(b, w.fc_in, w.fc_in_bias), self.act)
            x = x + tm.linear(b, w.fc_out, w.fc_out_bias)
        out.copy_(torch.layer_norm(x, shape, self.final.weight, self.final.bias, self.final.eps))
