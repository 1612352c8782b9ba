"""Fused SwiGLU activation: silu(gate) * up from the fused gate/up projection, one launch instead of two.

Owns: `silu_mul_fused(gate_up)` for gate_up [..., 2 I] (gate first, as `chunk(2)` splits it) -> [..., I],
rounded as the torch form is (silu's output to the activation dtype, then the product). silu is
computed in float32 as x / (1 + exp(-x)); the exponential's last bit may differ from torch's.
Must not know: the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton

BLOCK = 1024  # columns per program


def silu_mul_fused(gate_up: Tensor) -> Tensor:
    width = gate_up.shape[-1]
    if width % 2:
        raise ValueError(f"silu_mul_fused: the last dim ({width}) must hold gate and up halves")
    rows = gate_up.reshape(-1, width).contiguous()  # [N, 2 I]
    out = torch.empty(rows.shape[0], width // 2, dtype=gate_up.dtype, device=gate_up.device)  # [N, I]
    _silu_mul_kernel[(rows.shape[0], triton.cdiv(width // 2, BLOCK))](rows, out, width // 2, BLOCK=BLOCK)
    return out.view(*gate_up.shape[:-1], width // 2)


if triton is not None:

    @triton.jit
    def _silu_mul_kernel(x_ptr, out_ptr, half, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = col < half
        gate = tl.load(x_ptr + row * 2 * half + col, mask=mask, other=0.0)
        up = tl.load(x_ptr + row * 2 * half + half + col, mask=mask, other=0.0)
        g = gate.to(tl.float32)
        act = tl.div_rn(g, 1.0 + tl.exp(-g)).to(gate.dtype)  # silu, rounded as F.silu's output is
        tl.store(out_ptr + row * half + col, (act.to(tl.float32) * up.to(tl.float32)).to(gate.dtype), mask=mask)
