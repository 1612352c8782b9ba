"""On a GPU: Qwen3-Omni's MoE block through its Triton kernels (kernels/moe_route.py, kernels/grouped_experts.py) at
the release's widths, random weights (N(0, 0.02)), against the torch form on the same GPU.

Tolerances, stated: in bfloat16 the kernel and the torch form round the same intermediates (each projection's
output, silu, the product, the weighted term, each sum) but accumulate their matmuls in other orders, so they
may differ by a bf16 rounding of an intermediate: |kernel - torch| <= 0.02 + 0.02 |torch| per element, and the
kernel is as close to the float32 form as the bf16 torch form is (its mean error at most 1.25x torch's + 1e-4).
In float32 (tl.dot in IEEE precision) they agree within 1e-5. The routing kernel picks the torch form's experts
on at least 99% of rows in float32 and 95% in bf16 (its logits are rounded to bf16 from another summation order
than cuBLAS's, and a near-tie between two probabilities may then rank otherwise).
Batched == alone, bit for bit, for the routing and the grouped experts: fixed blocks and reduction orders, and
no slot's arithmetic reads another slot's rows. (Not claimed for the whole block: the router's and the shared
expert's matmuls are cuBLAS's, whose kernels may change with the row count.)"""

from __future__ import annotations

import copy

import pytest
import torch

from v2.models.kernels.grouped_experts import grouped_experts
from v2.models.kernels.moe_route import route_fused
from v2.models.qwen3_omni.config import MoeConfig
from v2.models.qwen3_omni.moe import SparseMoe, route

pytestmark = pytest.mark.gpu
# (hidden, experts, top-k, expert intermediate, shared intermediate): the thinker's and the talker's blocks
RELEASE = {"thinker": (2048, 128, 8, 768, 0), "talker": (1024, 128, 6, 384, 768)}


def _block(part: str, dtype: torch.dtype, seed: int = 0) -> SparseMoe:
    h, e, k, i, shared = RELEASE[part]
    torch.manual_seed(seed)
    m = SparseMoe(MoeConfig(hidden_size=h, num_experts=e, top_k=k, intermediate_size=i, norm_topk_prob=True,
                            shared_intermediate_size=shared)).to("cuda")
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.02)
    return m.to(dtype).eval()


