"""The local transformer's LayerNorms fused with what comes before them, one launch each.

Owns: `add_layer_norm_fused(x, delta, weight, bias, eps) -> (s, y)`: s = x + delta rounded to x's dtype (as
torch's `x + delta`), y = (s - mean) * rstd * weight + bias in float32 and rounded once to the output dtype
(as torch's `layer_norm` computes), mean and variance over the last dimension; and `embed_layer_norm_fused`
for a micro-step's input: a drawn code's embedding row, its LayerNorm (the first block's ln_1), and the
running sum of the frame's code embeddings (the next backbone row's), with the last code adding the
assistant-slot row instead of a norm. Sums in the torch form's order, each rounded as torch rounds it;
the norm's summation order and reciprocal square root's rounding may differ from torch's. One program per
row. A local step has two add + norm launches (after attention; after the MLP with the next block's ln_1
or ln_f) and one embedding launch: three instead of seven.
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


def embed_layer_norm_fused(codes: Tensor, table: Tensor, acc: Tensor, weight: Tensor | None, bias: Tensor | None,
                           eps: float, *, first: bool, last_row: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """codes [B] int64; table [V, H]; acc [B, H] the running sum, updated in place (first: set to the row).
    Returns (e, y): e = table[codes] [B, H], y = layer_norm(e) [B, H]. With `last_row` [H] (the last code):
    no norm; returns (last_row + (acc + e), that same tensor): the next backbone row's embedding."""
    b, h = acc.shape
    if table.shape[1] != h or table.stride(1) != 1 or table.dtype != acc.dtype or codes.shape != (b,):
        raise ValueError(f"embed_layer_norm_fused: codes {tuple(codes.shape)}, table {tuple(table.shape)} "
                         f"{table.dtype}, acc {tuple(acc.shape)} {acc.dtype}")
    final = last_row is not None
    e = torch.empty_like(acc)
    y = torch.empty_like(acc)
    w, bb = (weight, bias) if not final else (acc, acc)  # unread without a norm
    _embed_layer_norm_kernel[(b,)](codes, table, table.stride(0), acc, w, bb, last_row if final else acc, e, y,
                                   h, eps, FIRST=first, FINAL=final, BLOCK_D=max(16, triton.next_power_of_2(h)))
    return (y, y) if final else (e, y)


if triton is not None:

    @triton.jit
    def _embed_layer_norm_kernel(code_ptr, table_ptr, stride_t, acc_ptr, w_ptr, b_ptr, last_ptr, e_ptr, y_ptr,
                                 dim, eps, FIRST: tl.constexpr, FINAL: tl.constexpr, BLOCK_D: tl.constexpr):
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
        if FINAL:  # the slot's row + the codes' sum, as `embed_tokens(slot) + summed`
            last = tl.load(last_ptr + col, mask=mask, other=0.0)
            tl.store(y_ptr + r * dim + col, (last.to(tl.float32) + total.to(tl.float32)).to(e.dtype), mask=mask)
        else:
            tl.store(acc_ptr + r * dim + col, total, mask=mask)
            tl.store(e_ptr + r * dim + col, e, mask=mask)
            h = e.to(tl.float32)
            mean = tl.sum(h, axis=0) / dim
            centred = tl.where(mask, h - mean, 0.0)
            rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / dim + eps)
            w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + r * dim + col, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)

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
