"""Sampling semantics on hand-made logits, exact logprobs, and batch-independent seeded draws."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.sampling import (
    SamplingTensors, apply_repetition_penalty, fast_rows, frame_noise, gumbel_noise, hash_u32, processed,
    process_logits, sample,
)
from v2.sampling_settings import SORT_WIDTH, HeadSampling, SamplingSettings


def one(value, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor([value], dtype=dtype)


def support(logits, t=1.0, k=0, p=1.0) -> list[int]:
    z = process_logits(torch.tensor([logits]), one(t), one(k, torch.long), one(p))
    return torch.nonzero(torch.isfinite(z[0])).flatten().tolist()


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Plain scalar MurmurHash3 x86_32, the reference for the tensor version."""
    m = 0xFFFFFFFF
    h = seed
    for (k,) in struct.iter_unpack("<I", data):
        k = (k * 0xCC9E2D51) & m
        k = ((k << 15) | (k >> 17)) & m
        k = (k * 0x1B873593) & m
        h ^= k
        h = ((h << 13) | (h >> 19)) & m
        h = (h * 5 + 0xE6546B64) & m
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=5))
def test_hash_is_murmur3(words):
    expected = murmur3_32(struct.pack(f"<{len(words)}I", *words))
    got = hash_u32([torch.tensor([w], dtype=torch.long) for w in words])
    assert int(got) == expected


def test_top_k_keeps_ties_at_the_kth_value():
    assert support([3.0, 1.0, 3.0, 2.0, 3.0], k=2) == [0, 2, 4]
    assert support([3.0, 1.0, 2.5, 2.0], k=2) == [0, 2]
    assert support([3.0, 1.0, 2.5, 2.0], k=0) == [0, 1, 2, 3]  # 0 = off
    assert support([3.0, 1.0, 2.5, 2.0], k=9) == [0, 1, 2, 3]


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([0.15, 0.5, 0.05, 0.3])).tolist()
    assert support(logits, p=0.1) == [1]
    assert support(logits, p=0.45) == [1]
    assert support(logits, p=0.6) == [1, 3]
    assert support(logits, p=0.85) == [0, 1, 3]
    assert support(logits, p=1.0) == [0, 1, 2, 3]


def test_top_p_applies_after_top_k_and_temperature():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1])).tolist()
    # top-k 2 renormalises to (4/7, 3/7): p = 0.5 then keeps only the first
    assert support(logits, k=2, p=0.5) == [0]
    # a high temperature flattens the distribution, so top-p keeps more
    assert len(support(logits, t=10.0, p=0.6)) > len(support(logits, t=1.0, p=0.6))


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([[-2.0, 2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, torch.tensor([2.0]))
    assert out.tolist() == [[-4.0, 1.0, 1.0, -1.0]]


def test_greedy_is_a_point_mass_on_the_first_argmax():
    noise = gumbel_noise(one(7, torch.long), one(3, torch.long), 4)
    ids, lp = sample(torch.tensor([[1.0, 5.0, 5.0, 0.0]]), one(0.0), one(0, torch.long), one(1.0), noise)
    assert ids.tolist() == [1] and lp.tolist() == [0.0]


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=2, max_size=40),
    t=st.floats(0.05, 5.0), k=st.integers(0, 50), p=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**40), counter=st.integers(0, 10**6),
)
def test_drawn_token_is_in_support_and_logprob_is_exact(logits, t, k, p, seed, counter):
    x = torch.tensor([logits])
    z = process_logits(x, one(t), one(k, torch.long), one(p))
    kept = torch.isfinite(z[0])
    assert kept[x.argmax()]  # the most likely token always survives
    if k > 0:
        assert int(kept.sum()) >= min(k, len(logits)) or p < 1.0
    probs = torch.softmax(x / t, dim=-1)[0]
    if k == 0:
        assert float(probs[kept].sum()) >= min(p, 1.0) - 1e-5
    noise = gumbel_noise(one(seed, torch.long), one(counter, torch.long), len(logits))
    ids, lp = sample(x, one(t), one(k, torch.long), one(p), noise)
    assert bool(kept[ids[0]])
    expected = torch.log_softmax(z, dim=-1)[0, ids[0]]
    assert math.isfinite(float(lp)) and float(lp) <= 0.0
    torch.testing.assert_close(lp[0], expected)


def test_draws_follow_the_processed_distribution():
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5])
    n = 20000
    noise = gumbel_noise(torch.full((n,), 42, dtype=torch.long), torch.arange(n), 4)
    ids, _ = sample(logits.expand(n, 4), torch.full((n,), 1.0), torch.zeros(n, dtype=torch.long), torch.ones(n), noise)
    freq = torch.bincount(ids, minlength=4).float() / n
    torch.testing.assert_close(freq, torch.softmax(logits, 0), atol=0.015, rtol=0)


def test_draw_depends_on_seed_counter_and_not_on_batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 100, generator=g)
    seeds = torch.arange(16, dtype=torch.long) * 1000 + 3
    counters = torch.arange(16, dtype=torch.long) * 13 + 5
    full = sample(logits, torch.ones(16), torch.zeros(16, dtype=torch.long), torch.ones(16),
                  gumbel_noise(seeds, counters, 100))
    for i in (0, 7, 15):
        noise = gumbel_noise(seeds[i : i + 1], counters[i : i + 1], 100)
        alone = sample(logits[i : i + 1], one(1.0), one(0, torch.long), one(1.0), noise)
        assert int(alone[0]) == int(full[0][i]) and float(alone[1]) == float(full[1][i])
    noise = gumbel_noise(seeds[:2], counters[:2], 100)
    assert not torch.equal(noise[0], noise[1])
    assert torch.equal(gumbel_noise(seeds[:1], counters[:1], 100)[0], noise[0])
    per_frame = frame_noise(seeds[:2], torch.tensor([0, 4]), 100)  # [2, 13, 100]
    assert torch.equal(per_frame[1, 3], gumbel_noise(seeds[1:2], torch.tensor([4 * 13 + 3]), 100)[0])


