"""A frame's N draws through the shared frame sampler (`sampling.FrameDraws`) equal the plain torch draws
(`sampling.draw`) bit for bit: codes and logprobs, greedy rows scored under their raw logits, at the release's
2051 ids and 32 codebooks, for every setting and batch the family takes."""

from __future__ import annotations

import pytest
import torch

from v2.models.csm.config import CsmSampling
from v2.models.csm.sampling import BACKBONE, DEPTH, CsmSamplingTensors, FrameDraws, draw
from v2.sampling_settings import HeadSampling

pytestmark = pytest.mark.exact

V, N = 2051, 32
HEADS = [HeadSampling(0.0, 0, 1.0), HeadSampling(0.9, 50, 1.0), HeadSampling(1.3, 3, 0.7),
         HeadSampling(0.5, 64, 0.95), HeadSampling(5e-5, 10, 1.0), HeadSampling(0.0, 7, 0.5)]


def _logits(k: int, b: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(b, V, generator=gen) * (3.0 if k % 2 else 8.0)
    if k % 7 == 3:
        x = (x * 2).round() / 2  # ties: the stable order decides
    if k % 11 == 5:
        x[:, :100] = x.max()  # ties at the maximum past the 64 candidates: the fallback
    return x


@pytest.mark.parametrize("batch,case", [(1, 0), (1, 1), (3, 2), (5, 3), (16, 4), (16, 5)])
def test_the_shared_frame_sampler_draws_as_the_torch_path(batch, case):
    if case == 0:  # greedy for both heads: every codebook the first argmax alone
        settings = [CsmSampling(HEADS[0], HEADS[0])] * batch
    else:
        settings = [CsmSampling(HEADS[(case + i) % 6], HEADS[(3 * case + 2 * i) % 6]) for i in range(batch)]
    s = CsmSamplingTensors.build(settings, [case * 1000 + 7 * i - 3 for i in range(batch)])
    assert not s.full_sort
    gen = torch.Generator().manual_seed(case)
    frame = torch.randint(0, 500, (batch,), generator=gen)
    draws = FrameDraws(s, frame, N, V)
    assert draws.host is not None
    for k in range(N):
        x = _logits(k, batch, gen)
        want_ids, want_lp = draw(x, s, BACKBONE if k == 0 else DEPTH, frame, k, N)
        ids, lp = draws.draw(k, x)
        assert torch.equal(ids, want_ids), k
        assert torch.equal(lp, want_lp), k
    greedy = s.temperature[:, DEPTH] < 1e-4
    if greedy.any():  # greedy rows report log_softmax(raw)[id], not the point mass's 0
        assert (lp[greedy] < 0).all()


def test_rows_that_need_the_full_sort_take_the_torch_path():
    s = CsmSamplingTensors.build([CsmSampling(HeadSampling(0.9, 0, 0.8), HEADS[1])], [4])
    assert s.full_sort and FrameDraws(s, torch.zeros(1, dtype=torch.long), N, V).host is None
