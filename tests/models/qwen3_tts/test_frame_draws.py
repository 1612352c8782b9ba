"""Qwen3-TTS's draws through the shared frame samplers: the host `FrameSampler` and the fused kernel draw what
the plain torch path (`choose_group0`, `draw_code`) draws for a frame of 16 groups, and on a CPU with the same
logprob bits, so codes and logprobs are the same whichever path a batch takes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models import kernels
from v2.models.kernels import sample as sample_kernel
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import FrameDraws, Qwen3TTSSamplingTensors, group0_mask
from v2.sampling_settings import SORT_WIDTH, HeadSampling

from .conftest import KEYS

G = 16
fast_heads = st.builds(HeadSampling, st.sampled_from([0.0, 5e-5, 0.3, 0.9, 1.7]), st.integers(1, SORT_WIDTH),
                       st.sampled_from([0.05, 0.5, 0.8, 1.0]))
any_heads = st.builds(HeadSampling, st.sampled_from([0.0, 0.3, 0.9, 1.7]), st.sampled_from([0, 1, 3, 50, 100]),
                      st.sampled_from([0.05, 0.5, 0.8, 1.0]))


def _case(data: st.DataObject, heads: st.SearchStrategy[HeadSampling], vocabs: tuple[int, int], eos: int,
          control: range) -> tuple:
    b = data.draw(st.integers(1, 5), label="rows")
    rows = data.draw(st.lists(st.tuples(heads, heads, st.sampled_from([1.0, 1.05, 1.5])), min_size=b, max_size=b))
    s = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling(t, c, p) for t, c, p in rows],
                                      data.draw(st.lists(st.integers(-2**62, 2**62), min_size=b, max_size=b)))
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    frame = torch.randint(0, 5000, (b,), generator=gen)
    logits0 = torch.randn(b, vocabs[0], generator=gen) * 3
    if data.draw(st.booleans(), label="ties"):
        logits0 = (logits0 * 2).round() / 2
    logits0[:, eos] += 2.0
    codes = [torch.randn(b, vocabs[1], generator=gen) * data.draw(st.sampled_from([0.5, 3.0])) for _ in range(G - 1)]
    seen = torch.rand(b, vocabs[0], generator=gen) < 0.1 if data.draw(st.booleans(), label="seen") else None
    allow = torch.tensor(data.draw(st.lists(st.booleans(), min_size=b, max_size=b)))
    return s, frame, logits0, codes, seen, allow, group0_mask(vocabs[0], eos, control, "cpu")


def _frame(d: FrameDraws, logits0, codes, seen, allow, eos, suppress,
           groups: range | tuple[int, ...] = range(1, G)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Group 0's draw, then each of `groups` (code groups 1..G-1) from its logits."""
    return [d.group0(logits0, seen=seen, allow_eos=allow, eos=eos, suppress=suppress)] + [
        d.code(g, codes[g - 1]) for g in groups]


@pytest.mark.exact
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_host_draws_equal_the_torch_path_bit_for_bit(data):
    """The release's vocabularies (3072 for group 0 with its control ids, 2048 per code group)."""
    vocabs, eos = (3072, 2048), 2150
    s, frame, logits0, codes, seen, allow, suppress = _case(data, fast_heads, vocabs, eos, range(2048, 3072))
    s.full_sort = False  # every row takes the top-candidate path, as the settings promise
    host = FrameDraws(s, frame, G, vocabs)
    assert host.host is not None and not host.fused
    torch_path = FrameDraws(s, frame, G, vocabs)
    torch_path.host = None
    for (ids, lp), (want_ids, want_lp) in zip(_frame(host, logits0, codes, seen, allow, eos, suppress),
                                              _frame(torch_path, logits0, codes, seen, allow, eos, suppress)):
        assert torch.equal(ids, want_ids)
        assert torch.equal(lp, want_lp)  # the same bits, not only close


@pytest.mark.skipif(sample_kernel.triton is None, reason="needs triton")
@settings(max_examples=8, deadline=None)
@given(st.data())
def test_fused_draws_equal_the_torch_path(data):
    """Any settings (full sort too), penalty, EOS rule and suppressed ids folded into the kernel; small
    vocabularies keep Triton's interpreter quick. A code group's draw is one stateless launch with head 1's
    settings and its group's index, so the first two and the last stand for all G-1 (the kernel's draws
    over any settings: tests/models/test_sample_kernel.py)."""
    vocabs, eos = (120, 40), 100
    s, frame, logits0, codes, seen, allow, suppress = _case(data, any_heads, vocabs, eos, range(96, 120))
    torch_path = FrameDraws(s, frame, G, vocabs)
    torch_path.host = None
    groups = (1, 2, G - 1)
    want = _frame(torch_path, logits0, codes, seen, allow, eos, suppress, groups)
    saved, kernels.FORCE = kernels.FORCE, True  # Triton's interpreter runs the kernel on the CPU
    try:
        fused = FrameDraws(s, frame, G, vocabs)
        assert fused.fused
        got = _frame(fused, logits0, codes, seen, allow, eos, suppress, groups)
    finally:
        kernels.FORCE = saved
    assert len(got) == len(want) == 1 + len(groups)
    for (ids, lp), (want_ids, want_lp) in zip(got, want):
        assert torch.equal(ids, want_ids)
        torch.testing.assert_close(lp, want_lp, atol=1e-5, rtol=1e-5)


@pytest.mark.exact
def test_generation_through_the_host_sampler_equals_the_torch_path(qmodel, qref, monkeypatch):
    """The fixture's prompts with mixed settings: every code and every logprob identical, bit for bit."""
    prompts = [torch.from_numpy(qref[f"{k}_prompt_embeds"]) for k in KEYS[:3]]
    trailing = [torch.from_numpy(qref[f"{k}_trailing_text"]) for k in KEYS[:3]]
    mixed = [Qwen3TTSSampling(), Qwen3TTSSampling.greedy(1.05),
             Qwen3TTSSampling(HeadSampling(1.2, 7, 0.8), HeadSampling(0.7, 20, 0.9), 1.3)]
    host = generate_batch(qmodel, prompts, trailing, mixed, [3, 4, 5], max_new_tokens=6)
    made = Qwen3TTS.draws

    def torch_draws(self, *args, **kwargs):
        d = made(self, *args, **kwargs)
        assert d.host is not None  # these settings take the host sampler
        d.host = None
        return d

    monkeypatch.setattr(Qwen3TTS, "draws", torch_draws)
    plain = generate_batch(qmodel, prompts, trailing, mixed, [3, 4, 5], max_new_tokens=6)
    for a, b in zip(host, plain):
        assert torch.equal(a.raw_codes, b.raw_codes) and torch.equal(a.group0, b.group0)
        assert torch.equal(a.logprobs, b.logprobs)
