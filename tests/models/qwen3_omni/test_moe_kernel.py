"""The grouped-expert kernel (v2/models/kernels/grouped_experts.py, run by Triton's interpreter on the CPU) against
the torch form of `SparseMoe._experts`: the same sums within float rounding (float32), for routings with empty
experts and an expert holding more slots than a tile; the routing kernel's choice equals `route`'s; the whole
block through the kernels (with and without the talker's shared expert) equals the torch block; and a token's output through the kernel is the same alone as in a batch. float32 only: the interpreter's
bfloat16 `tl.dot` is not faithful (the GPU test covers bfloat16, tests/gpu/test_qwen3_omni_moe_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import grouped_experts as ge
from v2.models.qwen3_omni.config import MoeConfig
from v2.models.qwen3_omni import moe
from v2.models.kernels.moe_route import add_norm_route, route_fused
from v2.models.kernels.rms_norm import add_rms_norm_fused
from v2.models.qwen3_omni.moe import SparseMoe, route

pytestmark = pytest.mark.skipif(ge.triton is None, reason="needs triton")


def _moe(shared: int, experts: int = 6, top_k: int = 2, hidden: int = 24, inter: int = 20) -> SparseMoe:
    """Widths that are not multiples of the kernel's blocks, so the masks are exercised."""
    torch.manual_seed(3)
    m = SparseMoe(MoeConfig(hidden_size=hidden, num_experts=experts, top_k=top_k, intermediate_size=inter,
                            norm_topk_prob=True, shared_intermediate_size=shared))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return m.eval()


def _routing(n: int, k: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    experts = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)])  # [N, k], distinct per row
    weights = torch.softmax(torch.randn(n, k, generator=g), -1)
    return weights, experts


def _grouped(m: SparseMoe, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    return ge.grouped_experts(x, weights, experts, m.experts.gate_up_proj, m.experts.down_proj)


@pytest.mark.parametrize("renormalise", [True, False])
def test_the_routing_kernel_chooses_as_route(renormalise: bool) -> None:
    """The router's matmul and the routing in one launch == route(F.linear(rows, gate)); rows 0 and 1 meet
    equal logits (the router's rows 1, 2, 3, 5 are one row: bit-equal dot products), ties to the lowest index."""
    g = torch.Generator().manual_seed(4)
    gate = torch.randn(12, 80, generator=g) * 0.3
    gate[[2, 3, 5]] = gate[1].clone()
    rows = torch.randn(9, 80, generator=g)
    rows[0] = gate[1] * 2  # expert 1's logit (and its copies') the largest
    want_w, want_e = route(torch.nn.functional.linear(rows, gate), 3, renormalise)
    got_w, got_e = route_fused(rows, gate, 3, renormalise)
    assert torch.equal(got_e, want_e) and got_e[0].tolist() == [1, 2, 3]
    torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        route_fused(rows, gate, 13, renormalise)


@torch.no_grad()
def test_add_norm_route_is_the_add_the_norm_and_the_routing(monkeypatch) -> None:
    """A decode row's MoE entry in one launch == add_rms_norm_fused then route_fused (both kernels): the sum and
    the normed rows bit for bit, the same experts, the weights within float rounding (its router sums in
    another order)."""
    monkeypatch.setattr(kernels, "FORCE", True)
    g = torch.Generator().manual_seed(6)
    x, delta = torch.randn(5, 40, generator=g), torch.randn(5, 40, generator=g)
    norm, gate = torch.rand(40, generator=g) + 0.5, torch.randn(10, 40, generator=g) * 0.3
    s, h, w, e = add_norm_route(x, delta, norm, 1e-6, gate, 3, True)
    want_s, want_h = add_rms_norm_fused(x, delta, norm, 1e-6)
    want_w, want_e = route_fused(want_h, gate, 3, True)
    assert torch.equal(s, want_s) and torch.equal(h, want_h) and torch.equal(e, want_e)
    torch.testing.assert_close(w, want_w, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="gate"):
        add_norm_route(x, delta, norm, 1e-6, gate[:, :8], 3, True)


@torch.no_grad()
def test_crowded_and_empty_experts() -> None:
    """Expert 1 holds 40 slots (three tiles, the last part full), experts 4 and 5 none."""
    m = _moe(0)
    n = 40
    x = torch.randn(n, 24)
    weights, _ = _routing(n, 2, 6, 0)
    experts = torch.stack([torch.ones(n, dtype=torch.long), torch.tensor([0, 2, 3])[torch.arange(n) % 3]], 1)
    want = m._experts(x, weights, experts)
    torch.testing.assert_close(_grouped(m, x, weights, experts), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 37])
