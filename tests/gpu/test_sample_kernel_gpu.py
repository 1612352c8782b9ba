"""On a GPU: the fused sampling kernel at MOSS's codebook size and at Qwen3-TTS's 16 groups, batch 64, against
the torch sampler (the same seeded noise bits: counter = steps * groups + group)."""

from __future__ import annotations

import pytest
import torch

from v2.models.kernels.sample import sample_fused
from v2.models.sampling import apply_repetition_penalty, gumbel_noise, sample

pytestmark = pytest.mark.gpu


def _settings(b: int, v: int) -> tuple[torch.Tensor, ...]:
    rows = torch.arange(b, device="cuda")
    temp = torch.tensor([0.0, 0.5, 1.0, 1.7], device="cuda")[rows % 4]
    top_k = torch.tensor([0, 1, 25, 200, v], device="cuda")[rows % 5]
    top_p = torch.tensor([1.0, 0.8, 0.3], device="cuda")[rows % 3]
    return rows, temp, top_k, top_p


def test_fused_draw_equals_the_torch_sampler_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    b, v = 64, 1025
    logits = torch.randn(b, v, device="cuda", generator=g) * 4
    logits[::4] = (logits[::4] * 2).round() / 2  # ties
    rows, temp, top_k, top_p = _settings(b, v)
    seed, steps = rows * 7919 - 5, rows * 3 + 1
    presence = torch.rand(b, v, device="cuda", generator=g) < 0.2
    penalty = torch.tensor([1.0, 1.3], device="cuda")[rows % 2]
    ids, lp = sample_fused(logits, temp, top_k, top_p, seed, steps, 4, presence, penalty, groups=13)
    want_ids, want_lp = sample(apply_repetition_penalty(logits, presence, penalty), temp, top_k, top_p,
                               gumbel_noise(seed, steps * 13 + 4, v))
    # the kernel's float logarithms may differ from torch's in the last bit: a near-tie may flip, rarely
    assert (ids == want_ids).float().mean() >= 62 / 64
    same = ids == want_ids
    torch.testing.assert_close(lp[same], want_lp[same], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("group", [0, 1, 15])
def test_sixteen_groups_draw_as_the_torch_path_on_cuda(group):
    """Qwen3-TTS's frame: group 0 over 3072 ids with its penalty, EOS rule and suppressed control ids; the code
    groups over 2048. The noise is the torch path's: at temperature 1 without top-k / top-p a draw is the argmax
    of logits + noise (up to the last bit of the kernel's logarithms: a near-tie may flip, rarely)."""
    g = torch.Generator(device="cuda").manual_seed(group)
    b, v = 64, 3072 if group == 0 else 2048
    logits = torch.randn(b, v, device="cuda", generator=g) * 3
    rows, temp, top_k, top_p = _settings(b, v)
    seed, steps = rows * 104729 + 17, rows * 5 + 2
    presence = penalty = banned = stop = None
    masked = logits
    if group == 0:
        presence = torch.rand(b, v, device="cuda", generator=g) < 0.05
        penalty = torch.full((b,), 1.05, device="cuda")
        banned = torch.arange(v, device="cuda") >= 2048
        banned[2150] = False
        stop = (2150, rows % 2 == 0)
        masked = apply_repetition_penalty(logits, presence, penalty).masked_fill(banned[None], float("-inf"))
        masked[:, 2150] = masked[:, 2150].masked_fill(~stop[1], float("-inf"))
    ids, lp = sample_fused(logits, temp, top_k, top_p, seed, steps, group, presence, penalty, groups=16,
                           banned=banned, stop=stop)
    want_ids, want_lp = sample(masked, temp, top_k, top_p, gumbel_noise(seed, steps * 16 + group, v))
    assert (ids == want_ids).float().mean() >= 62 / 64
    same = ids == want_ids
    torch.testing.assert_close(lp[same], want_lp[same], atol=1e-5, rtol=1e-5)
    ones = torch.ones(b, device="cuda")
    plain, _ = sample_fused(logits, ones, torch.zeros_like(top_k), ones, seed, steps, group, groups=16)
    noise = gumbel_noise(seed, steps * 16 + group, v)
    assert (plain == (logits + noise).argmax(-1)).float().mean() >= 62 / 64
