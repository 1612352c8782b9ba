"""The host frame sampler draws what `sampling.sample` draws: the same ids, logprobs within float rounding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models import frame_sampler
from v2.models.frame_sampler import FrameSampler
from v2.models.sampling import SamplingTensors, frame_noise, processed, sample
from v2.sampling_settings import SORT_WIDTH, HeadSampling, SamplingSettings

pytestmark = pytest.mark.exact

V = 1024
VOCABS = [2] + [V] * 12  # MOSS-TTS-Local's frame: the stop decision, then 12 codebooks


def torch_draws(s: SamplingTensors, steps: torch.Tensor, logits: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    noise = frame_noise(s.seed, steps, V)
    return [sample(x, s.temperature[:, ch], s.top_k[:, ch], s.top_p[:, ch], noise[:, ch], full=ch == 0)
            for ch, x in enumerate(logits)]


def assert_same(s: SamplingTensors, steps: torch.Tensor, logits: list[torch.Tensor]) -> None:
    sampler = FrameSampler(s, steps, VOCABS)
    for ch, (ids, lp) in enumerate(torch_draws(s, steps, logits)):
        got_ids, got_lp = sampler.draw(ch, logits[ch])
        assert torch.equal(got_ids, ids), ch
        torch.testing.assert_close(got_lp, lp, atol=2e-6, rtol=0)


heads = st.builds(HeadSampling, st.sampled_from([0.0, 1e-5, 0.3, 1.0, 1.7]), st.integers(1, SORT_WIDTH),
                  st.sampled_from([0.05, 0.5, 0.8, 0.95, 1.0]))
stops = st.builds(HeadSampling, st.sampled_from([0.0, 1.0, 2.0]), st.sampled_from([0, 1, 2, 50]),
                  st.sampled_from([0.3, 1.0]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(stops, heads), min_size=1, max_size=20), st.integers(0, 2**40),
       st.sampled_from(["normal", "coarse", "flat", "big-tie"]))
def test_draws_equal_the_torch_sampler(rows, seed, kind):
    b = len(rows)
    s = SamplingTensors.build([SamplingSettings(stop, audio) for stop, audio in rows], [seed + i for i in range(b)])
    g = torch.Generator().manual_seed(seed % 2**31)
    steps = torch.randint(0, 500, (b,), generator=g)
    logits = [torch.randn(b, 2 if ch == 0 else V, generator=g) * 3 for ch in range(13)]
    if kind == "coarse":  # many ties everywhere
        logits = [(x * 2).round() / 2 for x in logits]
    elif kind == "flat":  # every value tied: the candidates cannot hold the tie (the fallback)
        logits = [torch.zeros_like(x) for x in logits]
    elif kind == "big-tie":  # a tie of 100 at the top of one row
        for x in logits[1:]:
            x[0, :100] = x.max() + 1
    assert_same(s, steps, logits)


@pytest.mark.parametrize("b", [1, 3, 16])
def test_the_whole_frame_noise_and_the_noise_at_the_candidates_agree(b, monkeypatch):
    s = SamplingTensors.build([SamplingSettings()] * b, list(range(7, 7 + b)))
    steps = torch.arange(b) * 3
    g = torch.Generator().manual_seed(b)
    logits = [torch.randn(b, 2 if ch == 0 else V, generator=g) for ch in range(13)]
    monkeypatch.setattr(frame_sampler, "FRAME_NOISE_MAX", 0)  # hashed at the candidates
    assert FrameSampler(s, steps, VOCABS).noise is None
    assert_same(s, steps, logits)
    monkeypatch.setattr(frame_sampler, "FRAME_NOISE_MAX", 10**9)  # gathered from the frame's noise
    assert FrameSampler(s, steps, VOCABS).noise is not None
    assert_same(s, steps, logits)


def test_a_row_draws_the_same_alone_and_in_a_batch_that_falls_back():
    s = SamplingTensors.build([SamplingSettings()] * 4, [11, 12, 13, 14])
    steps = torch.tensor([0, 1, 2, 3])
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, V, generator=g)
    logits[3] = 0.0  # row 3's tie at its k-th value runs past the candidates: the batch falls back
    batch = FrameSampler(s, steps, VOCABS).draw(5, logits)
    for i in range(3):
        idx = torch.tensor([i])
        alone = FrameSampler(s.rows(idx), steps[idx], VOCABS).draw(5, logits[idx])
        assert int(alone[0]) == int(batch[0][i])
        torch.testing.assert_close(alone[1], batch[1][i:i + 1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("seeds", [[0, 1, 2], [2**32 - 1, 2**32, 2**40 + 5], [2**63 - 1, 123456789012345, 7]])
def test_the_host_hash_gives_the_torch_noise_bit_for_bit(seeds):
    s = SamplingTensors.build([SamplingSettings()] * 3, seeds)
    steps = torch.tensor([0, 77, 2**28])
    sampler = FrameSampler(s, steps, VOCABS)
    assert torch.equal(torch.from_numpy(sampler.noise), frame_noise(s.seed, steps, V))
    ids = torch.tensor([[0, 5, 1023], [1, 2, 3], [1000, 999, 7]])
    for ch in (0, 6, 12):
        got = torch.from_numpy(sampler._noise_at(ch, ids.numpy()))
        assert torch.equal(got, frame_noise(s.seed, steps, V)[:, ch].gather(1, ids))
        sampler.noise = None  # now hashed at the ids


@pytest.mark.parametrize("vocabs,rows,temperature,top_k,top_p,exact", [
    ([2051] * 32, 1, 0.9, 50, 1.0, True),              # CSM's sampled frame
    ([3072] + [2048] * 15, 16, 0.9, 50, 1.0, True),    # Qwen3-TTS's
    ([2] + [V] * 12, 16, 1.7, 25, 0.8, False),         # MOSS's (the stop channel sorted whole)
])
def test_a_draw_is_a_few_torch_operations(vocabs, rows, temperature, top_k, top_p, exact):
    """The frame's setup is numpy (at most the noise's two logs in torch); a draw is its topk, the softmax of
    the top-p mass and the logprob's log-softmax (with the whole row they read) and the noise's logs: the
    rest runs on the W + 1 candidates in numpy, where torch's per-operation cost would dominate."""
    from v2.bench.launches import LaunchCounter

    g = len(vocabs)
    s = SamplingTensors.build([SamplingSettings.uniform(temperature, top_k, top_p)] * rows, list(range(rows)))
    cols = type("Columns", (), {"temperature": s.temperature[:, :1].expand(rows, g).contiguous(),
                                "top_k": s.top_k[:, :1].expand(rows, g).contiguous(),
                                "top_p": s.top_p[:, :1].expand(rows, g).contiguous(), "seed": s.seed})
    gen = torch.Generator().manual_seed(rows)
    logits = [torch.randn(rows, v, generator=gen) * 3 for v in vocabs]
    with LaunchCounter() as setup:
        sampler = FrameSampler(cols, torch.arange(rows) + 9, vocabs, exact_logprobs=exact)
    assert sum(setup.ops.values()) <= 2, setup.ops
    for grp, x in enumerate(logits):
        with LaunchCounter() as c:
            sampler.draw(grp, x)
        assert sum(c.ops.values()) <= 7, (grp, c.ops)


