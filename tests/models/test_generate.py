"""The reference loop: seeded sampling alone == in a batch, limits honoured, logprobs recomputable."""

from __future__ import annotations

import pytest
import torch

from v2.models.moss_tts_local.generate import generate, generate_batch, resolve_settings
from v2.models.moss_tts_local.prompt import build_prompt
from v2.models.sampling import SamplingTensors, apply_repetition_penalty, process_logits
from v2.sampling_settings import SamplingSettings
from v2.models.moss_tts_local.tokenizer import ByteTokenizer

pytestmark = pytest.mark.exact

TEXTS = ["Hello there.", "A somewhat longer sentence to speak aloud.", "Short.", "Numbers: 1, 2, 3."]


def prompts(model, n: int) -> list[torch.Tensor]:
    return [build_prompt(ByteTokenizer(), model.cfg, TEXTS[i % len(TEXTS)] + " " * (i // len(TEXTS)))
            for i in range(n)]


def test_seeded_request_is_identical_alone_and_among_16(tiny_model, tiny_card):
    ps = prompts(tiny_model, 16)
    sampling = [tiny_card.loops.ar_decode.sampling.settings(), SamplingSettings.uniform(1.0, 20, 0.9, 1.3)] * 8
    seeds = [1000 + i for i in range(16)]
    together = generate_batch(tiny_model, ps, sampling, seeds, max_frames=24, min_frames=2)
    for i in (0, 5, 11):
        (alone,) = generate_batch(tiny_model, [ps[i]], [sampling[i]], [seeds[i]], max_frames=24, min_frames=2)
        assert torch.equal(alone.codes, together[i].codes)
        assert alone.stopped == together[i].stopped
        torch.testing.assert_close(alone.logprobs, together[i].logprobs, atol=1e-5, rtol=0)
    assert len({tuple(g.codes.flatten().tolist()) for g in together}) == 16  # different seeds, different codes


def test_generate_is_deterministic_and_honours_min_and_max_frames(tiny_model):
    (p,) = prompts(tiny_model, 1)
    a = generate(tiny_model, p, max_frames=30, seed=3)
    b = generate(tiny_model, p, max_frames=30, seed=3)
    assert torch.equal(a, b) and a.dtype == torch.long and a.shape[1] == 12
    assert int(a.max()) < 1024 and int(a.min()) >= 0
    for seed in range(6):
        codes = generate(tiny_model, p, max_frames=9, min_frames=9, seed=seed)
        assert codes.shape == (9, 12)
    lengths = {generate(tiny_model, p, max_frames=40, seed=s).shape[0] for s in range(4)}
    assert len(lengths) > 1  # the stop head is sampled, not forced


def test_forced_continue_has_logprob_zero_for_the_stop_channel(tiny_model):
    (p,) = prompts(tiny_model, 1)
    (gen,) = generate_batch(tiny_model, [p], [SamplingSettings()], [0], max_frames=6, min_frames=4)
    assert torch.all(gen.logprobs[:4, 0] == 0.0)


def test_logprobs_equal_teacher_forced_recompute(tiny_model):
    ps = prompts(tiny_model, 2)
    settings = [SamplingSettings.uniform(1.3, 30, 0.85, 1.2), SamplingSettings()]
    gens = generate_batch(tiny_model, ps, settings, [11, 12], max_frames=10, min_frames=10)
    for gen, s in zip(gens, settings):
        stop_logits, code_logits = tiny_model.frame_logits(gen.hidden, gen.codes)
        tensors = SamplingTensors.build([s] * len(gen.codes), [0] * len(gen.codes))
        presence = torch.zeros(12, 1024, dtype=torch.bool)
        for f in range(len(gen.codes)):
            lp = []
            z = process_logits(stop_logits[f : f + 1].masked_fill(torch.tensor([[False, True]]), -torch.inf),
                               tensors.temperature[f : f + 1, 0], tensors.top_k[f : f + 1, 0], tensors.top_p[f : f + 1, 0])
            lp.append(torch.log_softmax(z, -1)[0, 0])
            for c in range(12):
                logits = apply_repetition_penalty(code_logits[f : f + 1, c], presence[c][None], tensors.penalty[f : f + 1, 1 + c])
                z = process_logits(logits, tensors.temperature[f : f + 1, 1 + c], tensors.top_k[f : f + 1, 1 + c],
                                   tensors.top_p[f : f + 1, 1 + c])
                lp.append(torch.log_softmax(z, -1)[0, gen.codes[f, c]])
            torch.testing.assert_close(torch.stack(lp), gen.logprobs[f], atol=1e-5, rtol=1e-5)
            presence[torch.arange(12), gen.codes[f]] = True


def test_single_sampling_argument_overrides_both_heads():
    s = resolve_settings(None, 0.7, None, None, 1.1)
    assert s.stop.temperature == s.audio.temperature == 0.7
    assert (s.stop.top_k, s.audio.top_k) == (50, 25) and s.repetition_penalty == 1.1
    base = SamplingSettings.uniform(1.0, 5, 0.5)
    assert resolve_settings(base, None, None, None, 1.0) == base