@torch.no_grad()
def test_decode_frame_is_identical_at_batch_1_and_batch_16(tiny_model):
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(16, tiny_model.cfg.hidden_size, generator=g)
    settings_ = [SamplingSettings(), SamplingSettings.uniform(1.2, 10, 0.9, 1.4)] * 8
    st_ = SamplingTensors.build(settings_, list(range(100, 116)))
    steps = torch.arange(16, dtype=torch.long) % 5
    presence = torch.rand(16, 12, 1024, generator=g) < 0.05
    batch = tiny_model.decode_frame(hidden, st_, steps, presence=presence)
    for i in range(16):
        idx = torch.tensor([i])
        alone = tiny_model.decode_frame(hidden[idx], st_.rows(idx), steps[idx], presence=presence[idx])
        assert torch.equal(alone.codes[0], batch.codes[i])
        assert bool(alone.stop[0]) == bool(batch.stop[i])
        torch.testing.assert_close(alone.logprobs[0], batch.logprobs[i], atol=1e-6, rtol=0)
        torch.testing.assert_close(alone.next_embed[0], batch.next_embed[i], atol=1e-6, rtol=0)


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=-1),
                                 dict(top_p=0.0), dict(top_p=1.5)])
def test_invalid_head_settings_are_refused(bad):
    args = dict(temperature=1.0, top_k=0, top_p=1.0) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        HeadSampling(**args)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingSettings(repetition_penalty=0.0)


def _both_paths(logits, t, k, p):
    x = torch.tensor(logits)
    n = x.shape[0]
    args = (torch.full((n,), t), torch.full((n,), k, dtype=torch.long), torch.full((n,), p))
    return process_logits(x, *args, width=SORT_WIDTH), process_logits(x, *args)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(-6, 6), min_size=200, max_size=200), min_size=1, max_size=3),
       st.integers(1, SORT_WIDTH), st.floats(0.3, 3.0))
def test_top_width_path_keeps_every_tie_at_the_kth_value(grid, k, t):
    """Coarse integer logits make big tie groups, reaching past the sorted prefix."""
    fast, full = _both_paths([[float(v) for v in row] for row in grid], t, k, 1.0)
    assert torch.equal(torch.isfinite(fast), torch.isfinite(full))
    torch.testing.assert_close(fast[torch.isfinite(fast)], full[torch.isfinite(full)], atol=0, rtol=0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, SORT_WIDTH), st.floats(0.3, 3.0), st.floats(0.05, 1.0), st.booleans())
def test_top_width_path_equals_the_full_sort(seed, k, t, p, ties):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 300, generator=g) * 3
    if ties:  # ties inside the sorted prefix
        x = (x * 2).round() / 2
    fast, full = _both_paths(x.tolist(), t, k, p)
    assert torch.equal(fast, full)


def test_rows_choose_their_own_path_whatever_the_batch():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 1024, generator=g)
    temperature, top_p = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0.9, 0.7, 1.0])
    top_k = torch.tensor([25, 0, 0])  # a fast row, a full-sort row, a greedy row
    assert fast_rows(temperature, top_k, 1024).tolist() == [True, False, True]
    mixed = processed(x, temperature, top_k, top_p)
    for i in range(3):
        alone = processed(x[i : i + 1], temperature[i : i + 1], top_k[i : i + 1], top_p[i : i + 1])
        assert torch.equal(alone[0], mixed[i])
    only_fast = processed(x[[0, 2]], temperature[[0, 2]], top_k[[0, 2]], top_p[[0, 2]], full=False)
    assert torch.equal(only_fast, mixed[[0, 2]])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31))
def test_both_ways_of_listing_the_top_members_agree(seed):
    from v2.models.sampling import _stable_top

    x = (torch.randn(3, 500, generator=torch.Generator().manual_seed(seed)) * 2).round()  # many ties
    a, b = _stable_top(x, SORT_WIDTH, by_topk=False), _stable_top(x, SORT_WIDTH, by_topk=True)
    full_values, full_ids = torch.sort(x, dim=-1, descending=True, stable=True)
    for got in (a, b):
        assert torch.equal(got[0], full_values[:, :SORT_WIDTH]) and torch.equal(got[1], full_ids[:, :SORT_WIDTH])


def test_noise_is_finite_at_the_extreme_hashes():
    from v2.models.sampling import gumbel_from_hash

    g = gumbel_from_hash(torch.tensor([0, 511, 512, 2**31, 2**32 - 1], dtype=torch.long))
    assert torch.isfinite(g).all() and g[0] == g[1] < g[2] < g[3] < g[4]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**40), st.integers(0, 10**6))
def test_a_drawn_token_always_has_a_finite_logprob(seed, counter):
    logits = torch.randn(4, 1024, generator=torch.Generator().manual_seed(seed % 1000)) * 4
    n = 4
    noise = gumbel_noise(torch.full((n,), seed), torch.arange(counter, counter + n), 1024)
    ids, lp = sample(logits, torch.ones(n), torch.full((n,), 25), torch.full((n,), 0.8), noise)
    assert torch.isfinite(lp).all()


def test_a_tiny_positive_temperature_is_greedy_not_nan():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0]])
    noise = gumbel_noise(one(1, torch.long), one(0, torch.long), 4)
    for t in (1.17e-38, 1e-6, 0.0):
        ids, lp = sample(x, one(t), one(0, torch.long), one(1.0), noise)
        assert ids.tolist() == [1] and lp.tolist() == [0.0]