@pytest.mark.parametrize("b", [1, 3, 16])
def test_candidate_logprobs_are_the_log_softmax_over_the_stable_top_width(b):
    """Without `exact_logprobs` a logprob is, bit for bit, the log-softmax of the processed logits at the
    top SORT_WIDTH ids in stable order (by value, ties by id): the sum's order is pinned, not only its value."""
    s = SamplingTensors.build([SamplingSettings()] * b, list(range(3, 3 + b)))
    steps = torch.arange(b) + 100
    gen = torch.Generator().manual_seed(b)
    sampler = FrameSampler(s, steps, VOCABS)
    for ch in range(1, 13):
        x = torch.randn(b, V, generator=gen) * 2
        ids, lp = sampler.draw(ch, x)
        t, k, p = s.temperature[:, ch], s.top_k[:, ch], s.top_p[:, ch]
        z = x / t[:, None]
        order = torch.sort(z, dim=-1, descending=True, stable=True).indices[:, :SORT_WIDTH]  # [B, W]
        want = torch.log_softmax(processed(x, t, k, p, full=False).gather(1, order), dim=-1)
        at = (order == ids[:, None]).int().argmax(dim=-1, keepdim=True)                         # [B, 1]
        assert torch.equal(order.gather(1, at)[:, 0], ids), ch
        assert torch.equal(lp, want.gather(1, at)[:, 0]), ch
