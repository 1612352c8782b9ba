"""A mixture-of-experts router's choice in one launch: softmax over the experts, top-k, renormalisation.

Owns: `route_fused(logits, top_k, renormalise, dtype)`: router logits [N, E] -> (weights [N, k] of `dtype`,
experts [N, k] int64), highest probability first, what moe.py's `route` computes (then `weights.to(dtype)`):
the softmax in float32 (max, exp, sum, divide), the k largest by repeated arg-max with ties to the lowest
index, and with `renormalise` the k weights divided by their sum (float32, one fixed tree order). One program
per row, the row's E logits in registers (E up to a few thousand). The exponential's and the sums' last bits
may differ from torch's, so a near-tie between two experts may rank them otherwise than `route` does.
Must not know: the experts, the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton


def route_fused(logits: Tensor, top_k: int, renormalise: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    if logits.dim() != 2 or not 0 < top_k <= logits.shape[1]:
        raise ValueError(f"route_fused: logits {tuple(logits.shape)} must be [N, E] with E >= top_k ({top_k})")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    n, e = x.shape
    weights = torch.empty(n, top_k, dtype=dtype, device=x.device)  # [N, k]
    experts = torch.empty(n, top_k, dtype=torch.long, device=x.device)  # [N, k]
    _route_kernel[(n,)](x, weights, experts, e, x.stride(0), K=top_k, K_PAD=triton.next_power_of_2(top_k),
                        E_PAD=triton.next_power_of_2(e), RENORM=renormalise)
    return weights, experts


if triton is not None:

    @triton.jit
    def _route_kernel(x_ptr, w_ptr, e_ptr, num_experts, stride, K: tl.constexpr, K_PAD: tl.constexpr,
                      E_PAD: tl.constexpr, RENORM: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, E_PAD)
        ok = cols < num_experts
        x = tl.load(x_ptr + row * stride + cols, mask=ok, other=float("-inf")).to(tl.float32)
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
        tl.store(w_ptr + row * K + ranks, chosen.to(w_ptr.dtype.element_ty), mask=ranks < K)
