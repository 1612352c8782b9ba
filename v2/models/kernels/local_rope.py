"""Fused local-transformer step input: interleaved RoPE on q and k and the frame's K/V writes, one launch.

Owns: `local_rope_write(qkv, heads, cos, sin, k_cache, v_cache, position)`. From the fused c_attn output of
one position for B rows it returns the rotated queries and writes the rotated keys and the values into
the frame's cache at `position`. Pairs (x0, x1) rotate as (x0 cos - x1 sin, x1 cos + x0 sin) with cos/sin
in the activation dtype and each product rounded before the add, as the torch form (`apply_interleaved`)
does; the launch turns off multiply-add fusion so the compiler keeps that rounding. It replaces seven
launches per local step.
Must not know: the model, sampling.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


def local_rope_write(qkv: Tensor, heads: int, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                     position: int) -> Tensor:
    """qkv [B, 1, 3 H]; cos, sin [D] (the position's row, activation dtype); k_cache, v_cache
    [B, heads, 13, D]. Returns q [B, heads, 1, D]."""
    b, t, width = qkv.shape
    d = width // (3 * heads)
    if t != 1 or d % 2 or k_cache.dtype != qkv.dtype or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError(f"local_rope_write: one position of an even head_dim with a cache of the activations' "
                         f"dtype, got qkv {tuple(qkv.shape)} {qkv.dtype}, cache {k_cache.dtype}")
    rows = qkv.reshape(b, width)  # [B, 3 H]
    q = torch.empty(b, heads, 1, d, dtype=qkv.dtype, device=qkv.device)
    _local_rope_kernel[(b, 2 * heads)](
        rows, rows.stride(0), cos.contiguous(), sin.contiguous(), q, k_cache, v_cache, position,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), HEADS=heads, HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
        enable_fp_fusion=False)
    return q


if triton is not None:

    @triton.jit
    def _local_rope_kernel(qkv_ptr, stride_row, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, position,
                           sk_b, sk_h, sk_p, sv_b, sv_h, sv_p,
                           HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        mask = d < HEAD_DIM
        partner = d ^ 1  # interleaved pairs (2i, 2i + 1)
        dtype = q_ptr.dtype.element_ty
        base = qkv_ptr + row * stride_row + head * HEAD_DIM  # q heads, then k heads, in c_attn's order
        x = tl.load(base + d, mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(base + partner, mask=mask, other=0.0).to(tl.float32)
        rotated = tl.where(d % 2 == 0, -xp, xp)  # [-x1, x0, -x3, x2, ...]
        cos = tl.load(cos_ptr + d, mask=mask, other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + d, mask=mask, other=0.0).to(tl.float32)
        out = ((x * cos).to(dtype).to(tl.float32) + (rotated * sin).to(dtype).to(tl.float32)).to(dtype)
        if head < HEADS:
            tl.store(q_ptr + (row * HEADS + head) * HEAD_DIM + d, out, mask=mask)
        else:
            kh = head - HEADS
            tl.store(k_ptr + row * sk_b + kh * sk_h + position * sk_p + d, out, mask=mask)
            v = tl.load(qkv_ptr + row * stride_row + (2 * HEADS + kh) * HEAD_DIM + d, mask=mask, other=0.0)
            tl.store(v_ptr + row * sv_b + kh * sv_h + position * sv_p + d, v, mask=mask)
