"""Rotary position embeddings in the two layouts the models use.

Owns: inverse frequencies, rotate-half (NeoX/Qwen) and interleaved (GPT-J) cos/sin tables at integer
positions of any shape, and applying them to [B, heads, T, D] tensors. Angles are float32.
Must not know: any model.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


@functools.lru_cache(maxsize=32)
def rope_inv_freq(head_dim: int, base: float, device: torch.device) -> Tensor:
    """[head_dim / 2] float32 inverse frequencies base^(-2j/head_dim), made once per device (read-only)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (base ** exponent)


def rotate_half_cos_sin(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos/sin [B, T, head_dim] for rotate-half RoPE at integer positions [B, T]."""
    freqs = positions[..., None] * rope_inv_freq(head_dim, base, positions.device)  # [B, T, D/2], float32
    emb = torch.cat([freqs, freqs], dim=-1)  # [B, T, D]
    return emb.cos(), emb.sin()


def apply_rotate_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, heads, T, D]; cos/sin [B, T, D] (float32)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)  # [B, 1, T, D]
    return x * cos + rotated * sin


def interleaved_cos_sin(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos/sin [..., head_dim] for interleaved (GPT-J) RoPE at integer positions [...]; each value
    repeated for both members of its pair."""
    freqs = positions[..., None] * rope_inv_freq(head_dim, base, positions.device)  # [..., D/2], float32
    return freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)


def apply_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, heads, T, D]; pairs (x0, x1) rotate as (x0 cos - x1 sin, x1 cos + x0 sin)."""
    rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # [-x1, x0, -x3, x2, ...]
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)
