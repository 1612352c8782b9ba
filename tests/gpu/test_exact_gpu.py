"""On a GPU: what batched == alone rests on there (designs/model.md, "Exact on every CPU", "On the GPU").

A frame step replays the graph of its batch bucket, one fixed shape, so a row's projections and attention
must not depend on what the other rows of that shape hold; off the CPU the exact forms are the plain
kernels, bit for bit (they add nothing on the GPU path)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from v2.models import exact

pytestmark = pytest.mark.gpu


def _randn(*shape: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bucket", [1, 16, 64])
@pytest.mark.parametrize("dims", [(2560, 9728), (9728, 2560), (1024, 12 * 1024)])
def test_a_row_of_a_fixed_shape_projection_does_not_depend_on_the_other_rows(dtype, bucket, dims):
    k, n = dims
    w = _randn(n, k, seed=1, dtype=dtype) * k**-0.5
    row = _randn(1, k, seed=2, dtype=dtype)
    outs = []
    for seed in range(3):
        x = _randn(bucket, k, seed=10 + seed, dtype=dtype)
        x[bucket // 2] = row[0]
        outs.append(F.linear(x, w)[bucket // 2])
    assert all(torch.equal(o, outs[0]) for o in outs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_sdpa_rows_of_one_shape_do_not_depend_on_the_other_rows(dtype):
    q, k, v = (_randn(8, 16, 1, 128, seed=s, dtype=dtype) for s in (1, 2, 3))
    keys, values = _randn(8, 8, 300, 128, seed=4, dtype=dtype), _randn(8, 8, 300, 128, seed=5, dtype=dtype)
    mask = torch.ones(8, 1, 1, 300, dtype=torch.bool, device="cuda")
    a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    keys2, values2 = keys.clone(), values.clone()
    keys2[1:], values2[1:] = keys2[1:].flip(0), values2[1:].flip(0)
    b = F.scaled_dot_product_attention(q, keys2, values2, attn_mask=mask, enable_gqa=True)
    assert torch.equal(a[0], b[0])


def test_the_exact_forms_are_the_plain_kernels_on_cuda():
    x, w, bias = _randn(5, 96, seed=1, dtype=torch.float32), _randn(40, 96, seed=2, dtype=torch.float32), \
        _randn(40, seed=3, dtype=torch.float32)
    assert torch.equal(exact.linear(x, w, bias), F.linear(x, w, bias))
    q, k, v = _randn(2, 4, 3, 16, seed=4, dtype=torch.float32), _randn(2, 2, 7, 16, seed=5, dtype=torch.float32), \
        _randn(2, 2, 7, 16, seed=6, dtype=torch.float32)
    mask = torch.ones(2, 1, 3, 7, dtype=torch.bool, device="cuda").tril(4)
    assert torch.equal(exact.attention(q, k, v, mask),
                       F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))
    g = _randn(1000, seed=7, dtype=torch.float32)
    assert torch.equal(exact.silu(g), F.silu(g)) and torch.equal(exact.gelu(g), F.gelu(g))