def _rows(n: int, h: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(n, h, device="cuda", generator=g).to(dtype)


def _grouped(m: SparseMoe, x: torch.Tensor, w: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    return grouped_experts(x, w, e, m.experts.gate_up_proj, m.experts.down_proj)


@pytest.mark.parametrize("part", ["thinker", "talker"])
@pytest.mark.parametrize("n", [1, 16, 64])
@torch.no_grad()
def test_grouped_experts_in_bf16_match_the_torch_form(part: str, n: int) -> None:
    m = _block(part, torch.bfloat16)
    x = _rows(n, m.cfg.hidden_size, torch.bfloat16)
    w, e = route(m.gate(x), m.cfg.top_k, True)
    got, want = _grouped(m, x, w.bfloat16(), e).float(), m._experts(x, w.bfloat16(), e).float()
    torch.testing.assert_close(got, want, atol=0.02, rtol=0.02)
    m32 = copy.deepcopy(m).float()
    exact = m32._experts(x.float(), w.bfloat16().float(), e)  # the float32 form on the same bf16 values
    assert (got - exact).abs().mean() <= 1.25 * (want - exact).abs().mean() + 1e-4


@pytest.mark.parametrize("part", ["thinker", "talker"])
@torch.no_grad()
def test_grouped_experts_in_fp32_match_the_torch_form(part: str) -> None:
    m = _block(part, torch.float32)
    x = _rows(24, m.cfg.hidden_size, torch.float32)
    w, e = route(m.gate(x), m.cfg.top_k, True)
    torch.testing.assert_close(_grouped(m, x, w, e), m._experts(x, w, e), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("part", ["thinker", "talker"])
@torch.no_grad()
def test_the_block_through_the_kernels_matches_the_torch_block(part: str) -> None:
    """SparseMoe.forward with autograd off (the kernels) vs on (the torch form), bf16, 64 rows; rows whose
    routing the two forms agree on compared (the shared expert's gated sum included for the talker)."""
    m = _block(part, torch.bfloat16)
    x = _rows(64, m.cfg.hidden_size, torch.bfloat16)
    got = m(x)
    with torch.enable_grad():
        want = m(x).detach()
    same = (route_fused(x, m.gate.weight, m.cfg.top_k, True)[1] == route(m.gate(x), m.cfg.top_k, True)[1]).all(1)
    assert same.float().mean() >= 0.95  # bf16 logits: a last-bit difference may swap a near-tie, rarely
    torch.testing.assert_close(got[same].float(), want[same].float(), atol=0.02, rtol=0.02)


@pytest.mark.parametrize("part", ["thinker", "talker"])
@torch.no_grad()
def test_routing_and_grouped_experts_batched_equal_alone(part: str) -> None:
    m = _block(part, torch.bfloat16)
    x = _rows(64, m.cfg.hidden_size, torch.bfloat16, seed=2)
    w, e = route_fused(x, m.gate.weight, m.cfg.top_k, True)
    batched = _grouped(m, x, w, e)
    for i in (0, 5, 63):
        wi, ei = route_fused(x[i : i + 1], m.gate.weight, m.cfg.top_k, True)
        assert torch.equal(ei, e[i : i + 1]) and torch.equal(wi, w[i : i + 1])
        assert torch.equal(_grouped(m, x[i : i + 1], wi, ei), batched[i : i + 1]), i
    part_rows = torch.arange(3, 40, 4, device="cuda")  # a smaller batch of some of the same rows
    assert torch.equal(_grouped(m, x[part_rows], w[part_rows], e[part_rows]), batched[part_rows])


@pytest.mark.parametrize("part", ["thinker", "talker"])
@torch.no_grad()
def test_the_routing_kernel_picks_the_torch_forms_experts(part: str) -> None:
    """The router's matmul and the routing in one launch, float32 (bf16: in the block test above)."""
    m = _block(part, torch.float32)
    x = _rows(256, m.cfg.hidden_size, torch.float32, seed=3)
    w, e = route_fused(x, m.gate.weight, m.cfg.top_k, True)
    want_w, want_e = route(m.gate(x), m.cfg.top_k, True)
    same = (e == want_e).all(1)
    assert same.float().mean() >= 0.99
    torch.testing.assert_close(w[same], want_w[same], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("part", ["thinker", "talker"])
@torch.no_grad()
def test_add_norm_route_is_the_add_the_norm_and_the_routing(part: str) -> None:
    """A decode row's MoE entry (the decoder's post-attention add + RMSNorm + the routing, one launch) == the
    add + norm kernel then the routing kernel, bf16, 64 rows: the sum bit for bit, the normed rows with the same
    roundings (>= 99% of them equal: the compiler may lay the sum of squares out otherwise), the experts on >= 95%
    of rows (its router sums in another order), the weights within 1e-2."""
    from v2.models.kernels.moe_route import add_norm_route
    from v2.models.kernels.rms_norm import add_rms_norm_fused

    m = _block(part, torch.bfloat16)
    h = m.cfg.hidden_size
    x, delta = _rows(64, h, torch.bfloat16, seed=4), _rows(64, h, torch.bfloat16, seed=5)
    norm = (torch.rand(h, device="cuda") + 0.5).bfloat16()
    s, normed, w, e = add_norm_route(x, delta, norm, 1e-6, m.gate.weight, m.cfg.top_k, True)
    want_s, want_h = add_rms_norm_fused(x, delta, norm, 1e-6)
    want_w, want_e = route_fused(want_h, m.gate.weight, m.cfg.top_k, True)
    assert torch.equal(s, want_s)
    torch.testing.assert_close(normed.float(), want_h.float(), atol=1e-2, rtol=1e-2)
    assert (normed == want_h).float().mean() >= 0.99  # the same roundings; the norm's sum may order otherwise
    same = (e == want_e).all(1)
    assert same.float().mean() >= 0.95
    torch.testing.assert_close(w[same].float(), want_w[same].float(), atol=1e-2, rtol=1e-2)
