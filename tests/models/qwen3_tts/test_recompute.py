"""The Qwen3-TTS RL recompute: teacher-forced logprobs equal the ones recorded while sampling, and backprop.

Runs are made by the model layer's seeded step functions (`generate_batch`: `prefill`, `frame_step`,
`choose`), then `v2.families.qwen3_tts.recompute.logprobs` scores the same codes in one causal pass. In
float64 the two agree to rounding (the processing is the same function on the same logits); in float32 they
differ by the rounding of a different operation order (cached steps vs one pass), ~1e-5 at these logits.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.families.qwen3_tts.recompute import logprobs
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import Qwen3Generation, generate_batch
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.sampling_settings import HeadSampling

from .conftest import CHECKPOINT, KEYS, QWEN_DIR


@lru_cache(maxsize=1)
def model64() -> Qwen3TTS:
    """The fixture in float64: sampler and recompute then agree to rounding (a function, not a fixture, so
    hypothesis does not print the module tree with a failing example)."""
    return Qwen3TTS.from_pretrained(CHECKPOINT, dtype=torch.float64)


@lru_cache(maxsize=None)
def rows_of(key: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixture prompt's rows [T, H] and trailing text rows [Tt, H] (read here, not through a fixture, so
    hypothesis reports a failing example without the whole reference)."""
    with np.load(QWEN_DIR / "reference.npz") as ref:
        return (torch.from_numpy(ref[f"{key}_prompt_embeds"]).to(dtype),
                torch.from_numpy(ref[f"{key}_trailing_text"]).to(dtype))


def recorded(g: Qwen3Generation) -> torch.Tensor:
    """What the sampler recorded for the trajectory: [F (+1 on a stop), G]. After its stop a row of a batch
    still running is fed EOS and its other codes predicted (junk), so the stop row keeps group 0 only."""
    f = g.codes.shape[0]
    out = g.logprobs[: f + int(g.stopped)].clone()
    out[f:, 1:] = 0
    return out


heads = st.builds(HeadSampling, temperature=st.one_of(st.just(0.0), st.floats(0.3, 1.6)),
                  top_k=st.sampled_from([0, 1, 5, 50, 100, 3000]), top_p=st.sampled_from([0.5, 0.8, 0.95, 1.0]))
samplings = st.builds(Qwen3TTSSampling, talker=heads, subtalker=heads,
                      repetition_penalty=st.sampled_from([1.0, 1.05, 1.3, 0.8]))


@settings(max_examples=20, deadline=None)
@given(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=2), sampling=st.lists(samplings, min_size=2, max_size=2),
       seed=st.integers(0, 2**62), min_frames=st.integers(0, 3), budget=st.integers(2, 9))
@pytest.mark.exact
def test_recompute_equals_the_sampled_logprobs(keys, sampling, seed, min_frames, budget):
    """Over the accepted settings (greedy included), rows sampled together in one batch."""
    model = model64()
    rows = [rows_of(k, torch.float64) for k in keys]
    runs = generate_batch(model, [r[0] for r in rows], [r[1] for r in rows], sampling[: len(keys)],
                          [seed + i for i in range(len(keys))], max_new_tokens=budget, min_new_tokens=min_frames)
    for (prompt, trailing), s, g in zip(rows, sampling, runs):
        out = logprobs(model, prompt, trailing, g.codes, s, min_frames=min_frames, final_stop=g.stopped)
        assert out.shape == (g.codes.shape[0] + int(g.stopped), model.num_code_groups)
        torch.testing.assert_close(out, recorded(g), atol=1e-5, rtol=0)
        if s.talker.temperature == 0:  # greedy: a point mass on the chosen id
            assert torch.all(out[:, 0] == 0)
        if s.subtalker.temperature == 0:
            assert torch.all(out[:, 1:] == 0)
        if g.stopped:
            assert torch.all(out[-1, 1:] == 0)


def test_a_forced_continue_and_a_natural_stop_are_both_scored():
    """min_frames past the budget masks EOS at every choice; with no minimum the greedy fixture stops."""
    model = model64()
    prompt, trailing = rows_of("xv", torch.float64)
    sampled = Qwen3TTSSampling()
    (forced,) = generate_batch(model, [prompt], [trailing], [sampled], [3], max_new_tokens=6, min_new_tokens=6)
    assert not forced.stopped and forced.codes.shape[0] == 5
    out = logprobs(model, prompt, trailing, forced.codes, sampled, min_frames=6)
    torch.testing.assert_close(out, recorded(forced), atol=1e-5, rtol=0)
    # the same codes scored as if EOS had been allowed: another distribution, other logprobs
    assert not torch.allclose(logprobs(model, prompt, trailing, forced.codes, sampled, min_frames=0)[:, 0],
                              out[:, 0], atol=1e-4)
    (stop,) = generate_batch(model, [prompt], [trailing], [Qwen3TTSSampling.greedy(1.05)], [0], max_new_tokens=12)
    assert stop.stopped
    out = logprobs(model, prompt, trailing, stop.codes, Qwen3TTSSampling.greedy(1.05), final_stop=True)
    assert out.shape == (stop.codes.shape[0] + 1, model.num_code_groups) and torch.all(out == 0)


@pytest.mark.exact
def test_float32_recompute_is_within_rounding_of_the_sampler(qmodel):
    """The runtime's dtype: the same logprobs up to the rounding of another operation order."""
    s = Qwen3TTSSampling()
    for key in KEYS:
        prompt, trailing = rows_of(key, torch.float32)
        (g,) = generate_batch(qmodel, [prompt], [trailing], [s], [17], max_new_tokens=8)
        out = logprobs(qmodel, prompt, trailing, g.codes, s, final_stop=g.stopped)
        torch.testing.assert_close(out, recorded(g), atol=1e-4, rtol=0)


def test_gradients_flow_to_the_talker_and_the_code_predictor():
    model = Qwen3TTS.from_pretrained(CHECKPOINT)
    prompt, trailing = rows_of("cv", torch.float32)
    s = Qwen3TTSSampling()
    (g,) = generate_batch(model, [prompt], [trailing], [s], [5], max_new_tokens=6)
    model.requires_grad_(True)
    out = logprobs(model, prompt, trailing, g.codes, s, final_stop=g.stopped)
    torch.testing.assert_close(out.detach(), recorded(g), atol=1e-4, rtol=0)
    out.sum().backward()
    talker = model.talker
    for name, p in [("talker layer 0 qkv", talker.model.layers[0].self_attn.qkv_proj.weight),
                    ("talker last mlp", talker.model.layers[-1].mlp.down_proj.weight),
                    ("codec_head", talker.codec_head.weight), ("codec_embedding", talker.model.codec_embedding.weight),
                    ("code predictor layer 0", talker.code_predictor.model.layers[0].self_attn.qkv_proj.weight),
                    ("code predictor head 1", talker.code_predictor.lm_head[0].weight),
                    ("text projection", talker.text_projection.linear_fc2.weight)]:
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_bad_arguments_name_the_argument(qmodel):
    prompt, trailing = rows_of("cv", torch.float32)
    codes = torch.zeros(2, qmodel.num_code_groups, dtype=torch.long)
    with pytest.raises(ValueError, match="prompt_rows"):
        logprobs(qmodel, prompt[0], trailing, codes, Qwen3TTSSampling())
    with pytest.raises(ValueError, match="min_frames"):
        logprobs(qmodel, prompt, trailing, codes, Qwen3TTSSampling(), min_frames=-1)
    assert logprobs(qmodel, prompt, trailing, codes[:0], Qwen3TTSSampling()).shape == (0, qmodel.num_code_groups)
