"""A `Qwen3Layer`'s parameters as the CPU row passes read them, and the q/k norm they share.

A shared building block of the paged decode row (decode_row.py, decode_row_kept.py) and the frame pass
(frame_stack.py, frame_stack_kept.py): both run `Qwen3Layer`'s arithmetic through buffers on a CPU and read the same
operands. Owns: `RowLayer` (the projections' `exact.aligned_weight`s and their transposes ([in', out]: the operand
F.linear's mm takes), the norms' weights and modules (their eps read at each call), the q and k norm weights stacked
per head [Hq + Hkv, D]) and `qk_norm_into` (q_norm over the q heads and k_norm over the k heads of rows
[B, Hq + Hkv, D] at once: one RMS and one weight product, two where their eps differ; `exact.rms_norm_into`).
A `RowLayer` is made once per parameter version by its holder (`persist.ParamVersions` says when).
Must not know: what a pass does with the operands beyond the norm, caches, requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from v2.models import exact

if TYPE_CHECKING:
    from v2.models.qwen3 import Qwen3Layer, RMSNorm


class RowLayer:
    """One layer's operands: `qkv`, `o`, `gate_up`, `down` (aligned weights [out, in']) and their transposes
    (`qkv_t`, ... [in', out]: views), `norm_in` / `norm_post` (weights) with `norms` (the modules: eps), and
    `qk_w` [Hq + Hkv, D] with `qk_norms` (q_norm, k_norm) where the layer has q/k norms (`qk_w` None otherwise)."""

    def __init__(self, layer: Qwen3Layer, hq: int, hkv: int) -> None:
        att, mlp, aligned = layer.self_attn, layer.mlp, exact.aligned_weight
        self.qkv, self.o = aligned(att.qkv_proj.weight), aligned(att.o_proj.weight)
        self.gate_up, self.down = aligned(mlp.gate_up_proj.weight), aligned(mlp.down_proj.weight)
        self.qkv_t, self.o_t, self.gate_up_t, self.down_t = self.qkv.t(), self.o.t(), self.gate_up.t(), self.down.t()
        self.norm_in, self.norm_post = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        self.norms: tuple[RMSNorm, RMSNorm] = (layer.input_layernorm, layer.post_attention_layernorm)
        self.qk_w: Tensor | None = None
        if att.qk_norm:
            self.qk_norms: tuple[RMSNorm, RMSNorm] = (att.q_norm, att.k_norm)
            self.qk_w = torch.cat([att.q_norm.weight.expand(hq, -1), att.k_norm.weight.expand(hkv, -1)])


def qk_norm_into(w: RowLayer, qk: Tensor, hq: int, sq: Tensor, ms: Tensor, out: Tensor) -> None:
    """q_norm of the q heads and k_norm of the k heads of float32 rows qk [B, Hq + Hkv, D] written into out
    [B, Hq + Hkv, D] (its steps into sq [B, Hq + Hkv, D] and ms [B, Hq + Hkv, 1]); w has q/k norms. Each head's norm
    is over its own D values, so the heads normed at once are each the bits of its own norm."""
    qn, kn = w.qk_norms
    if qn.eps == kn.eps:
        assert w.qk_w is not None
        exact.rms_norm_into(qk, w.qk_w, qn.eps, sq, ms, out)
    else:
        exact.rms_norm_into(qk[:, :hq], qn.weight, qn.eps, sq[:, :hq], ms[:, :hq], out[:, :hq])
        exact.rms_norm_into(qk[:, hq:], kn.weight, kn.eps, sq[:, hq:], ms[:, hq:], out[:, hq:])
