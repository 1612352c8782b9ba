"""The call-invariant arithmetic (`v2.models.exact`): a row's result is the same bits whatever the call.

Run under each CPU path torch has (`.ci/run` repeats the `exact` tests with AVX2 and the default capability
forced): a row of `linear` in any row count, position and neighbourhood; `halving_sum` with trailing zeros;
attention with more masked keys, other rows, other query chunks; activations in a call's body and tail."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from v2.models import exact

pytestmark = pytest.mark.exact


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 70), n=st.sampled_from([1, 2, 5, 16, 33, 130]), rows=st.integers(1, 60),
       at=st.integers(0, 59), tile=st.sampled_from([16, 64]), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_a_rows_linear_is_the_same_in_any_call(k, n, rows, at, tile, bias, seed):
    w, b = randn(n, k, seed=seed), (randn(n, seed=seed + 1) if bias else None)
    x = randn(rows, k, seed=seed + 2)
    at = at % rows
    alone = exact.linear(x[at : at + 1], w, b, tile)
    together = exact.linear(x, w, b, tile)[at : at + 1]
    shifted = exact.linear(torch.cat([randn(at % 7 + 1, k, seed=seed + 3), x[at : at + 1]]), w, b, tile)[-1:]
    assert torch.equal(alone, together) and torch.equal(alone, shifted)
    torch.testing.assert_close(together, F.linear(x[at : at + 1], w, b), atol=1e-5, rtol=1e-5)


def test_the_aligned_weight_follows_in_place_updates():
    layer = exact.Linear(5, 3)
    x = randn(2, 5, seed=0)
    before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    assert not torch.equal(layer(x), before)


@given(n=st.integers(1, 80), zeros=st.integers(0, 80), seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_halving_sum_ignores_trailing_zeros_and_is_the_sum(n, zeros, seed):
    x = randn(3, n, 4, seed=seed)
    padded = torch.cat([x, torch.zeros(3, zeros, 4)], dim=1)
    assert torch.equal(exact.halving_sum(x, 1), exact.halving_sum(padded, 1))
    torch.testing.assert_close(exact.halving_sum(x, 1), x.sum(1), atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(c=st.integers(1, 70), extra=st.integers(0, 40), t=st.integers(1, 6), groups=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**16))
def test_attention_is_the_same_with_more_masked_keys_other_rows_and_other_chunks(c, extra, t, groups, seed):
    hkv, d = 2, 8
    t = min(t, c)
    q = randn(1, hkv * groups, t, d, seed=seed)
    k, v = randn(1, hkv, c, d, seed=seed + 1), randn(1, hkv, c, d, seed=seed + 2)
    mask = torch.ones(1, 1, t, c, dtype=torch.bool).tril(c - t)
    alone = exact.attention(q, k, v, mask)
    torch.testing.assert_close(alone, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=groups > 1),
                               atol=1e-5, rtol=1e-5)
    assert torch.equal(alone, exact.attention(q, k, v, causal=True))
    # the same row padded with masked keys, next to another row with a longer context
    kp = torch.cat([k, randn(1, hkv, extra, d, seed=seed + 3)], dim=2)
    vp = torch.cat([v, randn(1, hkv, extra, d, seed=seed + 4)], dim=2)
    other = randn(1, hkv * groups, t, d, seed=seed + 5)
    keys = torch.cat([kp, randn(1, hkv, c + extra, d, seed=seed + 6)])
    values = torch.cat([vp, randn(1, hkv, c + extra, d, seed=seed + 7)])
    wide = torch.cat([F.pad(mask, (0, extra)), torch.ones(1, 1, t, c + extra, dtype=torch.bool)])
    batched = exact.attention(torch.cat([q, other]), keys, values, wide)
    assert torch.equal(batched[:1], alone)
    # one query at a time (a chunked prefill) gives each query's bits
    for i in range(t):
        assert torch.equal(exact.attention(q[:, :, i : i + 1], k, v, mask[:, :, i : i + 1]), alone[:, :, i : i + 1])


@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh"])
def test_activations_give_the_same_bits_in_a_calls_body_and_its_tail(name):
    f = getattr(exact, name)
    x = randn(4099, seed=1) * 4
    whole = f(x)
    for length in (1, 3, 7, 9, 15, 17, 31, 33):
        for s in range(0, 600, length):
            assert torch.equal(f(x[s : s + length]), whole[s : s + length]), (length, s)
    reference = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[name]
    torch.testing.assert_close(whole, reference(x), atol=1e-6, rtol=1e-5)


def test_a_fully_masked_query_row_stays_in_its_row():
    q, k, v = randn(2, 1, 1, 8, seed=0), randn(2, 1, 4, 8, seed=1), randn(2, 1, 4, 8, seed=2)
    mask = torch.tensor([[False] * 4, [True] * 4])[:, None, None]
    out = exact.attention(q, k, v, mask)
    assert torch.isfinite(out[1]).all()
    assert torch.equal(out[1:], exact.attention(q[1:], k[1:], v[1:], mask[1:]))
    assert not math.isinf(float(out[1].abs().max()))


def bits(x: torch.Tensor) -> torch.Tensor:
    """float32 values as their bit patterns (torch.equal holds -0.0 == 0.0)."""
    return x.contiguous().view(torch.int32)


def test_silu_of_a_negated_input_is_the_negated_silu_bit_for_bit_in_a_calls_body_and_its_tail():
    x = torch.cat([randn(4099, seed=3) * 8, randn(64, seed=4) * 1e-30, randn(64, seed=5) * 100,
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 88.0, -88.0, 1e-45, -1e-45])])
    want = -exact.silu(x)
    for length in (1, 3, 7, 9, 15, 16, 17, 31, 33, x.numel()):
        for s in range(0, x.numel(), max(length, 97)):
            y = -x[s : s + length]
            out = torch.full_like(y, float("nan"))
            exact.silu_of_negated_into(y, out)
            assert torch.equal(bits(out), bits(want[s : s + length])), (length, s)


@pytest.mark.parametrize("rows", [1, 16, 17])
def test_an_mlp_of_negated_weights_through_the_negated_silu_gives_the_mlps_bits(rows):
    w_in, b_in, w_out, b_out = randn(72, 40, seed=6), randn(72, seed=7), randn(40, 72, seed=8), randn(40, seed=9)
    x = randn(rows, 40, seed=10)
    want = exact.linear(exact.silu(exact.linear(x, w_in, b_in)), w_out, b_out)
    negated = exact.linear(x, -w_in, -b_in)
    assert torch.equal(bits(negated), bits(-exact.linear(x, w_in, b_in)))  # the projection's outputs, negated
    act = torch.empty_like(negated)
    exact.silu_of_negated_into(negated, act)
    assert torch.equal(bits(exact.linear(act, -w_out, b_out)), bits(want))


@pytest.mark.parametrize("width", [1, 12, 16, 40, 64, 128])
def test_rms_norm_into_is_the_models_rmsnorm_written_into_the_buffers(width):
    """`exact.rms_norm_into` (the decode row's and the kept frame pass's norm) equals `qwen3.RMSNorm` bit for bit over
    values of all magnitudes (zeros included), into `out` and made, over rows and over heads of rows; it writes
    only its buffers."""
    from v2.models.qwen3 import RMSNorm

    g = torch.Generator().manual_seed(width)
    x = torch.randn(37, 3, width, generator=g) * 10.0 ** torch.randint(-18, 18, (37, 3, 1), generator=g)
    x[0] = 0.0
    for eps in (1e-6, 1e-5, 1e-2):
        norm = RMSNorm(width, eps)
        with torch.no_grad():
            norm.weight.normal_(generator=g)
            want = norm(x)
        sq, ms, out = torch.empty_like(x), torch.empty(37, 3, 1), torch.full_like(x, float("nan"))
        before = x.clone()
        assert exact.rms_norm_into(x, norm.weight.detach(), eps, sq, ms, out) is out
        assert torch.equal(bits(out), bits(want)) and torch.equal(bits(x), bits(before))
        made = exact.rms_norm_into(x[:, 0], norm.weight.detach(), eps, sq[:, 0], ms[:, 0])  # [37, H]: rows
        assert torch.equal(bits(made), bits(want[:, 0]))


def test_a_kept_scalar_is_one_operand_with_a_python_numbers_bits():
    """`exact.scalar`: one 0-dim float32 tensor per value, made once; in float32 operations the same bits as the
    Python number (wrapped per call) and as a [1] tensor."""
    x = torch.cat([randn(4099, seed=11) * 8, randn(64, seed=12) * 1e-38, torch.tensor([0.0, -0.0, 1.0, 3e38])])
    for value in (1.0, 1e-6, 1e-5, 1.0 / math.sqrt(12.0), 1.0 / math.sqrt(128.0), 0.1, 40.0):
        t = exact.scalar(value)
        assert t is exact.scalar(value) and t.dim() == 0 and t.dtype == torch.float32
        one = torch.tensor([value], dtype=torch.float32)
        for op in (torch.mul, torch.add, torch.sub, torch.div):
            assert torch.equal(bits(op(x, t)), bits(op(x, value))) and torch.equal(bits(op(x, t)), bits(op(x, one)))
        quotient = torch.addcdiv(t, x, exact.scalar(40.0))
        assert torch.equal(bits(quotient), bits(torch.addcdiv(one, x, torch.tensor(40.0))))


def every_magnitude() -> torch.Tensor:
    """float32 values of every exponent (subnormals, zeros of both signs, infinities, NaN) and of the usual range."""
    g = torch.Generator().manual_seed(13)
    sweep = torch.arange(0, 0x7F800000, 65537, dtype=torch.int64).to(torch.int32).view(torch.float32)  # [0, max]
    return torch.cat([sweep, -sweep, randn(4099, seed=14) * 4, randn(512, seed=15) * 30,
                      torch.randn(4096, generator=g) * 10.0 ** torch.randint(-45, 39, (4096,), generator=g),
                      torch.tensor([0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38, math.inf, -math.inf, math.nan])])


@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh"])
def test_the_into_activations_are_the_activations_bits_and_make_nothing(name):
    """`exact.<act>_into` equals `exact.<act>` bit for bit (NaN's bits too) over every magnitude, in a call's body and
    its tail and on rows of a wider buffer (a frame pass's fc_in rows); each of its operations writes into
    out and x is left as it was."""
    from torch.utils._python_dispatch import TorchDispatchMode

    f, into = getattr(exact, name), getattr(exact, f"{name}_into")
    x = every_magnitude()
    want = f(x)
    for length in (1, 3, 7, 9, 15, 16, 17, 31, 33, x.numel()):
        for s in range(0, x.numel(), max(length, 4999)):
            part = x[s : s + length]
            out = torch.full_like(part, 7.0)
            into(part, out)
            assert torch.equal(bits(out), bits(want[s : s + length])), (length, s)
    rows = torch.zeros(16, 72)[:3].copy_(x[:216].view(3, 72))  # [3, 72] rows of a [16, 72] buffer
    out, before = torch.empty(3, 72), rows.clone()

    class Writes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            result = func(*args, **(kwargs or {}))
            assert result.data_ptr() == out.data_ptr(), f"{func} made a tensor"
            return result

    with torch.inference_mode(), Writes():
        into(rows, out)
    assert torch.equal(bits(out), bits(f(rows))) and torch.equal(bits(rows), bits(before))


def test_a_kept_scalar_keeps_the_sign_of_zero_and_nan() -> None:
    assert math.copysign(1.0, float(exact.scalar(-0.0))) == -1.0
    assert math.copysign(1.0, float(exact.scalar(0.0))) == 1.0
    assert exact.scalar(-0.0) is exact.scalar(-0.0) and exact.scalar(0.0) is not exact.scalar(-0.0)
    assert math.isnan(float(exact.scalar(float("nan")))) and exact.scalar(float("nan")) is exact.scalar(float("nan"))
