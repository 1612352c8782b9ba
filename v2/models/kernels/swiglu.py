"""Fused SwiGLU: silu(gate) * up from the fused gate/up projection, one launch instead of two; or with the projection.

Owns: `silu_mul_fused(gate_up)` for gate_up [..., 2 I] (gate first, as `chunk(2)` splits it) -> [..., I],
rounded as the torch form is (silu's output to the activation dtype, then the product). silu is
computed in float32 as x / (1 + exp(-x)); the exponential's last bit may differ from torch's.
`gate_up_swiglu(x, weight)`: the gate/up projection and the activation in one launch (a small-row matmul:
each program computes a tile of gate and the matching tile of up with `tl.dot`, float32 accumulation, rounds
both to the activations' dtype as the matmul's output is, then the activation as above): for decoders whose
steps are a few rows (a per-frame code predictor), where launches, not arithmetic, bound the step.
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


def gate_up_swiglu(x: Tensor, weight: Tensor) -> Tensor:
    """x [..., K]; weight [2 I, K] (gate rows first, as a fused `gate_up_proj`) -> silu(x W_g^T) * (x W_u^T) [..., I]."""
    k = x.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != k or weight.shape[0] % 2 or weight.dtype != x.dtype:
        raise ValueError(f"gate_up_swiglu: x {tuple(x.shape)} {x.dtype} and weight {tuple(weight.shape)} "
                         f"{weight.dtype}: the weight must be [2 I, {k}] of x's dtype")
    rows = x.reshape(-1, k)  # [M, K]
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    m, i = rows.shape[0], weight.shape[0] // 2
    out = torch.empty(m, i, dtype=x.dtype, device=x.device)  # [M, I]
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    _gate_up_kernel[(triton.cdiv(m, block_m), triton.cdiv(i, GEMM_N))](
        rows, weight, out, m, i, rows.stride(0), weight.stride(0), weight.stride(1), K=k, BLOCK_M=block_m,
        BLOCK_N=GEMM_N, BLOCK_K=GEMM_K, IEEE=x.dtype == torch.float32)
    return out.view(*x.shape[:-1], i)


GEMM_N, GEMM_K = 64, 64  # output columns and reduction slice per program step

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

    @triton.jit
    def _gate_up_kernel(x_ptr, w_ptr, out_ptr, m, half, stride_x, stride_wn, stride_wk, K: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        red = tl.arange(0, BLOCK_K)
        row_ok = rows < m
        col_ok = cols < half
        gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):  # the reduction's length is the weight's: one build per layer shape
            kk = k0 + red
            a = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + kk[None, :],
                        mask=row_ok[:, None] & (kk < K)[None, :], other=0.0)  # [M, K]
            w_mask = (kk < K)[:, None] & col_ok[None, :]
            w_g = tl.load(w_ptr + cols[None, :].to(tl.int64) * stride_wn + kk[:, None] * stride_wk, mask=w_mask,
                          other=0.0)  # [K, N] (gate rows, transposed)
            w_u = tl.load(w_ptr + (half + cols[None, :]).to(tl.int64) * stride_wn + kk[:, None] * stride_wk,
                          mask=w_mask, other=0.0)  # [K, N] (up rows)
            if IEEE:
                gate = tl.dot(a, w_g, gate, input_precision="ieee")
                up = tl.dot(a, w_u, up, input_precision="ieee")
            else:
                gate = tl.dot(a, w_g, gate)
                up = tl.dot(a, w_u, up)
        dtype = out_ptr.dtype.element_ty
        g = gate.to(dtype).to(tl.float32)  # rounded as the projection's output is
        act = tl.div_rn(g, 1.0 + tl.exp(-g)).to(dtype)  # silu, rounded as F.silu's output is
        result = (act.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * half + cols[None, :], result,
                 mask=row_ok[:, None] & col_ok[None, :])
