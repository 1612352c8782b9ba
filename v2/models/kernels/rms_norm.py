"""Fused RMSNorm kernels: the backbone's norm in one Triton program per row instead of eight kernels.

Owns: `rms_norm_fused(x, weight, eps)` = weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype), computed in
float32 as the reference does, with the same two roundings as the torch form (the normalised row to
x's dtype, then the product with the weight to the weight's dtype), and `add_rms_norm_fused`, which does
the residual add before it and returns the sum too. The mean's summation order and the reciprocal square
root's rounding (approximate on a GPU, as torch's `rsqrt` is) may differ from the torch form. The
backbone runs two norms and two residual adds per layer: on a GPU these are two launches instead of
eighteen. `embed_rms_norm_fused`: a drawn code's embedding row, the running sum of a frame's code rows, and
optionally the row's RMSNorm (the input norm of the decoder it feeds), one launch for a code group.
Must not know: the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


def add_rms_norm_fused(x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The residual step and the next norm in one pass: s = x + delta (rounded to x's dtype), then
    (s, rms_norm(s)). x, delta [..., D] of one dtype."""
    d = x.shape[-1]
    if delta.dtype != x.dtype or delta.shape != x.shape:
        raise ValueError(f"add_rms_norm_fused: delta {tuple(delta.shape)} {delta.dtype} must match x "
                         f"{tuple(x.shape)} {x.dtype}")
    rows, more = x.reshape(-1, 1, d).contiguous(), delta.reshape(-1, 1, d).contiguous()  # [N, 1, D]
    total = torch.empty_like(rows)
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    _rms_norm_kernel[(rows.shape[0], 1)](rows, weight, out, rows.stride(0), rows.stride(1), d, eps, more, total,
                                         HAS_DELTA=True, BLOCK_D=max(16, triton.next_power_of_2(d)))
    return total.view(x.shape), out.view(x.shape)


def rms_norm_fused(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x [..., D] (unit stride in D), weight [D] -> [..., D] in the promoted dtype of weight and x."""
    d = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    # [R, M, D]: a view for the backbone's q/k head splits too; rows of a 2-D input go on the large grid axis
    rows = x.reshape(-1, 1, d) if x.dim() < 3 else x.reshape(-1, x.shape[-2], d)
    out_dtype = torch.promote_types(weight.dtype, x.dtype)
    out = torch.empty(rows.shape, dtype=out_dtype, device=x.device)  # [R, M, D]
    _rms_norm_kernel[(rows.shape[0], rows.shape[1])](
        rows, weight, out, rows.stride(0), rows.stride(1), d, eps, rows, rows, HAS_DELTA=False,
        BLOCK_D=max(16, triton.next_power_of_2(d)))
    return out.view(*x.shape[:-1], d)


def embed_rms_norm_fused(codes: Tensor, table: Tensor, acc: Tensor, weight: Tensor | None, eps: float, *, first: bool,
                         add: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """codes [B] int64; table [V, H]; acc [B, H] the frame's running sum of code rows, updated in place (set to the
    row when `first`, else acc + row, rounded as torch's add). Returns e = table[codes] [B, H] and, with `weight`
    [H], rms_norm(e) * weight [B, H] (else None). With `add` [B, H] (the last code): acc is left alone and the
    result is (acc + e) + add [B, H] (the frame's sum plus another row), None."""
    b, h = acc.shape
    if (table.shape[1] != h or table.stride(1) != 1 or table.dtype != acc.dtype or codes.shape != (b,)
            or not acc.is_contiguous() or (add is not None and (add.shape != acc.shape or add.dtype != acc.dtype))):
        raise ValueError(f"embed_rms_norm_fused: codes {tuple(codes.shape)}, table {tuple(table.shape)} {table.dtype}, "
                         f"acc {tuple(acc.shape)} {acc.dtype}")
    e = torch.empty_like(acc)
    y = torch.empty_like(acc) if weight is not None and add is None else e
    extra = acc if add is None else add.contiguous()
    _embed_rms_norm_kernel[(b,)](codes, table, table.stride(0), acc, weight if weight is not None else acc, extra, e, y,
                                 h, eps, FIRST=first, NORM=weight is not None and add is None, FINAL=add is not None,
                                 BLOCK_D=max(16, triton.next_power_of_2(h)))
    return e, (y if weight is not None and add is None else None)


if triton is not None:

    @triton.jit
    def _embed_rms_norm_kernel(code_ptr, table_ptr, stride_t, acc_ptr, w_ptr, add_ptr, e_ptr, y_ptr, dim, eps,
                               FIRST: tl.constexpr, NORM: tl.constexpr, FINAL: tl.constexpr, BLOCK_D: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        col = tl.arange(0, BLOCK_D)
        mask = col < dim
        code = tl.load(code_ptr + r).to(tl.int64)
        e = tl.load(table_ptr + code * stride_t + col, mask=mask, other=0.0)
        if FIRST:
            total = e
        else:  # the running sum, rounded as torch's `acc + e`
            acc = tl.load(acc_ptr + r * dim + col, mask=mask, other=0.0)
            total = (acc.to(tl.float32) + e.to(tl.float32)).to(e.dtype)
        if FINAL:  # (the codes' sum) + another row, as `frame + row`
            more = tl.load(add_ptr + r * dim + col, mask=mask, other=0.0)
            tl.store(e_ptr + r * dim + col, (total.to(tl.float32) + more.to(tl.float32)).to(e.dtype), mask=mask)
        else:
            tl.store(acc_ptr + r * dim + col, total, mask=mask)
            tl.store(e_ptr + r * dim + col, e, mask=mask)
            if NORM:  # as `_rms_norm_kernel`
                h = e.to(tl.float32)
                rstd = tl.rsqrt(tl.div_rn(tl.sum(h * h, 0), dim * 1.0) + eps)
                w = tl.load(w_ptr + col, mask=mask, other=0.0)
                y = (w.to(tl.float32) * (h * rstd).to(e.dtype).to(tl.float32)).to(y_ptr.dtype.element_ty)
                tl.store(y_ptr + r * dim + col, y, mask=mask)

    @triton.jit
    def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, stride_r, stride_m, dim, eps, delta_ptr, total_ptr,
                         HAS_DELTA: tl.constexpr, BLOCK_D: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        m = tl.program_id(1).to(tl.int64)
        col = tl.arange(0, BLOCK_D)
        mask = col < dim
        x = tl.load(x_ptr + r * stride_r + m * stride_m + col, mask=mask, other=0.0)
        if HAS_DELTA:  # the residual add first, rounded as torch's `x + delta` is; the sum is kept
            more = tl.load(delta_ptr + r * dim + col, mask=mask, other=0.0)
            x = (x.to(tl.float32) + more.to(tl.float32)).to(x.dtype)
            tl.store(total_ptr + r * dim + col, x, mask=mask)
        h = x.to(tl.float32)
        rstd = tl.rsqrt(tl.div_rn(tl.sum(h * h, 0), dim * 1.0) + eps)
        y = (h * rstd).to(x.dtype)  # rounded to the input's dtype, as `h.to(dtype)` does
        w = tl.load(w_ptr + col, mask=mask, other=0.0)
        out = (w.to(tl.float32) * y.to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + (r * tl.num_programs(1) + m) * dim + col, out, mask=mask)
