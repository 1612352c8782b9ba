"""The frame passes' written-into forms equal the forms they stand for, bit for bit (signs of zero included):
`exact.Tile.linear_into` (torch.addmm / torch.mm into a given output) against `exact.Tile.linear` (F.linear), and
`FrameAttention.attend_one` (kept buffers, halving levels in place over -0.0 padding) against `attend` for every
position of two frames in a row (the second frame's steps read buffers the first left behind), with the keys in
their own buffer and beside the queries, one and two query heads per kv head."""

from __future__ import annotations

import pytest
import torch

from v2.models import exact
from v2.models.frame_attention import FrameAttention

pytestmark = pytest.mark.exact


def bits(x: torch.Tensor) -> torch.Tensor:
    """float32 values as their bit patterns (torch.equal holds -0.0 == 0.0)."""
    return x.contiguous().view(torch.int32)


@pytest.mark.parametrize("n", [1, 5, 16, 17, 33])
@pytest.mark.parametrize("inner", [40, 64])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_into_writes_what_tile_linear_returns(n, inner, with_bias):
    g = torch.Generator().manual_seed(n * inner)
    weight = torch.randn(72, inner, generator=g)
    bias = torch.randn(72, generator=g) if with_bias else None
    tile = exact.Tile(n, inner, torch.float32, "cpu")
    tile.rows(n).copy_(torch.randn(n, inner, generator=g))
    want = tile.linear(n, weight, bias)  # [n, 72]
    out = torch.full((tile.buf.shape[0], 72), float("nan"))
    tile.linear_into(n, exact.aligned_weight(weight).t(), bias, out)
    assert torch.equal(bits(out[:n]), bits(want))
    assert torch.equal(bits(want), bits(exact.linear(tile.rows(n), weight, bias)))


@pytest.mark.parametrize("q_beside_k", [False, True])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2)])
def test_attend_one_equals_attend_at_every_position_frame_after_frame(q_beside_k, heads, kv_heads):
    layers, batch, positions, d = 2, 3, 13, 8
    g = torch.Generator().manual_seed(heads + kv_heads + q_beside_k)
    att = FrameAttention(layers, batch, positions, heads, kv_heads, d, torch.device("cpu"), q_beside_k=q_beside_k)
    groups = heads // kv_heads
    q = torch.empty(groups, 1, batch, kv_heads, d)  # [G, 1, B, Hkv, D]
    out = torch.empty(groups, 1, batch, kv_heads, d)
    att.plan_one(q, out, positions)
    for frame in range(2):
        for p in range(positions):
            for i in range(layers):
                att.k[i][p] = torch.randn(batch, kv_heads, d, generator=g)
                v = torch.randn(batch, kv_heads, d, generator=g)
                v[:, :, 0] = -0.0  # a column of negative zeros: their sum is -0.0 only if nothing adds +0.0
                v[:, :, 1] = 0.0
                att.v_write[i][p] = v
                q.copy_(torch.randn(groups, 1, batch, kv_heads, d, generator=g) * (frame + 1))
                want = torch.empty_like(out)
                att.attend(i, q, p, 1, want)
                att.attend_one(i, p)
                assert torch.equal(bits(out), bits(want)), (frame, p, i)
                assert bool((bits(out[..., 0]) == bits(torch.tensor(-0.0))).all())
