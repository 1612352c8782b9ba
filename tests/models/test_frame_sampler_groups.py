"""The host frame sampler for any number of code groups, each with its own vocabulary: the same ids as
`sampling.sample` with the noise of counter step * G + g, logprobs within rounding (bit for bit with
`exact_logprobs`), whichever groups a sampler is made for."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.frame_sampler import FrameSampler
from v2.models.sampling import gumbel_noise, sample
from v2.sampling_settings import SORT_WIDTH

pytestmark = pytest.mark.exact


@dataclass
class Columns:
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    seed: torch.Tensor


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_any_group_count_and_vocabularies_draw_as_the_torch_sampler(data):
    g = data.draw(st.sampled_from([1, 2, 5, 16, 32]), label="groups")
    vocabs = data.draw(st.lists(st.sampled_from([2, 40, 64, 65, 300, 2048]), min_size=g, max_size=g), label="vocabs")
    b = data.draw(st.integers(1, 6), label="rows")

    def column(values: list) -> list:
        return data.draw(st.lists(st.lists(st.sampled_from(values), min_size=g, max_size=g), min_size=b, max_size=b))

    s = Columns(torch.tensor(column([0.0, 5e-5, 0.4, 1.0, 1.7])), torch.tensor(column(list(range(1, SORT_WIDTH + 1)))),
                torch.tensor(column([0.1, 0.8, 1.0])),
                torch.tensor(data.draw(st.lists(st.integers(-2**62, 2**62), min_size=b, max_size=b))))
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    steps = torch.randint(0, 10**6, (b,), generator=gen)
    logits = [torch.randn(b, v, generator=gen) * 3 for v in vocabs]
    if data.draw(st.booleans(), label="ties"):
        logits = [(x * 2).round() / 2 for x in logits]
    drawn = sorted(data.draw(st.sets(st.integers(0, g - 1), min_size=1), label="drawn"))
    exact = data.draw(st.booleans(), label="exact")
    sampler = FrameSampler(s, steps, vocabs, groups=drawn, exact_logprobs=exact)
    for grp in drawn:
        x = logits[grp]
        want_ids, want_lp = sample(x, s.temperature[:, grp], s.top_k[:, grp], s.top_p[:, grp],
                                   gumbel_noise(s.seed, steps * g + grp, vocabs[grp]), full=False)
        ids, lp = sampler.draw(grp, x)
        assert torch.equal(ids, want_ids), grp
        if exact:
            assert torch.equal(lp, want_lp), grp
        else:
            torch.testing.assert_close(lp, want_lp, atol=2e-6, rtol=0)


def test_logits_of_another_vocabulary_are_refused_naming_the_group():
    s = Columns(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3), torch.zeros(1, dtype=torch.long))
    sampler = FrameSampler(s, torch.zeros(1, dtype=torch.long), [10, 20, 30])
    with pytest.raises(ValueError, match="group 1 has 20 ids, got logits of 30"):
        sampler.draw(1, torch.zeros(1, 30))
    with pytest.raises(ValueError, match="settings \\(1, 3\\) for 1 rows of 2 groups"):
        FrameSampler(s, torch.zeros(1, dtype=torch.long), [10, 20])


def test_raw_greedy_logprobs_take_one_flag_per_group():
    s = Columns(torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2),
                torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="raw_greedy_logprobs has 1 flags for 2 groups"):
        FrameSampler(s, torch.zeros(2, dtype=torch.long), [10, 10], raw_greedy_logprobs=[True])
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(1))
    sampler = FrameSampler(s, torch.zeros(2, dtype=torch.long), [10, 10], raw_greedy_logprobs=[True, False])
    ids, lp = sampler.draw(0, x)
    assert torch.equal(ids, x.argmax(-1))
    assert torch.equal(lp, torch.log_softmax(x, dim=-1).gather(1, ids[:, None])[:, 0])
    assert torch.equal(sampler.draw(1, x)[1], torch.zeros(2))  # the point mass's 0 where not asked
