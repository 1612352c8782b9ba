"""Rotary position embeddings in the two layouts the models use.

Owns: inverse frequencies (plain, and Llama-3's scaled form: `Llama3Scaling`, `llama3_inv_freq`),
rotate-half (NeoX/Qwen/Llama) and interleaved (GPT-J) cos/sin tables at integer positions of any shape,
and applying them to [B, heads, T, D] tensors. Angles are float32. For the CPU passes that rotate q and k through
buffers (the decode row, the frame pass): `rotate_half_table` (positions 0 .. P - 1's cos and signed sin rows) and
`rotate_half_swap` (the column index of each head's halves swapped: one `index_select`); from that table, the frame
kernels' unsigned rows (`rotate_half_rows`) and the interleaved layout's (`interleaved_order`: the same angles).
Must not know: any model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.persist import persistent


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama-3 scaled RoPE (`rope_type` "llama3"): long wavelengths slowed by `factor`, short ones kept,
    a smooth blend in between, all relative to `original_max_position_embeddings`."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@functools.lru_cache(maxsize=32)
@persistent
def rope_inv_freq(head_dim: int, base: float, device: torch.device) -> Tensor:
    """[head_dim / 2] float32 inverse frequencies base^(-2j/head_dim), made once per device (read-only)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (base ** exponent)


@functools.lru_cache(maxsize=32)
@persistent
def llama3_inv_freq(head_dim: int, base: float, scaling: Llama3Scaling, device: torch.device) -> Tensor:
    """[head_dim / 2] float32 Llama-3 scaled inverse frequencies (read-only), from the plain ones f with
    wavelength w = 2 pi / f: f / factor where w > original / low_freq_factor; f where w < original /
    high_freq_factor; between them (1 - s) f / factor + s f, s = (original / w - low) / (high - low)."""
    inv = rope_inv_freq(head_dim, base, device)
    s = scaling
    original = float(s.original_max_position_embeddings)
    wavelen = 2 * math.pi / inv
    low_wavelen, high_wavelen = original / s.low_freq_factor, original / s.high_freq_factor
    scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


def inv_freq(head_dim: int, base: float, scaling: Llama3Scaling | None, device: torch.device) -> Tensor:
    """The plain inverse frequencies, or Llama-3's scaled ones when `scaling` is given."""
    return rope_inv_freq(head_dim, base, device) if scaling is None else llama3_inv_freq(head_dim, base, scaling, device)


def rotate_half_cos_sin(positions: Tensor, head_dim: int, base: float,
                        scaling: Llama3Scaling | None = None) -> tuple[Tensor, Tensor]:
    """cos/sin [B, T, head_dim] for rotate-half RoPE at integer positions [B, T] (Llama-3 scaled
    frequencies when `scaling` is given)."""
    freqs = positions[..., None] * inv_freq(head_dim, base, scaling, positions.device)  # [B, T, D/2], float32
    emb = torch.cat([freqs, freqs], dim=-1)  # [B, T, D]
    return emb.cos(), emb.sin()


@persistent
def rotate_half_table(positions: int, head_dim: int, base: float, scaling: Llama3Scaling | None,
                      device: torch.device) -> Tensor:
    """[positions, 2, head_dim] float32: row p is (cos, signed sin) of `rotate_half_cos_sin` at position p, the sin
    row's first half negated (rotate-half's -x2 * sin as x2 * -sin: the same products). Made at once: an element's
    cos / sin does not depend on the tensor's shape (tests/models/test_decode_row.py holds the rows to calls of
    any batch, tests/models/test_rope.py to a lone position's, in every leg)."""
    cos, sin = rotate_half_cos_sin(torch.arange(positions, device=device)[:, None], head_dim, base,
                                   scaling)  # [P, 1, D] each
    sin[..., : head_dim // 2].neg_()
    return torch.cat([cos, sin], 1)  # [P, 2, D]


@functools.lru_cache(maxsize=32)
@persistent
def rotate_half_rows(positions: int, head_dim: int, base: float, scaling: Llama3Scaling | None,
                     device: torch.device) -> tuple[Tensor, Tensor]:
    """cos, sin [positions, head_dim] float32, contiguous, made once per arguments (read-only, so built before a
    captured graph reads them): `rotate_half_table`'s two rows, the sin row's sign taken back (a negation is exact),
    i.e. `rotate_half_cos_sin` at positions 0 .. P - 1, for the kernels that apply rotate-half's sign themselves."""
    table = rotate_half_table(positions, head_dim, base, scaling, device)  # [P, 2, D]
    cos, sin = table[:, 0].contiguous(), table[:, 1].contiguous()  # [P, D] each
    sin[:, : head_dim // 2].neg_()
    return cos, sin


@persistent
def interleaved_order(head_dim: int, device: torch.device) -> Tensor:
    """[head_dim] int64: the rotate-half columns in the interleaved (GPT-J) order, j and D/2 + j for pair j. Both
    layouts take angle j = position * inv_freq[j] (rotate-half at columns j and D/2 + j, interleaved at 2j and 2j + 1),
    so a rotate-half table's columns selected by it are the interleaved table, bit for bit; its signed sin row (the
    first half negated) becomes the interleaved swap's sign (-x1 sin, x0 sin: the even columns negated)."""
    half = torch.arange(head_dim // 2, device=device)  # [D/2]
    return torch.stack([half, half + head_dim // 2], 1).reshape(-1)  # [D]: 0, D/2, 1, D/2 + 1, ...


@persistent
def rotate_half_swap(heads: int, head_dim: int, device: torch.device) -> Tensor:
    """[heads * head_dim] int64: for rows of `heads` heads of head_dim ([.., heads * D]) the columns with each head's
    halves swapped (x[D/2:], x[:D/2]): rotate-half's rotated operand, its sign left to the sin row, by one
    `index_select`."""
    half = torch.arange(head_dim, device=device).roll(head_dim // 2)  # [D]
    return (torch.arange(heads, device=device)[:, None] * head_dim + half).reshape(-1)  # [heads D]


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
