"""The local transformer's attention for one position, one launch: RoPE on q and k, the K/V writes, attention.

Owns: `local_attention_step(qkv, heads, cos, sin, k_cache, v_cache, position)`. From the fused c_attn output
of one position for B rows it rotates the queries and keys (interleaved pairs (x0, x1) -> (x0 cos - x1 sin,
x1 cos + x0 sin), each product rounded to the activations' dtype before the add, as the torch form
`apply_interleaved` does; the launch turns off multiply-add fusion so the compiler keeps that rounding),
writes the rotated key and the value into the frame's cache at `position`, and attends over positions
0..position (scores, softmax and the weighted sum in float32, the output rounded once), returning the
heads' outputs side by side, [B, 1, heads * D], ready for c_proj. One program per (row, head): the frame
has at most 13 positions. It replaces the RoPE, the two cache writes and scaled-dot-product attention
(on the meta device ten launches, five of them dtype copies) of every local step.
Must not know: the model, sampling.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from v2.models.kernels import tl, triton

MAX_POSITIONS = 16  # a frame's positions (13) fit one block


def local_attention_step(qkv: Tensor, heads: int, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                         position: int) -> Tensor:
    """qkv [B, 1, 3 H]; cos, sin [D] (the position's row, activation dtype); k_cache, v_cache
    [B, heads, P, D] with P <= 16, written at `position`. Returns [B, 1, H] (H = heads * D)."""
    b, t, width = qkv.shape
    d = width // (3 * heads)
    if (t != 1 or d % 2 or k_cache.dtype != qkv.dtype or v_cache.dtype != qkv.dtype or k_cache.stride(-1) != 1
            or v_cache.stride(-1) != 1 or not 0 <= position < min(k_cache.shape[2], MAX_POSITIONS)):
        raise ValueError(f"local_attention_step: one position of an even head_dim below {MAX_POSITIONS} with a cache "
                         f"of the activations' dtype, got qkv {tuple(qkv.shape)} {qkv.dtype}, cache "
                         f"{tuple(k_cache.shape)} {k_cache.dtype}, position {position}")
    rows = qkv.reshape(b, width)  # [B, 3 H]
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(b, 1, heads * d, dtype=qkv.dtype, device=qkv.device)  # [B, 1, H]
    _local_attention_kernel[(b, heads)](
        rows, rows.stride(0), cos.contiguous(), sin.contiguous(), k_cache, v_cache, out, position,
        1.0 / math.sqrt(d), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0),
        v_cache.stride(1), v_cache.stride(2), HEADS=heads, HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_P=MAX_POSITIONS, enable_fp_fusion=False)
    return out


if triton is not None:

    @triton.jit
    def _rotated(base, d, partner, mask, cos, sin, dtype):
        """One head's interleaved rotation, rounded as `apply_interleaved` rounds it."""
        x = tl.load(base + d, mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(base + partner, mask=mask, other=0.0).to(tl.float32)
        rotated = tl.where(d % 2 == 0, -xp, xp)  # [-x1, x0, -x3, x2, ...]
        return ((x * cos).to(dtype).to(tl.float32) + (rotated * sin).to(dtype).to(tl.float32)).to(dtype)

    @triton.jit
    def _local_attention_kernel(qkv_ptr, stride_row, cos_ptr, sin_ptr, k_ptr, v_ptr, out_ptr, position, scale,
                                sk_b, sk_h, sk_p, sv_b, sv_h, sv_p,
                                HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                                BLOCK_P: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        mask = d < HEAD_DIM
        partner = d ^ 1
        dtype = out_ptr.dtype.element_ty
        cos = tl.load(cos_ptr + d, mask=mask, other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + d, mask=mask, other=0.0).to(tl.float32)
        base = qkv_ptr + row * stride_row  # q heads, then k heads, then v heads, in c_attn's order
        q = _rotated(base + head * HEAD_DIM, d, partner, mask, cos, sin, dtype)
        k = _rotated(base + (HEADS + head) * HEAD_DIM, d, partner, mask, cos, sin, dtype)
        v = tl.load(base + (2 * HEADS + head) * HEAD_DIM + d, mask=mask, other=0.0)
        k_row = k_ptr + row * sk_b + head * sk_h
        v_row = v_ptr + row * sv_b + head * sv_h
        tl.store(k_row + position * sk_p + d, k, mask=mask)
        tl.store(v_row + position * sv_p + d, v, mask=mask)
        p = tl.arange(0, BLOCK_P)
        earlier = (p[:, None] < position) & mask[None, :]  # written by this frame's earlier steps
        keys = tl.load(k_row + p[:, None] * sk_p + d[None, :], mask=earlier, other=0.0)
        values = tl.load(v_row + p[:, None] * sv_p + d[None, :], mask=earlier, other=0.0)
        here = p[:, None] == position  # this step's key and value from registers, not re-read
        keys = tl.where(here, k[None, :], keys).to(tl.float32)  # [P, D]
        values = tl.where(here, v[None, :], values).to(tl.float32)
        scores = tl.sum(q.to(tl.float32)[None, :] * keys, axis=1) * scale  # [P]
        scores = tl.where(p <= position, scores, float("-inf"))
        weights = tl.exp(scores - tl.max(scores, axis=0))
        weights = tl.where(p <= position, weights, 0.0)
        out = tl.sum(weights[:, None] * values, axis=0) / tl.sum(weights, axis=0)  # [D]
        tl.store(out_ptr + (row * HEADS + head) * HEAD_DIM + d, out.to(dtype), mask=mask)
