"""The local transformer's residual add and the LayerNorm after it, one launch.

Owns: `add_layer_norm_fused(x, delta, weight, bias, eps) -> (s, y)`: s = x + delta rounded to x's dtype (as
torch's `x + delta`), y = (s - mean) * rstd * weight + bias in float32 and rounded once to the output dtype
(as torch's `layer_norm` computes), mean and variance over the last dimension. Summation order and the
reciprocal square root's rounding may differ from torch's. One program per row. Each local step has two
of these (after attention, then after the MLP with the next block's ln_1 or ln_f): two launches instead
of four.
Must not know: the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


def add_layer_norm_fused(x: Tensor, delta: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """x, delta [..., D] of one dtype; weight, bias [D] -> (x + delta, layer_norm(x + delta)), both [..., D]."""
    d = x.shape[-1]
    if delta.dtype != x.dtype or delta.shape != x.shape or weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"add_layer_norm_fused: x {tuple(x.shape)} {x.dtype}, delta {tuple(delta.shape)} "
                         f"{delta.dtype}, weight {tuple(weight.shape)}, bias {tuple(bias.shape)}")
    rows, more = x.reshape(-1, d).contiguous(), delta.reshape(-1, d).contiguous()  # [N, D]
    total = torch.empty_like(rows)
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    _add_layer_norm_kernel[(rows.shape[0],)](rows, more, weight, bias, total, out, d, eps,
                                             BLOCK_D=max(16, triton.next_power_of_2(d)))
    return total.view(x.shape), out.view(x.shape)


if triton is not None:

    @triton.jit
    def _add_layer_norm_kernel(x_ptr, delta_ptr, w_ptr, b_ptr, total_ptr, out_ptr, dim, eps,
                               BLOCK_D: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        col = tl.arange(0, BLOCK_D)
        mask = col < dim
        x = tl.load(x_ptr + r * dim + col, mask=mask, other=0.0)
        more = tl.load(delta_ptr + r * dim + col, mask=mask, other=0.0)
        s = (x.to(tl.float32) + more.to(tl.float32)).to(x.dtype)  # rounded as torch's add
        tl.store(total_ptr + r * dim + col, s, mask=mask)
        h = s.to(tl.float32)
        mean = tl.sum(h, axis=0) / dim
        centred = tl.where(mask, h - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / dim + eps)
        w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + r * dim + col, (centred * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)
