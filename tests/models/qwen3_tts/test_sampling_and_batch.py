"""Qwen3-TTS choices: the reference's group-0 rule, seeded sampling with exact logprobs, batched == alone."""

from __future__ import annotations

import pytest
import math

import torch
from hypothesis import given, settings, strategies as st

from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.models.sampling import processed
from v2.sampling_settings import HeadSampling

from .conftest import KEYS

SAMPLED = Qwen3TTSSampling()  # the release defaults: 0.9 / top-k 50 / top-p 1, penalty 1.05


def plain_group0_argmax(logits: torch.Tensor, seen: set[int], p: float, allow_eos: bool, eos: int,
                        control: range) -> int:
    """The reference's greedy rule written out per id."""
    x = logits.clone()
    for i in seen:
        x[i] = x[i] * p if x[i] < 0 else x[i] / p
    if not allow_eos:
        x[eos] = -math.inf
    for i in control:
        if i != eos:
            x[i] = -math.inf
    return int(x.argmax())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_seen=st.integers(0, 30), p=st.sampled_from([1.0, 1.05, 1.3, 2.0]),
       allow=st.booleans())
def test_greedy_group0_rule_matches_the_reference_rule(qmodel, seed, n_seen, p, allow):
    cfg = qmodel.cfg
    gen = torch.Generator().manual_seed(seed)
    v = cfg.talker.vocab_size
    logits = torch.randn(1, v, generator=gen) * 5
    logits[0, cfg.codec.eos] += 8 * torch.rand(1, generator=gen).item()  # EOS often the best when allowed
    seen_ids = set(torch.randint(0, v, (n_seen,), generator=gen).tolist()) | {int(logits.argmax())}
    seen = torch.zeros(1, v, dtype=torch.bool)
    seen[0, list(seen_ids)] = True
    s = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling.greedy(p)], [seed])
    ids, lp = qmodel.choose(logits, s, torch.tensor([3]), seen=seen, allow_eos=torch.tensor([allow]))
    assert int(ids) == plain_group0_argmax(logits[0], seen_ids, p, allow, cfg.codec.eos, cfg.control_ids)
    assert float(lp) == 0.0  # greedy: a point mass


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**62), frame=st.integers(0, 5000), allow=st.booleans(),
       temp=st.floats(0.3, 2.0), top_k=st.sampled_from([0, 1, 5, 50, 100]), top_p=st.sampled_from([0.5, 0.9, 1.0]))
def test_sampled_group0_stays_in_the_allowed_support_with_exact_logprob(qmodel, seed, frame, allow, temp, top_k, top_p):
    cfg = qmodel.cfg
    logits = torch.randn(1, cfg.talker.vocab_size, generator=torch.Generator().manual_seed(seed % 2**31)) * 3
    logits[0, list(cfg.control_ids)] += 10.0  # control ids would win if they were not suppressed
    st_ = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling(HeadSampling(temp, top_k, top_p), SAMPLED.subtalker, 1.0)], [seed])
    ids, lp = qmodel.choose(logits, st_, torch.tensor([frame]), seen=None, allow_eos=torch.tensor([allow]))
    i = int(ids)
    assert i < cfg.control_ids.start or (allow and i == cfg.codec.eos)
    masked = logits.clone()
    masked[0, [c for c in cfg.control_ids if c != cfg.codec.eos or not allow]] = -math.inf
    z = processed(masked, st_.temperature[:, 0], st_.top_k[:, 0], st_.top_p[:, 0])
    torch.testing.assert_close(lp, torch.log_softmax(z, -1)[0, i:i + 1], atol=1e-6, rtol=1e-6)


