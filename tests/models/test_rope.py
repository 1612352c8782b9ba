"""The RoPE tables and index the CPU passes rotate q and k with (`rope.rotate_half_table`, `rope.rotate_half_swap`)
equal the forms they stand for, bit for bit, in every leg: a table made at once has the rows of `rotate_half_cos_sin`
at each lone position (how the frame pass made its rows) with sin's first half negated, and the swap index gives
rotate-half's halves swapped per head. The rows made from the table for the frame kernels (`rotate_half_rows`) are
`rotate_half_cos_sin` of the frame's positions, and its columns in `interleaved_order` are `interleaved_cos_sin`'s
(the signed sin: the interleaved swap's sign on the even columns)."""

from __future__ import annotations

import pytest
import torch

from v2.models.rope import (Llama3Scaling, interleaved_cos_sin, interleaved_order, rotate_half_cos_sin,
                            rotate_half_rows, rotate_half_swap, rotate_half_table)

pytestmark = pytest.mark.exact

LLAMA = Llama3Scaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


@pytest.mark.parametrize("head_dim,base", [(8, 1e4), (12, 5e5), (16, 1e6), (64, 1e4), (128, 1e6)])
@pytest.mark.parametrize("scaling", [None, LLAMA], ids=["plain", "llama3"])
def test_the_table_rows_are_each_lone_positions_rows(head_dim, base, scaling):
    cpu = torch.device("cpu")
    for positions in (2, 17, 33, 256):
        table = rotate_half_table(positions, head_dim, base, scaling, cpu)
        assert table.shape == (positions, 2, head_dim) and table.dtype == torch.float32
        for p in range(positions):
            cos, sin = rotate_half_cos_sin(torch.tensor([[p]]), head_dim, base, scaling)  # [1, 1, D] each
            sin[..., : head_dim // 2] = -sin[..., : head_dim // 2]
            assert torch.equal(bits(table[p, 0]), bits(cos[0, 0])) and torch.equal(bits(table[p, 1]), bits(sin[0, 0]))


@pytest.mark.parametrize("heads,head_dim", [(1, 2), (3, 8), (6, 128)])
def test_the_swap_index_swaps_each_heads_halves(heads, head_dim):
    x = torch.randn(5, heads, head_dim)
    half = head_dim // 2
    want = torch.cat([x[..., half:], x[..., :half]], dim=-1)  # rotate-half's rotated operand, unsigned
    got = torch.index_select(x.reshape(5, -1), 1, rotate_half_swap(heads, head_dim, torch.device("cpu")))
    assert torch.equal(got.view(5, heads, head_dim), want)


@pytest.mark.parametrize("head_dim,base", [(8, 1e4), (10, 1e4), (12, 5e5), (64, 1e4), (128, 1e6)])
@pytest.mark.parametrize("scaling", [None, LLAMA], ids=["plain", "llama3"])
def test_the_kernels_rows_are_the_frames_rotate_half_cos_sin(head_dim, base, scaling):
    cpu = torch.device("cpu")
    for positions in (2, 13, 16, 32):
        cos, sin = rotate_half_rows(positions, head_dim, base, scaling, cpu)
        assert rotate_half_rows(positions, head_dim, base, scaling, cpu) == (cos, sin)  # made once
        assert cos.is_contiguous() and sin.is_contiguous() and cos.shape == sin.shape == (positions, head_dim)
        want_cos, want_sin = rotate_half_cos_sin(torch.arange(positions)[None], head_dim, base, scaling)  # [1, P, D]
        assert torch.equal(bits(cos), bits(want_cos[0])) and torch.equal(bits(sin), bits(want_sin[0]))


@pytest.mark.parametrize("head_dim,base", [(2, 1e4), (8, 1e4), (10, 1e4), (64, 1e4), (128, 1e6)])
def test_the_rotate_half_columns_in_interleaved_order_are_the_interleaved_rows(head_dim, base):
    cpu = torch.device("cpu")
    order = interleaved_order(head_dim, cpu)
    assert sorted(order.tolist()) == list(range(head_dim))
    for positions in (1, 13, 40):
        want_cos, want_sin = interleaved_cos_sin(torch.arange(positions), head_dim, base)  # [P, D] each
        cos, sin = (torch.index_select(t, 1, order) for t in rotate_half_rows(positions, head_dim, base, None, cpu))
        assert torch.equal(bits(cos), bits(want_cos)) and torch.equal(bits(sin), bits(want_sin))
        signed = torch.index_select(rotate_half_table(positions, head_dim, base, None, cpu), 2, order)  # [P, 2, D]
        want_sin[:, 0::2] = -want_sin[:, 0::2]
        assert torch.equal(bits(signed[:, 0]), bits(want_cos)) and torch.equal(bits(signed[:, 1]), bits(want_sin))
