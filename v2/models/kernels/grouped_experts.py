"""The grouped-expert matmul of a mixture-of-experts block: every routed (token, rank) slot in three launches.

Owns: `grouped_experts(rows, weights, experts, gate_up, down)` = for each token n, sum over its ranks r (in rank
order) of weights[n, r] * down[e] . (silu(gate[e] . x_n) * up[e] . x_n), e = experts[n, r]; gate_up [E, 2I, H]
(gate rows first) and down [E, H, I] as moe.py's `Experts` stores them. The slots (N k of them) are sorted by
expert (a stable sort, on the device, no host sync), and a tile schedule maps program i of a fixed-size grid
to (expert, a run of at most BLOCK_M of that expert's slots); programs past the schedule's end return at once,
so the grid depends on N, k and E only (a CUDA graph can hold it). Launch 1 (`_gate_up_kernel`): one program
per (expert tile, tile of I): the gate and up tiles of its slots' rows over H (`tl.dot`, float32 accumulation),
each rounded to the activations' dtype as a matmul's output is, then silu (rounded) times up (rounded), into
the slot's row of `act` [N k, I]. Launch 2 (`_down_kernel`): one program per (expert tile, tile of H): act .
down[e]^T over I, rounded, times the slot's routing weight, rounded, into `y` [N k, H]. Launch 3
(`_combine_kernel`): per token, y[n, 0] + y[n, 1] + ... in rank order, each sum rounded to the dtype (the
torch form's `total = total + ...`).
Batched == alone by construction: BLOCK_M/N/K are fixed (never chosen from N), every slot's row is computed
by the same program shape with the same reduction order over H and I, and no slot's arithmetic reads another
slot's values (masked rows load zeros), so a token's output does not depend on the other tokens present.
Must not know: routing, the model, checkpoints.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.kernels import tl, triton

BLOCK_M = 16  # slots per expert tile (the small-batch decode case: a token step routes few slots per expert)
BLOCK_N = 64  # output columns per program
BLOCK_K = 64  # reduction slice per step
BLOCK_C = 1024  # columns per combine program


def tile_bound(slots: int, num_experts: int) -> int:
    """Programs enough for any routing: sum_e ceil(c_e / BLOCK_M) <= slots // BLOCK_M + min(E, slots)."""
    return slots // BLOCK_M + min(num_experts, slots)


def schedule(experts: Tensor, num_experts: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """experts [N, k] -> (order [N k]: slot ids sorted by expert, stable; tile_expert [T], tile_start [T],
    tile_end [T]: tile i covers order[tile_start[i] : tile_end[i]] of expert tile_expert[i]; past the last
    tile, tile_expert is E and the range is empty). T = `tile_bound`. Device ops only, no host sync."""
    flat = experts.reshape(-1)  # [N k]
    s = flat.numel()
    order = torch.sort(flat, stable=True).indices  # [N k]
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat))  # [E]
    first = torch.cumsum(counts, 0) - counts  # [E]: where expert e's slots begin in `order`
    tiles = (counts + BLOCK_M - 1) // BLOCK_M  # [E]
    ends = torch.cumsum(tiles, 0)  # [E]
    t = torch.arange(tile_bound(s, num_experts), device=flat.device)  # [T]
    tile_expert = torch.searchsorted(ends, t, right=True)  # [T]: E past the last tile
    e = tile_expert.clamp(max=num_experts - 1)
    start = first[e] + (t - (ends[e] - tiles[e])) * BLOCK_M  # [T]
    end = torch.minimum(start + BLOCK_M, first[e] + counts[e])
    end = torch.where(tile_expert < num_experts, end, start)  # past the schedule: empty
    return order, tile_expert, start, end


def grouped_experts(rows: Tensor, weights: Tensor, experts: Tensor, gate_up: Tensor, down: Tensor) -> Tensor:
    """rows [N, H], weights [N, k] (rows' dtype), experts [N, k] int64, gate_up [E, 2I, H], down [E, H, I]
    -> [N, H]: the routed experts' outputs weighted and summed in rank order (module docstring)."""
    n, h = rows.shape
    num_experts, two_i, _ = gate_up.shape
    k, inter = experts.shape[1], two_i // 2
    if (gate_up.shape[2] != h or down.shape != (num_experts, h, inter) or weights.shape != experts.shape
            or experts.shape[0] != n or gate_up.dtype != rows.dtype or down.dtype != rows.dtype):
        raise ValueError(f"grouped_experts: rows {tuple(rows.shape)} {rows.dtype}, weights {tuple(weights.shape)}, "
                         f"experts {tuple(experts.shape)}, gate_up {tuple(gate_up.shape)} {gate_up.dtype}, down "
                         f"{tuple(down.shape)} {down.dtype}: expected gate_up [E, 2I, {h}], down [E, {h}, I], "
                         f"weights and experts [{n}, k], weights of the rows' dtype")
    x = rows.contiguous()
    w = weights.to(rows.dtype).contiguous().view(-1)  # [N k]
    gu, dn = gate_up.contiguous(), down.contiguous()
    order, tile_expert, start, end = schedule(experts, num_experts)
    slots = n * k
    act = torch.empty(slots, inter, dtype=rows.dtype, device=rows.device)  # [N k, I]: slot n k + r's activation
    y = torch.empty(slots, h, dtype=rows.dtype, device=rows.device)  # [N k, H]: its weighted expert output
    out = torch.empty(n, h, dtype=rows.dtype, device=rows.device)  # [N, H]
    tiles = tile_expert.shape[0]
    ieee = rows.dtype == torch.float32
    _gate_up_kernel[(tiles, triton.cdiv(inter, BLOCK_N))](
        x, gu, act, order, tile_expert, start, end, k, inter, H=h, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K, IEEE=ieee)
    _down_kernel[(tiles, triton.cdiv(h, BLOCK_N))](
        act, dn, w, y, order, tile_expert, start, end, h, I=inter, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K, IEEE=ieee)
    _combine_kernel[(n, triton.cdiv(h, BLOCK_C))](y, out, h, K=k, BLOCK=BLOCK_C)
    return out


