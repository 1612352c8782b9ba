"""A residual add, the RMSNorm after it and the matmul that reads the norm, in one launch.

Owns: `norm_linear(x, weight, norm_weight, eps, ...)`: s = x + delta (rounded to x's dtype, as torch's add; no delta:
s = x, or with `rows` the table rows x[rows]), h = norm_weight * (s * rsqrt(mean(s^2) + eps)).to(dtype) (the
roundings of `rms_norm.add_rms_norm_fused`), then h @ weight^T with float32 accumulation rounded to the dtype, as a
linear's output is; with `swiglu` the weight is a fused gate/up projection and the result is silu(gate) * up, rounded
as `swiglu.gate_up_swiglu`'s. Returns s too (the residual stream the next add reads; program column 0 stores it).
A small-row matmul (each program one [rows x columns] tile, `tl.dot`): every program first sums the squares of its
rows (two passes over s), so the norm needs no launch of its own. For decoders whose steps are a few rows (a
per-frame code predictor), where launches, not arithmetic, bound the step. The results differ from the torch form
only by the summation orders of the norm's mean and of the matmul, and the reciprocal square root.
Must not know: the model.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor

from v2.models.kernels import tl, triton

BLOCK_N, BLOCK_K = 64, 64  # output columns and reduction slice per program step


@overload
def norm_linear(x: Tensor, weight: Tensor, norm_weight: Tensor, eps: float, *, delta: Tensor | None = None,
                rows: Tensor | None = None, swiglu: bool = False, keep_sum: Literal[True] = True) -> tuple[Tensor, Tensor]:
    ...


@overload
def norm_linear(x: Tensor, weight: Tensor, norm_weight: Tensor, eps: float, *, delta: Tensor | None = None,
                rows: Tensor | None = None, swiglu: bool = False, keep_sum: Literal[False]) -> tuple[None, Tensor]:
    ...


def norm_linear(x: Tensor, weight: Tensor, norm_weight: Tensor, eps: float, *, delta: Tensor | None = None,
                rows: Tensor | None = None, swiglu: bool = False, keep_sum: bool = True) -> tuple[Tensor | None, Tensor]:
    """x [M, K] (or with `rows` [M] integer: a table [R, K] whose rows rows[m] are read); delta [M, K] or None;
    norm_weight [K]; weight [N, K] (any strides: a transposed view serves) of x's dtype. Returns (s [M, K] when
    `keep_sum`, else None; out [M, N], or [M, N / 2] with `swiglu`: gate rows first, as a fused `gate_up_proj`)."""
    k = x.shape[-1]
    m = rows.shape[0] if rows is not None else x.shape[0]
    if (x.dim() != 2 or x.stride(-1) != 1 or weight.dim() != 2 or weight.shape[1] != k or weight.dtype != x.dtype
            or norm_weight.shape != (k,) or (swiglu and weight.shape[0] % 2)
            or (delta is not None and (delta.shape != (m, k) or delta.dtype != x.dtype or delta.stride(-1) != 1))
            or (rows is not None and (rows.dim() != 1 or delta is not None))):
        raise ValueError(f"norm_linear: x {tuple(x.shape)} {x.dtype} (unit stride in K), weight {tuple(weight.shape)} "
                         f"{weight.dtype} [N, K] of x's dtype, norm_weight {tuple(norm_weight.shape)} [K], delta "
                         f"{None if delta is None else tuple(delta.shape)} [M, K], rows "
                         f"{None if rows is None else tuple(rows.shape)} [M] (without delta); swiglu {swiglu}")
    n = weight.shape[0] // 2 if swiglu else weight.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)  # [M, N]
    total = torch.empty(m, k, dtype=x.dtype, device=x.device) if keep_sum else out  # [M, K]
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    more = delta if delta is not None else x
    _norm_linear_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, BLOCK_N))](
        x, rows if rows is not None else x, x.stride(0), more, more.stride(0), norm_weight, weight, weight.stride(0),
        weight.stride(1), total, out, m, n, eps, K=k, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GATHER=rows is not None, DELTA=delta is not None, KEEP_SUM=keep_sum, SWIGLU=swiglu,
        IEEE=x.dtype == torch.float32)
    return (total if keep_sum else None), out


if triton is not None:

    @triton.jit
    def _sum_tile(x_ptr, src, stride_x, d_ptr, rows, stride_d, kk, mask, DELTA: tl.constexpr):
        """s's tile [M, K]: x's rows (+ delta's, rounded as torch's add)."""
        a = tl.load(x_ptr + src[:, None] * stride_x + kk[None, :], mask=mask, other=0.0)
        if DELTA:
            more = tl.load(d_ptr + rows[:, None].to(tl.int64) * stride_d + kk[None, :], mask=mask, other=0.0)
            a = (a.to(tl.float32) + more.to(tl.float32)).to(a.dtype)
        return a

    @triton.jit
    def _norm_linear_kernel(x_ptr, idx_ptr, stride_x, d_ptr, stride_d, nw_ptr, w_ptr, stride_wn, stride_wk, s_ptr,
                            out_ptr, m, n, eps, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, GATHER: tl.constexpr, DELTA: tl.constexpr, KEEP_SUM: tl.constexpr,
                            SWIGLU: tl.constexpr, IEEE: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        red = tl.arange(0, BLOCK_K)
        row_ok = rows < m
        col_ok = cols < n
        if GATHER:
            src = tl.load(idx_ptr + rows, mask=row_ok, other=0).to(tl.int64)
        else:
            src = rows.to(tl.int64)
        dtype = out_ptr.dtype.element_ty
        squares = tl.zeros([BLOCK_M], tl.float32)
        for k0 in range(0, K, BLOCK_K):  # pass 1: the norm's sum of squares (and s, from program column 0)
            kk = k0 + red
            mask = row_ok[:, None] & (kk < K)[None, :]
            a = _sum_tile(x_ptr, src, stride_x, d_ptr, rows, stride_d, kk, mask, DELTA)
            af = a.to(tl.float32)
            squares += tl.sum(af * af, 1)
            if KEEP_SUM:
                tl.store(s_ptr + rows[:, None].to(tl.int64) * K + kk[None, :], a, mask=mask & (tl.program_id(1) == 0))
        rstd = tl.rsqrt(tl.div_rn(squares, K * 1.0) + eps)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):  # pass 2: the normed rows times the weight
            kk = k0 + red
            mask = row_ok[:, None] & (kk < K)[None, :]
            a = _sum_tile(x_ptr, src, stride_x, d_ptr, rows, stride_d, kk, mask, DELTA)
            y = (a.to(tl.float32) * rstd[:, None]).to(dtype)  # rounded to the input's dtype, as the norm does
            nw = tl.load(nw_ptr + kk, mask=kk < K, other=0.0)
            h = (nw.to(tl.float32)[None, :] * y.to(tl.float32)).to(dtype)  # [M, K]
            w_mask = (kk < K)[:, None] & col_ok[None, :]
            w = tl.load(w_ptr + cols[None, :].to(tl.int64) * stride_wn + kk[:, None] * stride_wk, mask=w_mask,
                        other=0.0)  # [K, N]
            if IEEE:
                acc = tl.dot(h, w, acc, input_precision="ieee")
            else:
                acc = tl.dot(h, w, acc)
            if SWIGLU:
                w_u = tl.load(w_ptr + (n + cols[None, :]).to(tl.int64) * stride_wn + kk[:, None] * stride_wk,
                              mask=w_mask, other=0.0)  # [K, N] (up rows)
                if IEEE:
                    up = tl.dot(h, w_u, up, input_precision="ieee")
                else:
                    up = tl.dot(h, w_u, up)
        if SWIGLU:  # as `_gate_up_kernel`
            g = acc.to(dtype).to(tl.float32)
            act = tl.div_rn(g, 1.0 + tl.exp(-g)).to(dtype)
            result = (act.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)
        else:
            result = acc.to(dtype)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * n + cols[None, :], result, mask=row_ok[:, None] & col_ok[None, :])