@torch.no_grad()
def test_grouped_experts_equal_the_torch_form(n: int) -> None:
    m = _moe(0)
    x = torch.randn(n, 24)
    weights, experts = _routing(n, 2, 6, n)
    if n == 37:
        experts[:20, 0] = 4  # expert 4 holds more slots than a tile (rows 0..19 keep distinct experts)
        experts[:20, 1] = torch.where(experts[:20, 1] == 4, 5, experts[:20, 1])
    want = m._experts(x, weights, experts)
    torch.testing.assert_close(_grouped(m, x, weights, experts), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shared", [0, 32])
@torch.no_grad()
def test_the_moe_block_through_the_kernel_equals_the_torch_block(shared: int, monkeypatch) -> None:
    m = _moe(shared, experts=8, top_k=3)
    x = torch.randn(2, 5, 24)
    want = m(x)
    calls: list[int] = []

    def grouped(rows: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, gate_up: torch.Tensor,
                down: torch.Tensor, shared: torch.Tensor | None = None,
                shared_gate: torch.Tensor | None = None) -> torch.Tensor:
        calls.append(rows.shape[0])
        return ge.grouped_experts(rows, weights, experts, gate_up, down, shared=shared, shared_gate=shared_gate)

    monkeypatch.setattr(moe, "grouped_experts", grouped)
    monkeypatch.setattr(kernels, "FORCE", True)
    torch.testing.assert_close(m(x), want, atol=1e-5, rtol=1e-5)
    assert calls == [10]  # the kernel served the block (the CPU's loop did not)


@torch.no_grad()
def test_a_token_through_the_kernel_is_the_same_alone_and_batched(monkeypatch) -> None:
    m = _moe(32, experts=8, top_k=3)
    x = torch.randn(21, 24)
    monkeypatch.setattr(kernels, "FORCE", True)
    batched = m(x)
    for i in (0, 7, 20):
        assert torch.equal(m(x[i : i + 1])[0], batched[i]), i


def test_bad_shapes_are_refused_naming_the_weights() -> None:
    w, e = _routing(2, 2, 4, 1)
    with pytest.raises(ValueError, match="gate_up"):
        ge.grouped_experts(torch.randn(2, 8), w, e, torch.randn(4, 10, 9), torch.randn(4, 8, 5))


def test_the_kernels_compile_for_hopper_without_a_gpu(hopper_compile) -> None:
    """In bf16 at the release's widths (thinker and talker experts; top-8 routing, top-6 with the shared
    expert's gated sum): Triton builds every kernel for sm_90 (the runtime-bounded loops included)."""
    sizes = hopper_compile(COMPILE_FOR_HOPPER)
    assert len(sizes) == 10 and min(sizes) > 0


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import grouped_experts as ge, moe_route as mr

target = GPUTarget("cuda", 90, 32)
blocks = dict(BLOCK_M=ge.BLOCK_M, BLOCK_N=ge.BLOCK_N, BLOCK_K=ge.BLOCK_K, CHUNK=ge.CHUNK, IEEE=False)
c = "constexpr"
for h, i in ((2048, 768), (1024, 384)):  # the thinker's and the talker's experts
    src = ASTSource(fn=ge._expert_gate_up_kernel, signature={
        "x_ptr": "*bf16", "w_ptr": "*bf16", "act_ptr": "*bf16", "experts_ptr": "*i64", "slots": "i32", "k": "i32",
        "inter": "i32", "H": c, "BLOCK_M": c, "BLOCK_N": c, "BLOCK_K": c, "CHUNK": c, "IEEE": c},
        constexprs={"H": h, **blocks})
    print(len(compile(src, target=target).asm["cubin"]))
    src = ASTSource(fn=ge._expert_down_kernel, signature={
        "act_ptr": "*bf16", "w_ptr": "*bf16", "rw_ptr": "*bf16", "y_ptr": "*bf16", "experts_ptr": "*i64",
        "slots": "i32", "hidden": "i32", "I": c, "BLOCK_M": c, "BLOCK_N": c, "BLOCK_K": c, "CHUNK": c, "IEEE": c},
        constexprs={"I": i, **blocks})
    print(len(compile(src, target=target).asm["cubin"]))
for k, shared in ((8, False), (6, True)):
    src = ASTSource(fn=ge._expert_combine_kernel, signature={
        "y_ptr": "*bf16", "shared_ptr": "*bf16", "z_ptr": "*bf16", "out_ptr": "*bf16", "hidden": "i32", "K": c,
        "BLOCK": c, "SHARED": c}, constexprs={"K": k, "BLOCK": ge.BLOCK_C, "SHARED": shared})
    print(len(compile(src, target=target).asm["cubin"]))
    src = ASTSource(fn=mr._route_kernel, signature={
        "x_ptr": "*bf16", "g_ptr": "*bf16", "w_ptr": "*bf16", "e_ptr": "*i64", "num_experts": "i32", "H": c, "K": c,
        "K_PAD": c, "E_PAD": c, "BLOCK_H": c, "RENORM": c},
        constexprs={"H": 2048 if k == 8 else 1024, "K": k, "K_PAD": 8, "E_PAD": 128, "BLOCK_H": mr.BLOCK_H,
                    "RENORM": True})
    print(len(compile(src, target=target).asm["cubin"]))
    src = ASTSource(fn=mr._add_norm_route_kernel, signature={
        "x_ptr": "*bf16", "d_ptr": "*bf16", "nw_ptr": "*bf16", "g_ptr": "*bf16", "s_ptr": "*bf16", "h_ptr": "*bf16",
        "w_ptr": "*bf16", "e_ptr": "*i64", "num_experts": "i32", "eps": "fp32", "H": c, "H_PAD": c, "K": c,
        "K_PAD": c, "E_PAD": c, "EB": c, "RENORM": c},
        constexprs={"H": 2048 if k == 8 else 1024, "H_PAD": 2048 if k == 8 else 1024, "K": k, "K_PAD": 8,
                    "E_PAD": 128, "EB": mr.EB, "RENORM": True})
    print(len(compile(src, target=target).asm["cubin"]))
"""