@pytest.mark.exact
def test_sampled_generation_alone_equals_batched_and_logprobs_are_exact(qmodel, qref):
    keys = KEYS[:4]
    prompts = [torch.from_numpy(qref[f"{k}_prompt_embeds"]) for k in keys]
    trailing = [torch.from_numpy(qref[f"{k}_trailing_text"]) for k in keys]
    mixed = [SAMPLED, Qwen3TTSSampling.greedy(1.05), Qwen3TTSSampling(HeadSampling(1.2, 0, 0.8), HeadSampling(0.7, 20, 1.0)),
             SAMPLED]
    seeds = [11, 12, 13, 11]
    together = generate_batch(qmodel, prompts, trailing, mixed, seeds, max_new_tokens=8)
    for i in range(len(keys)):
        (alone,) = generate_batch(qmodel, [prompts[i]], [trailing[i]], [mixed[i]], [seeds[i]], max_new_tokens=8)
        assert torch.equal(alone.codes, together[i].codes), keys[i]
        s = alone.codes.shape[0]
        torch.testing.assert_close(alone.logprobs[:s], together[i].logprobs[:s], atol=1e-5, rtol=0)
        if alone.stopped:  # the stop choice itself (its frame is never completed)
            torch.testing.assert_close(alone.logprobs[s, 0], together[i].logprobs[s, 0], atol=1e-5, rtol=0)
    # code-predictor logprobs are log_softmax of the processed distribution the code was drawn from
    g = together[0]
    sub = mixed[0].subtalker
    f = g.raw_codes.shape[0]
    z = processed(g.cp_logits.reshape(-1, g.cp_logits.shape[-1]), torch.full((f * 15,), sub.temperature),
                  torch.full((f * 15,), sub.top_k), torch.full((f * 15,), sub.top_p))
    expect = torch.log_softmax(z, -1).gather(1, g.raw_codes[:, 1:].reshape(-1, 1)).view(f, 15)
    torch.testing.assert_close(g.logprobs[:f, 1:], expect, atol=1e-5, rtol=1e-5)
    # the same seed gives the same run; another seed another one
    (again,) = generate_batch(qmodel, [prompts[0]], [trailing[0]], [SAMPLED], [11], max_new_tokens=8)
    (other,) = generate_batch(qmodel, [prompts[0]], [trailing[0]], [SAMPLED], [99], max_new_tokens=8)
    assert torch.equal(again.codes, together[0].codes)
    assert not torch.equal(other.codes, together[0].codes)


@pytest.mark.exact
def test_frame_step_batched_equals_each_row_alone(qmodel, qref):
    """Rows at different positions in arbitrary slots, mixed settings: codes identical, floats close."""
    keys = ("cv", "icl", "xv")
    dev = qmodel.device
    settings_ = [SAMPLED, Qwen3TTSSampling.greedy(), Qwen3TTSSampling(HeadSampling(1.5, 3, 0.7), HeadSampling(1.1, 0, 0.6))]
    seeds, slots = [5, 6, 7], torch.tensor([2, 0, 1])
    cache = qmodel.allocate_kv(3, 64)
    hidden, c0, pos, text = [], [], [], []
    for j, k in enumerate(keys):  # prefill each prompt into its slot
        x = torch.from_numpy(qref[f"{k}_prompt_embeds"])
        t = x.shape[0]
        h, lg = qmodel.prefill(x[None], cache, slots[j:j + 1], torch.arange(t)[None], torch.ones(1, t, dtype=torch.bool),
                               torch.tensor([t - 1]), t)
        hidden.append(h[0])
        c0.append(int(lg.argmax()))
        pos.append(t)
        text.append(torch.from_numpy(qref[f"{k}_trailing_text"][0]))
    h, c, p, tt = torch.stack(hidden), torch.tensor(c0), torch.tensor(pos), torch.stack(text)
    frame = torch.tensor([0, 3, 7])
    s = Qwen3TTSSamplingTensors.build(settings_, seeds, dev)
    saved_k, saved_v = cache.k.clone(), cache.v.clone()
    together = qmodel.frame_step(h, c, tt, s, frame, cache, slots, p, context_len=64)
    for j in range(3):
        cache.k.copy_(saved_k)
        cache.v.copy_(saved_v)
        alone = qmodel.frame_step(h[j:j + 1], c[j:j + 1], tt[j:j + 1], s.rows(torch.tensor([j])), frame[j:j + 1],
                                  cache, slots[j:j + 1], p[j:j + 1], context_len=64)
        assert torch.equal(alone.frame.codes[0], together.frame.codes[j])
        torch.testing.assert_close(alone.logits[0], together.logits[j], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone.frame.logprobs[0], together.frame.logprobs[j], atol=1e-5, rtol=1e-5)
