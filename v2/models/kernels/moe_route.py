"""A mixture-of-experts router in one launch: the router's matmul, softmax over the experts, top-k, renormalisation.

Owns: `route_fused(rows, gate, top_k, renormalise)` and, for decode rows, `add_norm_route` (the residual add
and the RMSNorm before the block in the same launch: rms_norm.py's roundings, then the routing from the normed
row, the router's sums over all of H at once, EB router rows a step). `route_fused`: rows [N, H], the router's
weight gate [E, H] -> (weights [N, k] of the rows' dtype, experts [N, k] int64), highest probability first, what moe.py's forward computes
with `route(F.linear(rows, gate), ...)` then `weights.to(rows.dtype)`: the logits accumulated in float32 over H
(BLOCK_H at a time, a fixed order) and rounded to the rows' dtype as the matmul's output is, the softmax in
float32 (max, exp, sum, divide), the k largest by repeated arg-max with ties to the lowest index, and with
`renormalise` the k weights divided by their sum (float32, one fixed tree order). One program per row, the
row's E logits in registers (E up to a few hundred). The matmul's and the exponential's last bits may differ
from torch's, so a near-tie between two experts may rank them otherwise than the torch form does.
Must not know: the experts, the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


BLOCK_H = 64  # router columns per step


def route_fused(rows: Tensor, gate: Tensor, top_k: int, renormalise: bool) -> tuple[Tensor, Tensor]:
    if (rows.dim() != 2 or gate.dim() != 2 or gate.shape[1] != rows.shape[1] or gate.dtype != rows.dtype
            or not 0 < top_k <= gate.shape[0]):
        raise ValueError(f"route_fused: rows {tuple(rows.shape)} {rows.dtype} [N, H] and gate {tuple(gate.shape)} "
                         f"{gate.dtype} [E, H] of the rows' dtype, with E >= top_k ({top_k})")
    x, w = rows.contiguous(), gate.contiguous()
    n, h = x.shape
    e = w.shape[0]
    weights = torch.empty(n, top_k, dtype=rows.dtype, device=x.device)  # [N, k]
    experts = torch.empty(n, top_k, dtype=torch.long, device=x.device)  # [N, k]
    _route_kernel[(n,)](x, w, weights, experts, e, H=h, K=top_k, K_PAD=triton.next_power_of_2(top_k),
                        E_PAD=triton.next_power_of_2(e), BLOCK_H=BLOCK_H, RENORM=renormalise)
    return weights, experts


EB = 8  # router rows per step of `add_norm_route`


def add_norm_route(x: Tensor, delta: Tensor, norm_weight: Tensor, eps: float, gate: Tensor, top_k: int,
                   renormalise: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The residual add, the RMSNorm after it and the router in one launch (a decode row's MoE entry): x, delta
    [N, H] -> (s = x + delta, h = rms_norm(s), weights [N, k], experts [N, k]), s and h rounded as
    `add_rms_norm_fused`'s, the routing as `route_fused`'s from h (its matmul summed over all of H at once)."""
    n, h = x.shape
    e = gate.shape[0]
    if (delta.shape != x.shape or delta.dtype != x.dtype or norm_weight.shape != (h,) or norm_weight.dtype != x.dtype
            or gate.shape[1:] != (h,) or gate.dtype != x.dtype or not 0 < top_k <= e):
        raise ValueError(f"add_norm_route: x {tuple(x.shape)} {x.dtype}, delta {tuple(delta.shape)} {delta.dtype}, "
                         f"norm_weight {tuple(norm_weight.shape)}, gate {tuple(gate.shape)} {gate.dtype}: expected "
                         f"[N, H] rows, a [H] norm and an [E, H] router of one dtype, E >= top_k ({top_k})")
    rows, more = x.contiguous(), delta.contiguous()
    total, normed = torch.empty_like(rows), torch.empty_like(rows)  # [N, H] each
    weights = torch.empty(n, top_k, dtype=x.dtype, device=x.device)  # [N, k]
    experts = torch.empty(n, top_k, dtype=torch.long, device=x.device)  # [N, k]
    _add_norm_route_kernel[(n,)](rows, more, norm_weight, gate.contiguous(), total, normed, weights, experts, e, eps,
                                 H=h, H_PAD=triton.next_power_of_2(h), K=top_k,
                                 K_PAD=triton.next_power_of_2(top_k), E_PAD=triton.next_power_of_2(e), EB=EB,
                                 RENORM=renormalise)
    return total, normed, weights, experts