if triton is not None:

    @triton.jit
    def _gate_up_kernel(x_ptr, w_ptr, act_ptr, order_ptr, tile_expert_ptr, start_ptr, end_ptr, k, inter,
                        H: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        IEEE: tl.constexpr):
        tile = tl.program_id(0)
        s0 = tl.load(start_ptr + tile)
        s1 = tl.load(end_ptr + tile)
        if s0 < s1:
            e = tl.load(tile_expert_ptr + tile).to(tl.int64)
            idx = s0 + tl.arange(0, BLOCK_M)
            ok = idx < s1
            slot = tl.load(order_ptr + idx, mask=ok, other=0)  # [M]: slot ids n k + r
            token = slot // k
            cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            col_ok = cols < inter
            red = tl.arange(0, BLOCK_K)
            base = w_ptr + e * 2 * inter * H
            gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for k0 in range(0, H, BLOCK_K):  # a fixed order over H
                kk = k0 + red
                a = tl.load(x_ptr + token[:, None] * H + kk[None, :], mask=ok[:, None] & (kk < H)[None, :],
                            other=0.0)  # [M, K]: the slots' token rows
                w_mask = (kk < H)[:, None] & col_ok[None, :]
                w_g = tl.load(base + cols[None, :].to(tl.int64) * H + kk[:, None], mask=w_mask, other=0.0)  # [K, N]
                w_u = tl.load(base + (inter + cols[None, :]).to(tl.int64) * H + kk[:, None], mask=w_mask,
                              other=0.0)  # [K, N]
                if IEEE:
                    gate = tl.dot(a, w_g, gate, input_precision="ieee")
                    up = tl.dot(a, w_u, up, input_precision="ieee")
                else:
                    gate = tl.dot(a, w_g, gate)
                    up = tl.dot(a, w_u, up)
            dtype = act_ptr.dtype.element_ty
            g = gate.to(dtype).to(tl.float32)  # rounded as the projection's output is
            silu = tl.div_rn(g, 1.0 + tl.exp(-g)).to(dtype)  # rounded as F.silu's output is
            result = (silu.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)
            tl.store(act_ptr + slot[:, None] * inter + cols[None, :], result, mask=ok[:, None] & col_ok[None, :])

    @triton.jit
    def _down_kernel(act_ptr, w_ptr, rw_ptr, y_ptr, order_ptr, tile_expert_ptr, start_ptr, end_ptr, hidden,
                     I: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     IEEE: tl.constexpr):
        tile = tl.program_id(0)
        s0 = tl.load(start_ptr + tile)
        s1 = tl.load(end_ptr + tile)
        if s0 < s1:
            e = tl.load(tile_expert_ptr + tile).to(tl.int64)
            idx = s0 + tl.arange(0, BLOCK_M)
            ok = idx < s1
            slot = tl.load(order_ptr + idx, mask=ok, other=0)  # [M]
            cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            col_ok = cols < hidden
            red = tl.arange(0, BLOCK_K)
            base = w_ptr + e * hidden * I
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for k0 in range(0, I, BLOCK_K):  # a fixed order over I
                kk = k0 + red
                a = tl.load(act_ptr + slot[:, None] * I + kk[None, :], mask=ok[:, None] & (kk < I)[None, :],
                            other=0.0)  # [M, K]
                w_d = tl.load(base + cols[None, :].to(tl.int64) * I + kk[:, None],
                              mask=(kk < I)[:, None] & col_ok[None, :], other=0.0)  # [K, N]: down rows, transposed
                if IEEE:
                    acc = tl.dot(a, w_d, acc, input_precision="ieee")
                else:
                    acc = tl.dot(a, w_d, acc)
            dtype = y_ptr.dtype.element_ty
            rw = tl.load(rw_ptr + slot, mask=ok, other=0.0).to(tl.float32)  # [M]: the routing weights
            result = (acc.to(dtype).to(tl.float32) * rw[:, None]).to(dtype)  # rounded, then weighted and rounded
            tl.store(y_ptr + slot[:, None] * hidden + cols[None, :], result, mask=ok[:, None] & col_ok[None, :])

    @triton.jit
    def _combine_kernel(y_ptr, out_ptr, hidden, K: tl.constexpr, BLOCK: tl.constexpr):
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < hidden
        dtype = out_ptr.dtype.element_ty
        total = tl.load(y_ptr + n * K * hidden + cols, mask=ok, other=0.0)
        for r in tl.static_range(1, K):  # rank order, each sum rounded as the torch form's
            term = tl.load(y_ptr + (n * K + r) * hidden + cols, mask=ok, other=0.0)
            total = (total.to(tl.float32) + term.to(tl.float32)).to(dtype)
        tl.store(out_ptr + n * hidden + cols, total, mask=ok)
