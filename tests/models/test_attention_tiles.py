"""`attention_tiles.attention` (the CPU form `exact.attention` runs) gives `attention_reference`'s bits for every input.

Bit for bit (the float32 patterns compared as int32, so a zero's sign and a NaN's payload count): hypothesis-drawn
batches, heads (grouped-query included), queries, keys, head dims (64 and 128 among them), causal or not, masks
(per head or shared, per query or shared), scales, and both block sizes drawn small so the two forms cut the
queries differently; values with zero columns of either sign and infinities at masked keys, the inputs where
only the reference's own blocks give its bits. Marked `exact`: run on the three CPU paths."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models import attention_tiles, exact

pytestmark = pytest.mark.exact


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def both(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
         scale: float | None, ref_block: int, new_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    saved = attention_tiles.REFERENCE_BLOCK_ELEMENTS, attention_tiles.BLOCK_ELEMENTS
    attention_tiles.REFERENCE_BLOCK_ELEMENTS, attention_tiles.BLOCK_ELEMENTS = ref_block, new_block
    try:
        ref = attention_tiles.attention_reference(q, k, v, mask, causal=causal, scale=scale)
        new = attention_tiles.attention(q, k, v, mask, causal=causal, scale=scale)
    finally:
        attention_tiles.REFERENCE_BLOCK_ELEMENTS, attention_tiles.BLOCK_ELEMENTS = saved
    return ref, new


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), hkv=st.sampled_from([1, 2]), g=st.sampled_from([1, 2, 3]), t=st.integers(1, 24),
       extra=st.integers(0, 20), d=st.sampled_from([1, 5, 16, 32, 64, 128]), causal=st.booleans(),
       mask_kind=st.sampled_from(["none", "shared", "heads", "rows"]), scale=st.sampled_from([None, 0.25, 3.0]),
       special=st.sampled_from(["none", "zero", "negzero", "inf"]), ref_block=st.sampled_from([1, 300, 5000, 1 << 18]),
       new_block=st.sampled_from([1, 700, 9000, 1 << 18]), seed=st.integers(0, 2**16))
def test_the_tiled_form_gives_the_reference_bits(b, hkv, g, t, extra, d, causal, mask_kind, scale, special,
                                                   ref_block, new_block, seed):
    gen = torch.Generator().manual_seed(seed)
    hq, c = hkv * g, t + extra
    q = torch.randn(b, hq, t, d, generator=gen) * 4.0
    k, v = torch.randn(b, hkv, c, d, generator=gen), torch.randn(b, hkv, c, d, generator=gen)
    mask = None
    if mask_kind != "none":
        heads, rows = (hq if mask_kind == "heads" else 1), (t if mask_kind == "rows" else 1)
        mask = torch.rand(b, heads, rows, c, generator=gen) < 0.7
    if special == "zero":
        v[..., seed % d] = 0.0
    elif special == "negzero":
        v[..., seed % d] = -0.0
    elif special == "inf":
        v[:, :, -1, seed % d] = math.inf  # the last key: masked for every query but the last ones
    ref, new = both(q, k, v, mask, causal, scale, ref_block, new_block)
    assert torch.equal(bits(new), bits(ref))


@pytest.mark.parametrize("later", [1.0, math.inf])
def test_a_zero_or_non_finite_row_is_the_reference_blocks_own(later):
    # query 0 sees key 0 only (causal); its value -0.0. Its own block (one query) gives -0.0 / 1 == -0.0; a block
    # of both queries adds key 1's masked product 0 * later (+0.0, or NaN for inf) to it: +0.0 or NaN
    q, k = torch.ones(1, 1, 2, 1), torch.ones(1, 1, 2, 1)
    v = torch.tensor([-0.0, later]).view(1, 1, 2, 1)
    ref, new = both(q, k, v, None, True, None, 1, 1 << 18)
    assert bits(ref)[0, 0, 0, 0] == bits(torch.tensor(-0.0))
    assert torch.equal(bits(new), bits(ref))


def test_exact_attention_is_the_tiled_form():
    gen = torch.Generator().manual_seed(7)
    q, k, v = torch.randn(2, 4, 9, 64, generator=gen), torch.randn(2, 2, 12, 64, generator=gen), \
        torch.randn(2, 2, 12, 64, generator=gen)
    mask = torch.rand(2, 1, 1, 12, generator=gen) < 0.8
    got = exact.attention(q, k, v, mask, causal=True)
    assert torch.equal(bits(got), bits(attention_tiles.attention_reference(q, k, v, mask, causal=True)))
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask & torch.ones(9, 12, dtype=torch.bool).tril(3), enable_gqa=True), atol=1e-5, rtol=1e-5)


def test_a_differentiable_call_runs_the_reference_and_its_gradients():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 5, 16, generator=gen).requires_grad_() for _ in range(3))
    out = attention_tiles.attention(q, k, v, causal=True)
    out.sum().backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    attention_tiles.attention_reference(q, k, v, causal=True).sum().backward()
    assert all(torch.equal(g, x.grad) for g, x in zip(grads, (q, k, v)))
    with torch.no_grad():
        assert torch.equal(bits(out.detach()), bits(attention_tiles.attention(q, k, v, causal=True)))


@pytest.mark.parametrize("causal", [False, True])
def test_a_query_with_every_key_masked_is_the_references(causal):
    gen = torch.Generator().manual_seed(11)
    q, k, v = torch.randn(2, 2, 4, 8, generator=gen), torch.randn(2, 1, 6, 8, generator=gen), \
        torch.randn(2, 1, 6, 8, generator=gen)
    mask = torch.ones(2, 1, 4, 6, dtype=torch.bool)
    mask[0, 0, 1] = False  # query 1 of row 0 sees no key
    mask[1, 0, :, :3] = False  # row 1's first queries see none under the causal rule
    ref, new = both(q, k, v, mask, causal, None, 1, 1 << 18)
    assert torch.isnan(ref[0, :, 1]).all()
    assert torch.equal(bits(new), bits(ref))


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                    (torch.float32, torch.float64), (torch.float32, torch.bfloat16)])
def test_values_of_another_dtype_than_the_scores_give_the_reference_bits(dtypes: tuple[torch.dtype, torch.dtype]) -> None:
    qk, vd = dtypes
    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 4, 9, 16, generator=gen).to(qk) for _ in range(2))
    k = k[:, :2]
    v = torch.randn(2, 2, 9, 16, generator=gen).to(vd)
    ref, new = both(q, k, v, None, True, None, 1 << 18, 1 << 18)
    assert ref.dtype == new.dtype and torch.equal(ref.view(-1).view(torch.uint8), new.view(-1).view(torch.uint8))


@pytest.mark.parametrize("causal", [False, True])
def test_no_queries_give_an_empty_result(causal: bool) -> None:
    q, k = torch.randn(1, 2, 0, 8), torch.randn(1, 2, 5, 8)
    mask = torch.ones(1, 1, 0, 5, dtype=torch.bool)
    for m in (None, mask):
        assert attention_tiles.attention(q, k, k, m, causal=causal).shape == (1, 2, 0, 8)
