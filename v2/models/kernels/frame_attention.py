"""A per-frame decoder's attention for its new positions in one launch: q/k norms or none, RoPE, K/V writes, attention.

Owns: `frame_attention(qkv, ...)`. A per-frame decoder (a code predictor over a frame's groups) runs every row of a batch
at the same few positions of a small cache (at most 32 positions, one slot per row). From the fused q/k/v
projection of T consecutive positions `position .. position + T - 1` of B rows it norms (when q/k norm
weights are given; a stack without q/k norms passes None and the heads go straight to RoPE) and rotates the
queries and keys with the arithmetic and roundings of `qk_rope` (RMSNorm in float32, rounded to the
activations' dtype, times the weight; x cos + rotate_half(x) sin with cos/sin rounded to that dtype;
multiply-add fusion off), writes the keys and values into the cache (row b: slot b) and attends causally
over positions 0 .. p (scores, softmax and the weighted sum in float32, the output rounded once), returning
the heads side by side, [B, T, Hq * D], ready for o_proj. One program per (row, kv head) does the query
heads of its group (GQA). It replaces the q/k-norm + RoPE + cache-write kernel, the position bookkeeping
and the decode attention of every layer step: one launch instead of about ten.
Must not know: the model, sampling. Head dims are powers of two.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from v2.models.kernels import tl, triton

MAX_FRAME_POSITIONS = 32  # a frame's positions fit one block of at most this many
MAX_POSITIONS = 16  # the frames the q/k-normed callers check against (one block of 16, as built and measured)


def frame_attention(qkv: Tensor, num_heads: int, num_kv_heads: int, q_weight: Tensor | None, k_weight: Tensor | None,
                    eps: float, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor, position: int) -> Tensor:
    """qkv [B, T, (Hq + 2 Hkv) D]; q_weight/k_weight [D] the q/k norms' weights, both None for no q/k norm; cos/sin
    [P, D] float32 (the frame's positions 0 .. P - 1); k_cache, v_cache [S, Hkv, P, D] with S >= B (row b writes
    slot b at `position + t`). Returns [B, T, Hq D]."""
    b, t, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    p = k_cache.shape[2]
    if (d & (d - 1) or num_heads % num_kv_heads or k_cache.dtype != qkv.dtype or v_cache.dtype != qkv.dtype
            or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1 or k_cache.shape[0] < b
            or tuple(cos.shape) != (p, d) or (q_weight is None) != (k_weight is None)
            or not 0 <= position < position + t <= min(p, MAX_FRAME_POSITIONS)):
        raise ValueError(f"frame_attention: positions {position}..{position + t - 1} of a frame of at most "
                         f"{MAX_FRAME_POSITIONS} with a power-of-two head_dim, a cache of the activations' dtype and "
                         f"both q/k norm weights or neither (q_weight {q_weight is not None}, k_weight "
                         f"{k_weight is not None}), got qkv "
                         f"{tuple(qkv.shape)} {qkv.dtype} ({num_heads} + 2 x {num_kv_heads} heads), cache "
                         f"{tuple(k_cache.shape)} {k_cache.dtype}, cos {tuple(cos.shape)}")
    rows = qkv.reshape(b * t, width)  # [B T, W]
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    group = num_heads // num_kv_heads
    qk_norm = q_weight is not None and k_weight is not None
    out = torch.empty(b, t, num_heads * d, dtype=qkv.dtype, device=qkv.device)  # [B, T, Hq D]
    _frame_attention_kernel[(b, num_kv_heads)](
        rows, rows.stride(0), q_weight if qk_norm else rows, k_weight if qk_norm else rows,  # no norm: not read
        cos.contiguous(), sin.contiguous(), k_cache, v_cache, out,
        position, eps, 1.0 / math.sqrt(d), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), T=t, NUM_Q=num_heads, NUM_KV=num_kv_heads,
        GROUP=group, BLOCK_G=max(2, triton.next_power_of_2(group)), HEAD_DIM=d,
        BLOCK_P=max(16, triton.next_power_of_2(p)), QK_NORM=qk_norm,
        enable_fp_fusion=False)  # keep x * cos and rotate_half(x) * sin rounded apart, as torch does
    return out


if triton is not None:

    @triton.jit
    def _rotated(x_ptr, w_ptr, d, partner, valid, cos, sin, eps, HEAD_DIM: tl.constexpr, dtype: tl.constexpr,
                 QK_NORM: tl.constexpr):
        """Rows of heads [G, D] (x_ptr: each row's first element): RMSNorm times the weight (when QK_NORM), then
        rotate-half RoPE, each step rounded as the torch form (and `qk_rope`) rounds it."""
        x = tl.load(x_ptr + d, mask=valid, other=0.0).to(tl.float32)
        xp = tl.load(x_ptr + partner, mask=valid, other=0.0).to(tl.float32)
        if QK_NORM:
            rstd = tl.rsqrt(tl.sum(x * x, 1) / HEAD_DIM + eps)  # [G]
            w = tl.load(w_ptr + d).to(tl.float32)
            y = (w * (x * rstd[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
            wp = tl.load(w_ptr + partner).to(tl.float32)
            yp = (wp * (xp * rstd[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
        else:
            y = x
            yp = xp
        rotated = tl.where(d < HEAD_DIM // 2, -yp, yp)
        return ((y * cos).to(dtype).to(tl.float32) + (rotated * sin).to(dtype).to(tl.float32)).to(dtype)

    @triton.jit
    def _frame_attention_kernel(qkv_ptr, stride_tok, qw_ptr, kw_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, out_ptr,
                                position, eps, scale, sk_s, sk_h, sk_p, sv_s, sv_h, sv_p,
                                T: tl.constexpr, NUM_Q: tl.constexpr, NUM_KV: tl.constexpr, GROUP: tl.constexpr,
                                BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_P: tl.constexpr,
                                QK_NORM: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        dtype = out_ptr.dtype.element_ty
        d = tl.arange(0, HEAD_DIM)[None, :]  # [1, D]
        partner = (d + HEAD_DIM // 2) % HEAD_DIM  # rotate_half pairs d with d +- D/2
        whole = d < HEAD_DIM  # [1, D]: one head
        k_slot = k_ptr + row * sk_s + kvh * sk_h
        v_slot = v_ptr + row * sv_s + kvh * sv_h
        for t in tl.static_range(T):  # this program's kv head at each new position: normed, rotated, written
            at = position + t
            base = qkv_ptr + (row * T + t) * stride_tok
            cos = tl.load(cos_ptr + at * HEAD_DIM + d).to(dtype).to(tl.float32)
            sin = tl.load(sin_ptr + at * HEAD_DIM + d).to(dtype).to(tl.float32)
            k = _rotated(base + (NUM_Q + kvh) * HEAD_DIM, kw_ptr, d, partner, whole, cos, sin, eps, HEAD_DIM, dtype, QK_NORM)
            tl.store(k_slot + at * sk_p + d, k)
            v = tl.load(base + (NUM_Q + NUM_KV + kvh) * HEAD_DIM + d)
            tl.store(v_slot + at * sv_p + d, v)
        tl.debug_barrier()  # the writes above are read back below by this program's other threads
        g = tl.arange(0, BLOCK_G)[:, None]  # [G, 1]
        live = g < GROUP
        heads = kvh * GROUP + g  # the query heads that read this kv head
        p = tl.arange(0, BLOCK_P)
        for t in tl.static_range(T):
            at = position + t
            seen = p <= at  # [P] positions 0 .. at
            keys = tl.load(k_slot + p[:, None] * sk_p + d, mask=seen[:, None], other=0.0).to(tl.float32)  # [P, D]
            values = tl.load(v_slot + p[:, None] * sv_p + d, mask=seen[:, None], other=0.0).to(tl.float32)
            base = qkv_ptr + (row * T + t) * stride_tok
            cos = tl.load(cos_ptr + at * HEAD_DIM + d).to(dtype).to(tl.float32)
            sin = tl.load(sin_ptr + at * HEAD_DIM + d).to(dtype).to(tl.float32)
            q = _rotated(base + heads * HEAD_DIM, qw_ptr, d, partner, live, cos, sin, eps, HEAD_DIM, dtype, QK_NORM)
            scores = tl.sum(q.to(tl.float32)[:, None, :] * keys[None, :, :], axis=2) * scale  # [G, P]
            scores = tl.where(seen[None, :], scores, float("-inf"))
            weights = tl.exp(scores - tl.max(scores, axis=1)[:, None])
            weights = tl.where(seen[None, :], weights, 0.0)
            out = tl.sum(weights[:, :, None] * values[None, :, :], axis=1) / tl.sum(weights, axis=1)[:, None]  # [G, D]
            tl.store(out_ptr + ((row * T + t) * NUM_Q + heads) * HEAD_DIM + d, out.to(dtype), mask=live)
