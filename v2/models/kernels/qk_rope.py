"""Fused q/k norm + rotate-half RoPE + KV-cache write: one Triton kernel per backbone layer.

Owns: `qk_norm_rope_write(qkv, ...)`. From the fused q/k/v projection of N tokens it returns the normed,
rotated queries and writes the normed, rotated keys and the values into the slot cache at each token's
(slot, position). Program (token, head) does one query head, or one kv head's key and value. The
arithmetic and its roundings follow the torch form step by step (RMSNorm in float32, rounded to the
activation dtype, times the weight; then x * cos + rotate_half(x) * sin with cos/sin in the activation
dtype; the launch turns off multiply-add fusion, which would skip a rounding), so the results differ
only by the norm's summation order and reciprocal square root. It replaces about twelve kernels per layer.
Without q/k norm weights (both None: a Llama stack) the heads are rotated as projected, and the results
equal the torch form's. The cos/sin tables are the caller's (plain or Llama-3 scaled frequencies alike).
Must not know: the model, requests. Head dims are powers of two (`fits`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


def fits(head_dim: int) -> bool:
    """Whether the kernel takes heads of this size (a power of two)."""
    return head_dim > 0 and head_dim & (head_dim - 1) == 0


def qk_norm_rope_write(qkv: Tensor, num_heads: int, num_kv_heads: int, q_weight: Tensor | None,
                       k_weight: Tensor | None, eps: float, cos: Tensor, sin: Tensor, k_cache: Tensor,
                       v_cache: Tensor, write_slots: Tensor, write_pos: Tensor) -> Tensor:
    """qkv [B, T, (Hq + 2 Hkv) * D]; q_weight/k_weight [D] the q/k norms' weights, or both None (no norms);
    cos/sin [B, T, D] float32; k_cache/v_cache [S + 1, Hkv, L, D]; write_slots/write_pos [B, T].
    Returns q [B, T, Hq, D]; keys and values land in the caches."""
    b, t, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    if not fits(d) or k_cache.dtype != qkv.dtype or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError(f"qk_norm_rope_write: head_dim {d} must be a power of two and the cache "
                         f"{k_cache.dtype} must match the activations {qkv.dtype}")
    if (q_weight is None) != (k_weight is None):
        raise ValueError("qk_norm_rope_write: q_weight and k_weight are both given (q/k norms) or both None")
    rows = qkv.reshape(b * t, width)  # [N, W] (a view of the projection's output)
    q = torch.empty(b * t, num_heads, d, dtype=qkv.dtype, device=qkv.device)
    norm = q_weight is not None
    _qk_rope_kernel[(b * t, num_heads + num_kv_heads)](
        rows, rows.stride(0), q_weight if norm else rows, k_weight if norm else rows, cos.reshape(b * t, d).contiguous(),
        sin.reshape(b * t, d).contiguous(), q, k_cache, v_cache,
        write_slots.reshape(-1).contiguous(), write_pos.reshape(-1).contiguous(),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), eps, NUM_Q=num_heads, NUM_KV=num_kv_heads, HEAD_DIM=d, NORM=norm,
        enable_fp_fusion=False)  # keep x * cos and rotate_half(x) * sin rounded apart, as torch does
    return q.view(b, t, num_heads, d)


if triton is not None:

    @triton.jit
    def _normed(x_ptr, w_ptr, d, rstd, dtype: tl.constexpr):
        """weight[d] * (x[d] * rstd rounded to dtype), rounded as torch's bf16/fp32 product is."""
        y = (tl.load(x_ptr + d).to(tl.float32) * rstd).to(dtype)
        return (tl.load(w_ptr + d).to(tl.float32) * y.to(tl.float32)).to(dtype)

    @triton.jit
    def _qk_rope_kernel(qkv_ptr, stride_tok, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr,
                        slot_ptr, pos_ptr, sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, eps,
                        NUM_Q: tl.constexpr, NUM_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
                        NORM: tl.constexpr):
        tok = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        d = tl.arange(0, HEAD_DIM)
        half: tl.constexpr = HEAD_DIM // 2
        partner = (d + half) % HEAD_DIM  # rotate_half pairs d with d +- D/2
        dtype = q_ptr.dtype.element_ty
        is_q = head < NUM_Q
        col = tl.where(is_q, head * HEAD_DIM, NUM_Q * HEAD_DIM + (head - NUM_Q) * HEAD_DIM)
        x_ptr = qkv_ptr + tok * stride_tok + col
        if NORM:
            x = tl.load(x_ptr + d).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, 0) / HEAD_DIM + eps)
            w_ptr = tl.where(is_q, qw_ptr, kw_ptr)
            y = _normed(x_ptr, w_ptr, d, rstd, dtype).to(tl.float32)
            yp = _normed(x_ptr, w_ptr, partner, rstd, dtype).to(tl.float32)
        else:  # a Llama head: rotated as projected
            y = tl.load(x_ptr + d).to(tl.float32)
            yp = tl.load(x_ptr + partner).to(tl.float32)
        rotated = tl.where(d < half, -yp, yp)
        cos = tl.load(cos_ptr + tok * HEAD_DIM + d).to(dtype).to(tl.float32)
        sin = tl.load(sin_ptr + tok * HEAD_DIM + d).to(dtype).to(tl.float32)
        out = ((y * cos).to(dtype).to(tl.float32) + (rotated * sin).to(dtype).to(tl.float32)).to(dtype)
        if is_q:
            tl.store(q_ptr + (tok * NUM_Q + head) * HEAD_DIM + d, out)
        else:
            kvh = head - NUM_Q
            slot = tl.load(slot_ptr + tok).to(tl.int64)
            pos = tl.load(pos_ptr + tok)
            tl.store(k_ptr + slot * sk_s + kvh * sk_h + pos * sk_l + d, out)
            v = tl.load(qkv_ptr + tok * stride_tok + (NUM_Q + NUM_KV + kvh) * HEAD_DIM + d)
            tl.store(v_ptr + slot * sv_s + kvh * sv_h + pos * sv_l + d, v)
