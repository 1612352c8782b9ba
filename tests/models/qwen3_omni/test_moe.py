"""The MoE block: routing as the README (softmax, top-k with ties to the lowest index, renormalised), the gated
shared expert, and a row's result the same alone and in any batch (rows routed to different experts)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.qwen3_omni.config import MoeConfig
from v2.models.qwen3_omni.moe import SparseMoe, route


def _moe(shared: int, seed: int = 0, experts: int = 8, top_k: int = 2, hidden: int = 32) -> SparseMoe:
    torch.manual_seed(seed)
    m = SparseMoe(MoeConfig(hidden_size=hidden, num_experts=experts, top_k=top_k, intermediate_size=16,
                            norm_topk_prob=True, shared_intermediate_size=shared))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return m.eval()


def _plain(m: SparseMoe, x: torch.Tensor) -> torch.Tensor:
    """The README's arithmetic in plain torch, row by row."""
    out = []
    for row in x:
        p = torch.softmax(m.gate.weight @ row, -1)
        w, e = torch.topk(p, m.cfg.top_k)
        w = w / w.sum()
        y = sum(wi * (m.experts.down_proj[ei] @ (torch.nn.functional.silu(m.experts.gate_up_proj[ei, :16] @ row)
                                                 * (m.experts.gate_up_proj[ei, 16:] @ row))) for wi, ei in zip(w, e))
        if m.shared_expert is not None and m.shared_expert_gate is not None:
            s = m.shared_expert
            g, u = (s.gate_up_proj.weight @ row).chunk(2)
            y = y + torch.sigmoid(m.shared_expert_gate.weight @ row) * (s.down_proj.weight @ (torch.nn.functional.silu(g) * u))
        out.append(y)
    return torch.stack(out)


@pytest.mark.parametrize("shared", [0, 32])
def test_moe_matches_the_plain_arithmetic(shared: int) -> None:
    m = _moe(shared)
    x = torch.randn(40, 32)
    with torch.no_grad():
        torch.testing.assert_close(m(x), _plain(m, x), atol=1e-5, rtol=1e-5)


def test_route_ties_take_the_lowest_index_and_renormalise() -> None:
    logits = torch.tensor([[0.0, 1.0, 1.0, 1.0, -2.0]])
    w, e = route(logits, 2, True)
    assert e.tolist() == [[1, 2]]
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.5]]))
    w, _ = route(logits, 2, False)
    assert float(w.sum()) < 1.0


@pytest.mark.exact
@pytest.mark.parametrize("shared", [0, 32])
def test_moe_batched_equals_alone(shared: int) -> None:
    m = _moe(shared, seed=1, experts=16, top_k=4)
    x = torch.randn(37, 32)
    with torch.no_grad():
        _, experts = route(m.gate(x), 4, True)
        assert len({tuple(sorted(r)) for r in experts.tolist()}) > 5  # rows are routed differently
        batched = m(x.view(1, 37, 32))[0]
        for i in range(37):
            assert torch.equal(m(x[i : i + 1]), batched[i : i + 1]), i
        assert torch.equal(m(x[5:30]), batched[5:30])
        assert torch.equal(m(x.flip(0)), batched.flip(0))


@pytest.mark.exact
@settings(max_examples=25, deadline=None)
@given(experts=st.integers(2, 20), k=st.integers(1, 6), hidden=st.sampled_from([8, 24, 32, 40]),
       shared=st.sampled_from([0, 24]), rows=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_moe_any_draw_batched_equals_alone(experts: int, k: int, hidden: int, shared: int, rows: int,
                                           seed: int) -> None:
    """Any width (inner dims off the 16-float alignment too), expert count, top-k and row count."""
    m = _moe(shared, seed=seed, experts=experts, top_k=min(k, experts), hidden=hidden)
    x = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        batched = m(x)
        for i in range(rows):
            assert torch.equal(m(x[i : i + 1]), batched[i : i + 1])
