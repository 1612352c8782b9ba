"""The grouped-expert matmul of a mixture-of-experts block: every routed (token, rank) slot in three launches.

Owns: `grouped_experts(rows, weights, experts, gate_up, down)` = for each token n, sum over its ranks r (in rank
order) of weights[n, r] * down[e] . (silu(gate[e] . x_n) * up[e] . x_n), e = experts[n, r]; gate_up [E, 2I, H]
(gate rows first) and down [E, H, I] as moe.py's `Experts` stores them. The slots (n k + r, N k of them) are
grouped by expert inside the kernels: program (e, j) scans the slots' experts (CHUNK ids a step) and takes
expert e's slots in slot order, BLOCK_M at a time (`_slots_of`: the stable sort by expert, one tile of it, no
sort launch, no host sync, no schedule tensors); an expert with no slots costs its programs one scan. So the
grids are (E, column tiles) whatever the routing (a CUDA graph holds them), and the whole block is three
launches. Launch 1 (`_expert_gate_up_kernel`): per (expert, tile of I): the gate and up tiles of its slots'
token rows over H (`tl.dot`, float32 accumulation), each rounded to the activations' dtype as a matmul's
output is, then silu (rounded) times up (rounded), into the slot's row of `act` [N k, I]. Launch 2
(`_expert_down_kernel`): per (expert, tile of H): act . down[e]^T over I, rounded, times the slot's routing
weight, rounded, into `y` [N k, H]. Launch 3 (`_expert_combine_kernel`): per token, y[n, 0] + y[n, 1] + ... in
rank order, each sum rounded to the dtype (the torch form's `total = total + ...`), then, for the talker's
shared expert, + shared / (1 + exp(-z)) rounded step by step as moe.py's torch form is. A prefill's many slots
make each tile rescan them (N k / CHUNK steps of a few integer operations per tile): cheap beside the tile's
matmul at these widths.
Batched == alone by construction: BLOCK_M/N/K are fixed (never chosen from N), every slot's row is computed
by the same program shape with the same reduction order over H and I, and no slot's arithmetic reads another
slot's values (rows of other slots only share the tile; masked rows load zeros), so a token's output does not
depend on the other tokens present.
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
CHUNK = 128  # slot ids read per step of a program's scan for its expert's slots


def grouped_experts(rows: Tensor, weights: Tensor, experts: Tensor, gate_up: Tensor, down: Tensor,
                    shared: Tensor | None = None, shared_gate: Tensor | None = None) -> Tensor:
    """rows [N, H], weights [N, k] (rows' dtype), experts [N, k] int64, gate_up [E, 2I, H], down [E, H, I]
    -> [N, H]: the routed experts' outputs weighted and summed in rank order (module docstring); with `shared`
    [N, H] and `shared_gate` [N, 1] (a shared expert's output and its gate's logit) plus shared * sigmoid(gate)."""
    n, h = rows.shape
    num_experts, two_i, _ = gate_up.shape
    k, inter = experts.shape[1], two_i // 2
    if (gate_up.shape[2] != h or down.shape != (num_experts, h, inter) or weights.shape != experts.shape
            or experts.shape[0] != n or gate_up.dtype != rows.dtype or down.dtype != rows.dtype):
        raise ValueError(f"grouped_experts: rows {tuple(rows.shape)} {rows.dtype}, weights {tuple(weights.shape)}, "
                         f"experts {tuple(experts.shape)}, gate_up {tuple(gate_up.shape)} {gate_up.dtype}, down "
                         f"{tuple(down.shape)} {down.dtype}: expected gate_up [E, 2I, {h}], down [E, {h}, I], "
                         f"weights and experts [{n}, k], weights of the rows' dtype")
    x, flat = rows.contiguous(), experts.contiguous()  # flat: [N, k], read as the N k slot ids' experts
    w = weights.to(rows.dtype).contiguous()  # [N, k]
    gu, dn = gate_up.contiguous(), down.contiguous()
    slots = n * k
    act = torch.empty(slots, inter, dtype=rows.dtype, device=rows.device)  # [N k, I]: slot n k + r's activation
    y = torch.empty(slots, h, dtype=rows.dtype, device=rows.device)  # [N k, H]: its weighted expert output
    out = torch.empty(n, h, dtype=rows.dtype, device=rows.device)  # [N, H]
    ieee = rows.dtype == torch.float32
    _expert_gate_up_kernel[(num_experts, triton.cdiv(inter, BLOCK_N))](
        x, gu, act, flat, slots, k, inter, H=h, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, CHUNK=CHUNK,
        IEEE=ieee)
    _expert_down_kernel[(num_experts, triton.cdiv(h, BLOCK_N))](
        act, dn, w, y, flat, slots, h, I=inter, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, CHUNK=CHUNK,
        IEEE=ieee)
    if (shared is None) != (shared_gate is None) or (shared is not None and shared_gate is not None and (
            shared.shape != (n, h) or shared_gate.shape != (n, 1) or shared.dtype != rows.dtype)):
        raise ValueError(f"grouped_experts: shared {None if shared is None else tuple(shared.shape)} and shared_gate "
                         f"{None if shared_gate is None else tuple(shared_gate.shape)}: both or neither, [{n}, {h}] "
                         "of the rows' dtype and [{n}, 1]")
    sh = y if shared is None else shared.contiguous()  # y stands in when there is none (never read)
    z = w if shared_gate is None else shared_gate.contiguous()
    _expert_combine_kernel[(n, triton.cdiv(h, BLOCK_C))](y, sh, z, out, h, K=k, BLOCK=BLOCK_C,
                                                         SHARED=shared is not None)
    return out


if triton is not None:

    @triton.jit
    def _count(experts_ptr, slots, e, CHUNK: tl.constexpr):
        """How many of the slots are routed to expert e."""
        total = tl.sum(tl.zeros([CHUNK], tl.int32), 0)
        c0 = total
        while c0 < slots:  # a runtime bound as a while loop: Triton's interpreter cannot take one in range()
            j = c0 + tl.arange(0, CHUNK)
            total += tl.sum((tl.load(experts_ptr + j, mask=j < slots, other=-1) == e).to(tl.int32), 0)
            c0 += CHUNK
        return total

    @triton.jit
    def _slots_of(experts_ptr, slots, e, first, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
        """Slot ids [BLOCK_M] of expert e's slots first .. first + BLOCK_M - 1, counted in slot order (the
        stable sort by expert of the slots, one tile of it); 0 past its last slot (masked by the caller)."""
        want = first + 1 + tl.arange(0, BLOCK_M)  # the 1-based ranks of this tile's slots among e's
        found = tl.zeros([BLOCK_M], tl.int64)
        seen = tl.sum(tl.zeros([CHUNK], tl.int32), 0)
        c0 = seen
        while c0 < slots:
            j = c0 + tl.arange(0, CHUNK)
            mine = (tl.load(experts_ptr + j, mask=j < slots, other=-1) == e).to(tl.int32)  # [CHUNK]
            rank = tl.cumsum(mine, 0) + seen  # [CHUNK]: each slot of e's rank so far
            hit = (mine[None, :] > 0) & (rank[None, :] == want[:, None])  # [M, CHUNK]: at most one per row
            found += tl.sum(tl.where(hit, j[None, :].to(tl.int64), 0), 1)
            seen += tl.sum(mine, 0)
            c0 += CHUNK
        return found

    @triton.jit
    def _expert_gate_up_kernel(x_ptr, w_ptr, act_ptr, experts_ptr, slots, k, inter, H: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               CHUNK: tl.constexpr, IEEE: tl.constexpr):
        e = tl.program_id(0)
        total = _count(experts_ptr, slots, e, CHUNK)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < inter
        red = tl.arange(0, BLOCK_K)
        base = w_ptr + e.to(tl.int64) * 2 * inter * H
        dtype = act_ptr.dtype.element_ty
        first = total * 0
        while first < total:  # expert e's slots, BLOCK_M at a time (none: nothing runs)
            slot = _slots_of(experts_ptr, slots, e, first, BLOCK_M, CHUNK)  # [M]: slot ids n k + r
            ok = first + tl.arange(0, BLOCK_M) < total
            token = slot // k
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
            g = gate.to(dtype).to(tl.float32)  # rounded as the projection's output is
            silu = tl.div_rn(g, 1.0 + tl.exp(-g)).to(dtype)  # rounded as F.silu's output is
            result = (silu.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)
            tl.store(act_ptr + slot[:, None] * inter + cols[None, :], result, mask=ok[:, None] & col_ok[None, :])
            first += BLOCK_M

    @triton.jit
    def _expert_down_kernel(act_ptr, w_ptr, rw_ptr, y_ptr, experts_ptr, slots, hidden, I: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            CHUNK: tl.constexpr, IEEE: tl.constexpr):
        e = tl.program_id(0)
        total = _count(experts_ptr, slots, e, CHUNK)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < hidden
        red = tl.arange(0, BLOCK_K)
        base = w_ptr + e.to(tl.int64) * hidden * I
        dtype = y_ptr.dtype.element_ty
        first = total * 0
        while first < total:
            slot = _slots_of(experts_ptr, slots, e, first, BLOCK_M, CHUNK)  # [M]
            ok = first + tl.arange(0, BLOCK_M) < total
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
            rw = tl.load(rw_ptr + slot, mask=ok, other=0.0).to(tl.float32)  # [M]: the routing weights
            result = (acc.to(dtype).to(tl.float32) * rw[:, None]).to(dtype)  # rounded, then weighted and rounded
            tl.store(y_ptr + slot[:, None] * hidden + cols[None, :], result, mask=ok[:, None] & col_ok[None, :])
            first += BLOCK_M

    @triton.jit
    def _expert_combine_kernel(y_ptr, shared_ptr, z_ptr, out_ptr, hidden, K: tl.constexpr, BLOCK: tl.constexpr,
                               SHARED: tl.constexpr):
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < hidden
        dtype = out_ptr.dtype.element_ty
        total = tl.load(y_ptr + n * K * hidden + cols, mask=ok, other=0.0)
        for r in tl.static_range(1, K):  # rank order, each sum rounded as the torch form's
            term = tl.load(y_ptr + (n * K + r) * hidden + cols, mask=ok, other=0.0)
            total = (total.to(tl.float32) + term.to(tl.float32)).to(dtype)
        if SHARED:  # + shared / (1 + exp(-z)), each step rounded to the dtype as the torch form's
            z = tl.load(z_ptr + n).to(tl.float32)
            gate = (1.0 + tl.exp(-z).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
            s = tl.load(shared_ptr + n * hidden + cols, mask=ok, other=0.0).to(tl.float32)
            total = (total.to(tl.float32) + tl.div_rn(s, gate).to(dtype).to(tl.float32)).to(dtype)
        tl.store(out_ptr + n * hidden + cols, total, mask=ok)
