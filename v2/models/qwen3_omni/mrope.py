"""M-RoPE (multimodal rotary positions) of Qwen3-Omni's thinker and talker: cos/sin tables from (t, h, w) positions.

Owns: which of the three position components each rotary frequency reads (interleaved: frequency j reads h when
`j % 3 == 1 and j < 3 * section[1]`, w when `j % 3 == 2 and j < 3 * section[2]`, else t; not interleaved:
the first section[0] frequencies t, the next section[1] h, the last section[2] w), and the rotate-half cos/sin
rows [B, T, head_dim] those angles make (the tables `v2/models/qwen3.py`'s attention applies). With all three
components equal (text and audio) this is plain RoPE, bit for bit (`rope.rotate_half_cos_sin`).
Must not know: models, weights, caches, requests.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from v2.models.persist import persistent
from v2.models.rope import rope_inv_freq


@functools.lru_cache(maxsize=16)
@persistent
def axis_of_frequency(head_dim: int, section: tuple[int, int, int], interleaved: bool,
                      device: torch.device) -> Tensor:
    """[head_dim / 2] int64: the position component (0 t, 1 h, 2 w) frequency j reads (read-only)."""
    half = head_dim // 2
    if sum(section) != half:
        raise ValueError(f"mrope_section {list(section)} must sum to head_dim / 2 ({half})")
    if interleaved:
        axes = [1 if j % 3 == 1 and j < 3 * section[1] else 2 if j % 3 == 2 and j < 3 * section[2] else 0
                for j in range(half)]
    else:
        axes = [0] * section[0] + [1] * section[1] + [2] * section[2]
    return torch.tensor(axes, dtype=torch.int64, device=device)


def mrope_cos_sin(positions: Tensor, head_dim: int, base: float, section: tuple[int, int, int],
                  interleaved: bool) -> tuple[Tensor, Tensor]:
    """positions [3, B, T] (t, h, w; integers) -> cos/sin [B, T, head_dim] float32 (rotate-half layout)."""
    if positions.dim() != 3 or positions.shape[0] != 3:
        raise ValueError(f"M-RoPE positions must be [3, B, T], got {list(positions.shape)}")
    axes = axis_of_frequency(head_dim, section, interleaved, positions.device)
    chosen = positions.permute(1, 2, 0)[..., axes]  # [B, T, D/2]: each frequency's own component
    freqs = chosen * rope_inv_freq(head_dim, base, positions.device)  # [B, T, D/2] float32
    emb = torch.cat([freqs, freqs], dim=-1)  # [B, T, D]
    return emb.cos(), emb.sin()


def text_positions(positions: Tensor) -> Tensor:
    """[B, T] positions of text / audio rows -> [3, B, T] (all three components equal)."""
    return positions[None].expand(3, *positions.shape)
