"""Batched == alone (bit for bit), seeded sampling with exact logprobs, and the cached loop against one-pass
recomputes of the backbone and the depth decoder."""

from __future__ import annotations

import pytest
import torch

from v2.models.csm.config import CsmSampling
from v2.models.csm.generate import generate_batch
from v2.models.csm.sampling import CsmSamplingTensors
from v2.models.sampling import processed
from v2.sampling_settings import HeadSampling

from .conftest import KEYS

SAMPLED = CsmSampling(HeadSampling(0.9, 50, 1.0), HeadSampling(0.9, 50, 1.0))
MIXED = [SAMPLED, CsmSampling.greedy(), CsmSampling(HeadSampling(1.3, 0, 0.8), HeadSampling(0.7, 5, 1.0))]


def prefill_alone(model, rows: torch.Tensor, cache, slot: int):
    t = rows.shape[0]
    return model.prefill(rows[None], cache, torch.tensor([slot]), torch.arange(t)[None],
                         torch.ones(1, t, dtype=torch.bool), torch.tensor([t - 1]), t)


@pytest.mark.exact
def test_batched_prefill_and_frame_step_equal_each_row_alone(cmodel, cref):
    """Prompts of 11, 14 and 32 rows in permuted slots, mixed settings, seeds and frame indices."""
    prompts = [torch.from_numpy(cref[f"{k}_prompt_embeds"]) for k in KEYS]
    lengths = torch.tensor([p.shape[0] for p in prompts])
    slots, seeds, frames = torch.tensor([2, 0, 1]), [5, 6, 7], torch.tensor([0, 3, 11])
    s = CsmSamplingTensors.build(MIXED, seeds)
    with torch.no_grad():
        cache = cmodel.allocate_kv(3, 64)
        t_max = int(lengths.max())
        x = torch.zeros(3, t_max, cmodel.cfg.hidden_size)
        valid = torch.zeros(3, t_max, dtype=torch.bool)
        for i, p in enumerate(prompts):  # left-padded, each row at its own positions
            x[i, t_max - p.shape[0]:] = p
            valid[i, t_max - p.shape[0]:] = True
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        hidden, logits = cmodel.prefill(x, cache, slots, positions, valid, torch.full((3,), t_max - 1), t_max)
        step = cmodel.frame_step(hidden, logits, s, frames, cache, slots, lengths, context_len=t_max + 1)
        for i, p in enumerate(prompts):
            own = cmodel.allocate_kv(1, 64)
            h, lg = prefill_alone(cmodel, p, own, 0)
            assert torch.equal(h[0], hidden[i]) and torch.equal(lg[0], logits[i])
            alone = cmodel.frame_step(h, lg, s.rows(torch.tensor([i])), frames[i:i + 1], own, torch.tensor([0]),
                                      lengths[i:i + 1])
            for name in ("codes", "logprobs", "depth_logits", "stop"):
                assert torch.equal(getattr(alone.frame, name)[0], getattr(step.frame, name)[i]), (KEYS[i], name)
            for name in ("row", "hidden", "logits"):
                assert torch.equal(getattr(alone, name)[0], getattr(step, name)[i]), (KEYS[i], name)


@pytest.mark.exact
def test_sampled_generation_alone_equals_batched(cmodel, cref):
    prompts = [torch.from_numpy(cref[f"{k}_prompt_embeds"]) for k in KEYS] + [torch.from_numpy(cref["s0_prompt_embeds"])]
    settings, seeds = MIXED + [SAMPLED], [11, 12, 13, 11]
    together = generate_batch(cmodel, prompts, settings, seeds, max_new_tokens=5)
    for i in range(len(prompts)):
        (alone,) = generate_batch(cmodel, [prompts[i]], [settings[i]], [seeds[i]], max_new_tokens=5)
        assert torch.equal(alone.codes, together[i].codes), i
        assert torch.equal(alone.logprobs, together[i].logprobs), i
        assert alone.stop_frame == together[i].stop_frame
    assert torch.equal(together[0].codes, together[3].codes)  # same prompt, same seed
    (other,) = generate_batch(cmodel, [prompts[0]], [SAMPLED], [99], max_new_tokens=5)
    assert not torch.equal(other.codes, together[0].codes)
    (greedy,) = generate_batch(cmodel, [prompts[1]], [CsmSampling.greedy()], [12345], max_new_tokens=5)
    assert torch.equal(greedy.codes, torch.from_numpy(cref["s1_gen_codes"][:5]))  # greedy ignores the seed


def test_sampled_logprobs_are_those_of_the_processed_distribution(cmodel, cref):
    setting = CsmSampling(HeadSampling(1.2, 40, 0.9), HeadSampling(0.8, 0, 0.95))
    (g,) = generate_batch(cmodel, [torch.from_numpy(cref["ctx_prompt_embeds"])], [setting], [3], max_new_tokens=4)
    f, n = g.codes.shape

    def expect(logits: torch.Tensor, codes: torch.Tensor, head: HeadSampling) -> torch.Tensor:
        rows = logits.shape[0]
        z = processed(logits, torch.full((rows,), head.temperature), torch.full((rows,), head.top_k),
                      torch.full((rows,), head.top_p))
        assert bool(torch.isfinite(z.gather(1, codes[:, None])).all())  # every code lies in its support
        return torch.log_softmax(z, -1).gather(1, codes[:, None])[:, 0]

    torch.testing.assert_close(g.logprobs[:, 0], expect(g.c0_logits, g.codes[:, 0], setting.backbone), atol=1e-6, rtol=0)
    depth = expect(g.depth_logits.reshape(-1, g.depth_logits.shape[-1]), g.codes[:, 1:].reshape(-1), setting.depth)
    torch.testing.assert_close(g.logprobs[:, 1:], depth.view(f, n - 1), atol=1e-6, rtol=0)


def test_cached_loop_equals_one_pass_recompute(cmodel, cref):
    """The sampled run's backbone states and depth logits against a causal pass over prompt + fed frames
    and the depth decoder's teacher-forced pass over the chosen codes."""
    prompt = torch.from_numpy(cref["s1_prompt_embeds"])
    (g,) = generate_batch(cmodel, [prompt], [SAMPLED], [21], max_new_tokens=6)
    f, t = g.codes.shape[0], prompt.shape[0]
    with torch.no_grad():
        rows = torch.cat([prompt, cmodel.embed_frame(g.codes[: f - 1])])
        hidden, logits = cmodel.backbone_teacher(rows[None])
        _, _, depth_logits = cmodel.depth_teacher(g.hidden, g.codes)
    torch.testing.assert_close(hidden[0, t - 1:], g.hidden, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[0, t - 1:], g.c0_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(depth_logits, g.depth_logits, atol=1e-4, rtol=1e-4)