if triton is not None:

    @triton.jit
    def _route_kernel(x_ptr, g_ptr, w_ptr, e_ptr, num_experts, H: tl.constexpr, K: tl.constexpr,
                      K_PAD: tl.constexpr, E_PAD: tl.constexpr, BLOCK_H: tl.constexpr, RENORM: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, E_PAD)
        ok = cols < num_experts
        red = tl.arange(0, BLOCK_H)
        acc = tl.zeros([E_PAD], tl.float32)
        for h0 in range(0, H, BLOCK_H):  # the router's matmul, a fixed order over H
            hh = h0 + red
            xs = tl.load(x_ptr + row * H + hh, mask=hh < H, other=0.0).to(tl.float32)  # [BLOCK_H]
            g = tl.load(g_ptr + cols[:, None].to(tl.int64) * H + hh[None, :], mask=ok[:, None] & (hh < H)[None, :],
                        other=0.0).to(tl.float32)  # [E, BLOCK_H]
            acc += tl.sum(g * xs[None, :], 1)
        _choose(acc, cols, ok, w_ptr, e_ptr, row, K, K_PAD, RENORM)

    @triton.jit
    def _choose(acc, cols, ok, w_ptr, e_ptr, row, K: tl.constexpr, K_PAD: tl.constexpr, RENORM: tl.constexpr):
        """Router sums acc [E] (float32) -> row's k experts and weights, stored."""
        dtype = w_ptr.dtype.element_ty
        x = tl.where(ok, acc.to(dtype).to(tl.float32), float("-inf"))  # the logits, rounded as F.linear's output
        p = tl.exp(x - tl.max(x, 0))
        p = tl.where(ok, p, 0.0)
        p = tl.div_rn(p, tl.sum(p, 0))  # [E]: the softmax
        ranks = tl.arange(0, K_PAD)
        chosen = tl.zeros([K_PAD], tl.float32)
        for r in tl.static_range(K):  # rank order: the largest left, ties to the lowest index
            best = tl.argmax(p, 0, tie_break_left=True)
            chosen = tl.where(ranks == r, tl.max(p, 0), chosen)
            tl.store(e_ptr + row * K + r, best.to(tl.int64))
            p = tl.where(cols == best, -1.0, p)  # taken: below every probability
        if RENORM:
            chosen = tl.div_rn(chosen, tl.sum(chosen, 0))
        tl.store(w_ptr + row * K + ranks, chosen.to(dtype), mask=ranks < K)

    @triton.jit
    def _add_norm_route_kernel(x_ptr, d_ptr, nw_ptr, g_ptr, s_ptr, h_ptr, w_ptr, e_ptr, num_experts, eps,
                               H: tl.constexpr, H_PAD: tl.constexpr, K: tl.constexpr, K_PAD: tl.constexpr,
                               E_PAD: tl.constexpr, EB: tl.constexpr, RENORM: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        col = tl.arange(0, H_PAD)
        mask = col < H
        x = tl.load(x_ptr + row * H + col, mask=mask, other=0.0)
        more = tl.load(d_ptr + row * H + col, mask=mask, other=0.0)
        x = (x.to(tl.float32) + more.to(tl.float32)).to(x.dtype)  # the residual add, as rms_norm.py's
        tl.store(s_ptr + row * H + col, x, mask=mask)
        hf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.div_rn(tl.sum(hf * hf, 0), H * 1.0) + eps)
        y = (hf * rstd).to(x.dtype)
        nw = tl.load(nw_ptr + col, mask=mask, other=0.0)
        h = (nw.to(tl.float32) * y.to(tl.float32)).to(x.dtype)  # the norm, as rms_norm.py's
        tl.store(h_ptr + row * H + col, h, mask=mask)
        hv = h.to(tl.float32)
        cols = tl.arange(0, E_PAD)
        ok = cols < num_experts
        acc = tl.zeros([E_PAD], tl.float32)
        for e0 in range(0, E_PAD, EB):  # EB router rows at a time, each a sum over all of H
            er = e0 + tl.arange(0, EB)
            g = tl.load(g_ptr + er[:, None].to(tl.int64) * H + col[None, :],
                        mask=(er < num_experts)[:, None] & mask[None, :], other=0.0).to(tl.float32)  # [EB, H]
            part = tl.sum(g * hv[None, :], 1)  # [EB]
            acc += tl.sum(tl.where(cols[:, None] == er[None, :], part[None, :], 0.0), 1)
        _choose(acc, cols, ok, w_ptr, e_ptr, row, K, K_PAD, RENORM)
