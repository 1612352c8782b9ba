"""A frame's pass of GPT-J-style pre-LN blocks on the CPU: the sibling of `frame_stack.FrameStack` for LayerNorm
blocks (LayerNorm with bias, a fused biased q/k/v projection, interleaved RoPE, a biased MLP with one activation),
position after position, in the values of the blocks' generic step at a fraction of its operations.

A shared building block: a family's per-frame local transformer of such blocks (a depth decoder) runs them over
positions 0..P-1 of each frame, one position a step. `LnFrameStack` shares `frame_attention.FrameAttention` (the K/V
buffers, keys outermost beside the queries, and the attention of one query as `exact.attention` computes it,
`attend_one`: its buffers and views made once, reading the values where a step's `index_select` put them) and
makes once per frame every buffer a step writes. A step is the generic step's arithmetic in its order:
`torch.layer_norm` over the residual stream's whole tiles (its output is the next projection's tile; copied into
one where H is not a multiple of `exact.ALIGN`), the projections as `exact.tiles_linear_into` makes them (one tile
shape and alignment for every row, as `exact.linear`; biases as F.linear adds them; one tile of rows calls
torch.addmm itself), interleaved RoPE over q and k at once in three operations (one `index_select` of the
projection's columns writes q and k, their pairs swapped and v side by side; one product with the position's cos
and sin rows, the swap's sign folded into sin: the same products; one sum written beside the keys), q scaled (by
`exact.scalar`'s 0-dim operand: no scalar wrapped per call) and the attention written into the output projection's
tile, the activation written into the last projection's tile (the `exact` `_into` forms), the residual adds in
place, the final
LayerNorm's tile returned. So every value equals the generic step's bit for bit, whatever the batch (a test in
tests/models holds it to that). Steps of one position only (a frame's first position is its own step). Float32
only; inference only.
Must not know: which model the blocks come from, heads, embeddings, draws, what a position holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models import exact
from v2.models.frame_attention import FrameAttention


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


_Calls = tuple[Norm, Tensor, Tensor, Tensor, Tensor, Norm, Tensor, Tensor, Tensor, Tensor]


def aligned(block: LnBlock) -> LnBlock:
    """The block with its weights as `exact.aligned_weight` pads them (made once, not per projection)."""
    a = exact.aligned_weight
    return LnBlock(block.ln_in, a(block.qkv), block.qkv_bias, a(block.o), block.o_bias, block.ln_post,
                   a(block.fc_in), block.fc_in_bias, a(block.fc_out), block.fc_out_bias)


class LnFrameStack(FrameAttention):
    """One frame of `blocks` for `batch` rows over positions 0 .. positions - 1 (module docstring).

    cos, sin [positions, D]: the interleaved RoPE rows of the frame's positions, sin's even columns negated
    (-x1 * sin == x1 * -sin, exactly); act_into(x, out): the activation of fc_in's output written into out (the
    caller may store the MLP's weights negated with an activation that undoes it, e.g.
    `exact.silu_of_negated_into`: this pass does not look).
    `step(x, position)`: x [B, H] (float32) the residual stream at `position` (every earlier position of the
    frame already stepped) -> the final norm's output as a tile (`exact.tiles_linear_into`'s x: [the tiles' rows,
    H padded to ALIGN], rows [:B] the result), valid until the next step. Every intermediate is written into a
    buffer made here (`out=` forms; the projections as `exact.tiles_linear_into` makes them, its torch.addmm called
    here for one tile of rows with H aligned and every bias), the views a step reads made once per layer and
    position. The residual stream lives in the rows of whole tiles (the rows past B stay 0):
    where H is a multiple of ALIGN each norm runs over all of them and its output is the next projection's tile
    itself (a row's norm is computed alone, whatever the rows around it); otherwise it is copied into a `Tile`."""

    def __init__(self, blocks: Sequence[LnBlock], final: Norm, act_into: Callable[[Tensor, Tensor], None], *,
                 batch: int, positions: int, heads: int, cos: Tensor, sin: Tensor) -> None:
        hidden, inter = blocks[0].o.shape[0], blocks[0].fc_in.shape[0]
        if hidden % heads:
            raise ValueError(f"LnFrameStack: hidden size {hidden} does not split into {heads} heads")
        d, dev, dtype = hidden // heads, final.weight.device, torch.float32
        super().__init__(len(blocks), batch, positions, heads, heads, d, dev, q_beside_k=True)
        self.blocks, self.final, self.act_into = list(blocks), final, act_into
        self.batch, self.heads, self.hidden = batch, heads, hidden
        self.weights_t = [(b.qkv.t(), b.o.t(), b.fc_in.t(), b.fc_out.t()) for b in self.blocks]  # [in', out] views
        self.t_hidden = exact.Tile(batch, hidden, dtype, dev)  # the norms' outputs where H is not aligned
        self.t_heads = exact.Tile(batch, hidden, dtype, dev)
        self.t_mlp = exact.Tile(batch, inter, dtype, dev)
        rows = self.t_hidden.buf.shape[0]  # the tiles' rows: each projection's output buffer
        self.direct = hidden % exact.ALIGN == 0
        self.res_tiles = torch.zeros(rows, hidden, dtype=dtype, device=dev)  # the residual stream, whole tiles
        self.res = self.res_tiles[:batch]  # [B, H]

        def out(width: int) -> tuple[Tensor, Tensor]:  # (a projection's output [rows, width], its rows [B, width])
            buf = torch.empty(rows, width, dtype=dtype, device=dev)
            return buf, buf[:batch]

        (self.qkv, qkv), (self.o_out, self.o_rows) = out(3 * hidden), out(hidden)
        (self.fc_in_out, self.fc_in_rows), (self.fc_out_out, self.fc_out_rows) = out(inter), out(hidden)
        self.qkv_rows = qkv  # [B, 3 H]
        # per layer and position [B, 5 H]: q and k (2 H), their interleaved pairs swapped (x1, x0, x3, x2, ...: 2 H),
        # v (H; the attention reads it here: `plan_one`'s values), all made by one index_select of qkv's columns
        self.parts = torch.zeros(len(blocks), positions, batch, 5 * hidden, dtype=dtype, device=dev)
        swap = torch.arange(2 * hidden, device=dev).view(hidden, 2).flip(-1).reshape(-1)
        self.gather = torch.cat([torch.arange(2 * hidden, device=dev), swap,
                                 torch.arange(2 * hidden, 3 * hidden, device=dev)])
        values = [part[:, :, 4 * hidden :].view(positions, batch, heads, d) for part in self.parts]  # [P, B, heads, D]
        # position p's RoPE rows [2, 1, D]: cos (for q and k), signed sin (for the swapped pairs)
        self.rope_at = list(torch.stack([cos, sin], 1)[:, :, None].unbind(0))
        self.q = torch.empty(1, 1, batch, heads, d, dtype=dtype, device=dev)  # [G, T, B, heads, D]
        self.q_written = self.q.view(batch, heads, d)
        self.attended = self.t_heads.rows(batch).view(1, 1, batch, heads, d)  # [G, T, B, heads, D]
        self.act = self.t_mlp.rows(batch)  # [B, I]
        self.plan_one(self.q, self.attended, positions, values)

        def at(i: int, p: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
            part, qk = self.parts[i, p], self.qk[i, p]  # [B, 5 H]; [B, 2 heads, D]
            pairs = part[:, : 4 * hidden].view(batch, 2, 2 * heads, d)  # [B, (x, swapped), 2 heads, D]
            return part, pairs, pairs[:, 0], pairs[:, 1], qk, qk[:, :heads]

        # per layer and position: index_select's output, the rotation's operands and their halves, where the
        # rotated q and k go (k in place in the keys), q's part
        self.at = [[at(i, p) for p in range(positions)] for i in range(len(blocks))]
        self.calls = _one_call(self.blocks, self.weights_t) if self.direct and rows == exact.TILE else None

    def _norm(self, norm: Norm, tile: exact.Tile) -> Tensor:
        """The LayerNorm of the residual stream as a projection's input tile [rows, H']."""
        if self.direct:
            return torch.layer_norm(self.res_tiles, (self.hidden,), norm.weight, norm.bias, norm.eps)
        tile.rows(self.batch).copy_(torch.layer_norm(self.res, (self.hidden,), norm.weight, norm.bias, norm.eps))
        return tile.buf

    def _attend(self, i: int, position: int) -> None:
        """Layer i's RoPE of the projected q and k (k written in place in the keys), q scaled, the attention of the
        position written into the output projection's tile."""
        part, pairs, x_cos, swapped_sin, qk_at, q_at = self.at[i][position]
        torch.index_select(self.qkv_rows, 1, self.gather, out=part)
        torch.mul(pairs, self.rope_at[position], out=pairs)  # x * cos, swapped * signed sin
        torch.add(x_cos, swapped_sin, out=qk_at)  # q and k rotated, k in place in the keys
        torch.mul(q_at, self.scale_t, out=self.q_written)
        self.attend_one(i, position)

    def step(self, x: Tensor, position: int) -> Tensor:
        if self.calls is None:
            return self._step_tiles(x, position)
        # one tile of rows, H aligned, every bias there: each norm's output is its projection's tile, each
        # projection the one torch.addmm `exact.tiles_linear_into` makes (the same call, without its dispatch)
        res, tiles, shape, final = self.res, self.res_tiles, (self.hidden,), self.final
        res.copy_(x)
        for i, (ln_in, qkv_b, qkv_t, o_b, o_t, ln_post, fc_in_b, fc_in_t, fc_out_b, fc_out_t) in enumerate(self.calls):
            normed = torch.layer_norm(tiles, shape, ln_in.weight, ln_in.bias, ln_in.eps)
            torch.addmm(qkv_b, normed, qkv_t, out=self.qkv)  # [rows, 3 H]: q, k, v
            self._attend(i, position)
            torch.addmm(o_b, self.t_heads.buf, o_t, out=self.o_out)
            res.add_(self.o_rows)
            normed = torch.layer_norm(tiles, shape, ln_post.weight, ln_post.bias, ln_post.eps)
            torch.addmm(fc_in_b, normed, fc_in_t, out=self.fc_in_out)
            self.act_into(self.fc_in_rows, self.act)
            torch.addmm(fc_out_b, self.t_mlp.buf, fc_out_t, out=self.fc_out_out)
            res.add_(self.fc_out_rows)
        return torch.layer_norm(tiles, shape, final.weight, final.bias, final.eps)

    def _step_tiles(self, x: Tensor, position: int) -> Tensor:
        """`step` through `exact.tiles_linear_into` and `_norm`: several tiles of rows, H not aligned, or no bias."""
        n, res, th = self.batch, self.res, self.t_hidden
        res.copy_(x)
        for i, w in enumerate(self.blocks):
            qkv_t, o_t, fc_in_t, fc_out_t = self.weights_t[i]
            exact.tiles_linear_into(self._norm(w.ln_in, th), n, qkv_t, w.qkv_bias, self.qkv)  # [B, 3 H]: q, k, v
            self._attend(i, position)
            self.t_heads.linear_into(n, o_t, w.o_bias, self.o_out)
            res.add_(self.o_rows)
            exact.tiles_linear_into(self._norm(w.ln_post, th), n, fc_in_t, w.fc_in_bias, self.fc_in_out)
            self.act_into(self.fc_in_rows, self.act)
            self.t_mlp.linear_into(n, fc_out_t, w.fc_out_bias, self.fc_out_out)
            res.add_(self.fc_out_rows)
        return self._norm(self.final, th)


def _one_call(blocks: Sequence[LnBlock],
              weights_t: Sequence[tuple[Tensor, Tensor, Tensor, Tensor]]) -> list[_Calls] | None:
    """Per block (ln_in, qkv bias, qkv weight_t, o bias, o weight_t, ln_post, fc_in bias, fc_in weight_t,
    fc_out bias, fc_out weight_t), or None where a bias is missing."""
    out = []
    for b, (qkv_t, o_t, fc_in_t, fc_out_t) in zip(blocks, weights_t):
        if b.qkv_bias is None or b.o_bias is None or b.fc_in_bias is None or b.fc_out_bias is None:
            return None
        out.append((b.ln_in, b.qkv_bias, qkv_t, b.o_bias, o_t, b.ln_post, b.fc_in_bias, fc_in_t, b.fc_out_bias,
                    fc_out_t))
    return out
